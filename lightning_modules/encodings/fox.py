import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod
from lightning_modules.encodings.init_reference import torch_linear


class Fox(PositionalEncoding):
    """Forgetting attention: a data-dependent decay bias sum_{t=j+1}^{i} log f_t, with forget gates
    f_t = sigmoid(w_h . x_t + b_h) per head.

    Lin et al., ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate" (x-transformers'
    `DataDependentAlibi`, `data_dependent_alibi=True`): bias_h(i, j) = c_i - c_j with c the cumulative sum of
    log f over the sequence; causal only (the decay runs from the past to the query). Gate bias initialised
    to `bias_init` (5, as x-transformers: f ~ 0.993, a slow decay), weights as nn.Linear's default.
    Deviations: the encoding contract hands each layer's keys, not its input, to the encoding, so the gates
    read the concatenated keys k_t = W_k x_t + b_k (an invertible reparametrisation of x_t for a full-rank
    W_k: the same function class, other training dynamics), and one gate layer serves every layer (each with
    its own keys); FoX and x-transformers hold one per layer. Equal to x-transformers' `DataDependentAlibi`
    fed the keys with the same weights (checked). No position enters except through the causal order.
    """

    name = "fox"
    init_reference = {"gates.weight": torch_linear(lambda e: e.dim), "gates.bias": ("const", 5.0)}  # bias_init 5
    causal_only = True
    flex = True
    shift_invariant = True  # positions enter only through the causal order

    def __init__(self, *, bias_init: float = 5.0, **common):
        super().__init__(**common)
        self.gates = nn.Linear(self.dim, self.num_heads)
        nn.init.constant_(self.gates.bias, bias_init)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        cumulative = self.cumulative(k)  # (B, H, L)
        return cumulative[..., :, None] - cumulative[..., None, :]  # (B, H, L, L); j > i is masked

    def cumulative(self, k: Tensor) -> Tensor:
        """(B, H, L, D) keys -> (B, H, L) the running sums c_t of log f_t."""
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D)  # (B, L, C)
        return F.logsigmoid(self.gates(keys)).transpose(1, 2).cumsum(-1)  # (B, H, L)

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod:
        cumulative = self.cumulative(k)
        return lambda score, b, h, i, j: score + cumulative[b, h, i] - cumulative[b, h, j]
