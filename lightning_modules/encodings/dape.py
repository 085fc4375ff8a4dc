import torch
from torch import Tensor, nn

from lightning_modules.encodings.alibi import ALiBi
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import torch_linear
from lightning_modules.encodings.kerple import KerpleLog
from pe_core.ranges import PositiveInt

# PyTorch's Linear default for both layers of the MLP, as the official `nn.Sequential` (fan_in 2H, then the width)
DAPE_INIT = {
    "mlp.0.weight": torch_linear(lambda e: 2 * e.num_heads),
    "mlp.0.bias": torch_linear(lambda e: 2 * e.num_heads),
    "mlp.2.weight": torch_linear(lambda e: e.mlp_width),
    "mlp.2.bias": torch_linear(lambda e: e.mlp_width),
}


class DapeMixin:
    """DAPE's data-adaptive term: an MLP over each (i, j)'s 2H values, the H heads' scaled logits q.k and the
    H heads' static bias, giving H more logits: logits = q.k / sqrt(D) + bias + MLP([q.k / sqrt(D), bias]).

    Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive Positional Encoding for Length Extrapolation". As the
    official code (github.com/chuanyang-Zheng/DAPE, DAPE.py, `AliBi_DAPE` / `ParallelKerpleLog_DAPE`, Apache
    2.0): Linear(2H, mlp_width) -> LeakyReLU (slope 0.01) -> Linear(mlp_width, H), `mlp_width` 32 (the
    paper's configs), PyTorch's default Linear init; the input is the scaled, unmasked logits concatenated
    with the static bias along the heads; the static bias stays added (the residual `x + a + mlp(...)`). The
    static bias is the parent encoding's `bias` (added once per forward, shared by all layers); this class's
    `content_bias` is the MLP term only. Deviations: one MLP (and one static bias) serves every layer, each
    with its own logits (the official code builds one per attention layer), as every encoding here;
    bidirectional use takes the parent's symmetric |i - j| bias (the official code is causal only: its
    bias is 0 above the diagonal, where the causal mask hides the MLP's output anyway). The MLP mixes the
    heads, so no pointwise score_mod can write it: SDPA with a dense mask, no FlexAttention.
    """

    flex = False

    def build_mlp(self, mlp_width: int) -> None:
        self.mlp_width = mlp_width
        self.mlp = nn.Sequential(
            nn.Linear(2 * self.num_heads, mlp_width), nn.LeakyReLU(), nn.Linear(mlp_width, self.num_heads)
        )

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        logits = q @ k.transpose(-1, -2) * self.attention_scale()  # (B, H, L, L)
        # the parent's bias once more (the `bias` hook itself runs once per forward, for the shared mask)
        static = super().bias(positions).to(logits.dtype).expand_as(logits)  # (B, H, L, L)
        features = torch.cat((logits, static), dim=1).permute(0, 2, 3, 1)  # (B, L, L, 2H), as the official code
        return self.mlp(features).permute(0, 3, 1, 2)  # (B, H, L, L)

    # the parent's score_mod would serve its bias alone: no score_mod, so `flex` stays off (SDPA, dense mask)
    score_mod = PositionalEncoding.score_mod


class DapeALiBi(DapeMixin, ALiBi):
    """DAPE over ALiBi (Zheng et al. 2024, `AliBi_DAPE`): ALiBi's fixed bias -m_h |i - j| plus the MLP of
    `DapeMixin` over [logits, bias]. Options: `mlp_width` (32), ALiBi's `heads`."""

    name = "dape_alibi"
    init_reference = DAPE_INIT

    def __init__(self, *, mlp_width: PositiveInt = 32, **common):
        super().__init__(**common)
        self.build_mlp(mlp_width)


class DapeKerple(DapeMixin, KerpleLog):
    """DAPE over KERPLE's log kernel (Zheng et al. 2024, `ParallelKerpleLog_DAPE`): the bias
    -r1_h log(1 + r2_h |i - j|) with r1 ~ U(0, 2), r2 ~ U(0, 1) clamped >= 0.01 as `kerple_log`, plus the MLP
    of `DapeMixin` over [logits, bias]. Option: `mlp_width` (32)."""

    name = "dape_kerple"
    init_reference = KerpleLog.init_reference | DAPE_INIT

    def __init__(self, *, mlp_width: PositiveInt = 32, **common):
        super().__init__(**common)
        self.build_mlp(mlp_width)
