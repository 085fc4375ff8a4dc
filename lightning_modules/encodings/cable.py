import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod
from lightning_modules.encodings.precision import compute_dtype, fp32_mlp


class Cable(PositionalEncoding):
    """CABLE: a learned, token-specific ALiBi. Each token t gets a non-negative slope per head,
    m_t = softplus(w_h . x_t + b_h), and the logit of query i on key j <= i is penalised by the slopes of the
    tokens between them: bias_h(i, j) = -sum_{t=j+1}^{i} m_t = c_i - c_j with c_t = -sum_{s<=t} m_s.

    Reference: axiomlab/Cable, src/Cable.py, `CausalSelfAttention`: `h_attn = nn.Linear(n_embd, n_head)`,
    `b = cumsum(-softplus(h_attn(x)), dim=1)`, `Bias = b[..., :, None] - b[..., None, :]` plus the causal mask,
    added to the logits before the softmax; `h_attn` initialised as every Linear of that model (nanoGPT's
    `_init_weights`): weight N(0, 0.02^2), bias 0 (so every slope starts at softplus(0) = log 2, ALiBi's
    distance penalty with slope log 2 up to the content-dependent spread). With constant slopes (w = 0) it is
    ALiBi with slope softplus(b_h); as the slopes go to 0 it is NoPE. Causal only (the reference is a causal
    decoder; the cumulative sum runs from the past to the query).
    Deviations: (1) the encoding contract hands each layer's keys, not its input, to the encoding, so the slopes
    read the concatenated keys k_t = W_k x_t + b_k (as `fox`: an invertible reparametrisation of x_t for a
    full-rank W_k, the same function class, other training dynamics), and one slope layer serves every layer
    (each with its own keys); the reference holds one per layer. (2) The content logits keep this framework's
    1/sqrt(D) scale; the reference divides q and k each by sqrt(C / n_embd) = 1, i.e. no scale at all.
    Equal to the reference's bias fed the keys with the same weights (scripts/parity_cable.py).
    Cable's bias is FoX's with the gate pre-activation negated (-softplus(z) = log sigmoid(-z)), init bias 0.
    """

    name = "cable"
    init_reference = {"slopes.weight": ("normal", 0.02), "slopes.bias": ("const", 0.0)}  # nanoGPT _init_weights
    causal_only = True
    flex = True
    shift_invariant = True  # positions enter only through the causal order

    def __init__(self, **common):
        super().__init__(**common)
        self.slopes = nn.Linear(self.dim, self.num_heads)
        nn.init.normal_(self.slopes.weight, std=0.02)
        nn.init.zeros_(self.slopes.bias)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        cumulative = self.cumulative(k)  # (B, H, L)
        bias = cumulative[..., :, None] - cumulative[..., None, :]  # (B, H, L, L); j > i is masked
        return bias.to(compute_dtype(self.slopes.weight))

    def cumulative(self, k: Tensor) -> Tensor:
        """(B, H, L, D) keys -> (B, H, L) the running sums c_t = -sum_{s<=t} softplus(w . k_s + b), in fp32: the
        sums grow like L log 2 and their differences, the bias, would lose their low bits in bf16."""
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D)  # (B, L, C)
        slopes = F.softplus(fp32_mlp(nn.Sequential(self.slopes), keys))  # (B, L, H)
        return (-slopes).transpose(1, 2).cumsum(-1)  # (B, H, L)

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod:
        cumulative = self.cumulative(k)
        return lambda score, b, h, i, j: score + cumulative[b, h, i] - cumulative[b, h, j]
