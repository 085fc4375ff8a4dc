import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import torch_linear
from pe_core.ranges import PositiveInt


class PerRowDataDependentAlibi(PositionalEncoding):
    """Per-row data-dependent ALiBi: forgetting attention whose forget gates depend on the query's row too,
    bias_h(i, j) = sum_{t=j}^{i-1} log sigmoid(a_i . b_t / sqrt(d)), with small gate queries a and keys b
    (width d = `gate_dim`, 8) per head.

    x-transformers' `PerRowDataDependentAlibi` (`data_dependent_alibi=True, data_dependent_alibi_per_row=True`,
    lucidrains; no paper), a variant of FoX's forgetting decay (Lin et al., ICLR 2025, "Forgetting Transformer",
    `fox` here): where FoX's gate f_t is one number per key, here it is one per (query row i, key t), so each
    query chooses how fast it forgets. The gates (a, b) are one bias-free linear map, initialised as
    nn.Linear's default (as x-transformers). Causal only (x-transformers: "bidirectional not supported yet");
    bias(i, i) = 0 and bias(i, j) <= 0, non-increasing as j moves away from i.
    Deviations: the encoding contract hands each layer its keys, not its input, so the gates read the
    concatenated keys k_t = W_k x_t + b_k (an invertible reparametrisation of x_t for a full-rank W_k: the same
    function class, other training dynamics), and one gate layer serves every layer (each with its own keys);
    x-transformers holds one per layer. Equal to x-transformers' `PerRowDataDependentAlibi` fed the keys with
    the same weights (checked). Not a FlexAttention score_mod: a logit sums over the keys between j and i.
    No position enters except through the causal order.
    """

    name = "dd_alibi_row"
    init_reference = {"gates.weight": torch_linear(lambda e: e.dim)}
    causal_only = True
    shift_invariant = True  # positions enter only through the causal order

    def __init__(self, *, gate_dim: PositiveInt = 8, **common):
        super().__init__(**common)
        self.gate_dim = gate_dim
        self.gates = nn.Linear(self.dim, 2 * self.num_heads * gate_dim, bias=False)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D)  # (B, L, C)
        rows, cols = self.gates(keys).float().view(B, L, 2, H, self.gate_dim).permute(2, 0, 3, 1, 4)  # (B, H, L, d)
        log_f = F.logsigmoid(rows @ cols.transpose(-1, -2) * self.gate_dim**-0.5)  # (B, H, L, L): log f_it
        log_f = log_f.masked_fill(torch.ones(L, L, dtype=torch.bool, device=k.device).triu(), 0.0)  # t < i only
        return log_f.flip(-1).cumsum(-1).flip(-1)  # sum over t >= j (of t < i); j > i is masked
