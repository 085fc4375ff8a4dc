import torch
from torch import Tensor

from lightning_modules.encodings.rope import RoPE, rotate_pairs
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt


def default_rope_dim(head_dim: int) -> int:
    """DeepSeek-V2's ratio d_r : d_c = 64 : 128 inside one head of D = d_c + d_r dims: the even d_r nearest
    D / 3 from below, at least 2."""
    return max(2, head_dim // 3 // 2 * 2)


class DecoupledRoPE(RoPE):
    """Decoupled RoPE (DeepSeek-V2's MLA): position-free content dims per head, plus a small rotated slice
    whose key is one vector shared by all heads.

    DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model",
    Section 2.1.3, Eqs. (14)-(19): q_{t,i}^R = RoPE(W^QR c_t^Q) per head i, k_t^R = RoPE(W^KR h_t) ONE per
    token (shared by the heads), q_{t,i} = [q_{t,i}^C ; q_{t,i}^R], k_{t,i} = [k_{t,i}^C ; k_t^R], and the
    logits q_{t,i} . k_{j,i} / sqrt(d_h + d_h^R) (d_h = 128, d_h^R = 64 in DeepSeek-V2; transformers'
    DeepseekV2 splits `qk_nope_head_dim` / `qk_rope_head_dim` the same way and scales by the sum).
    Here each head's D dims split into d_c = D - d_r content dims (first) and d_r = `rope_dim` rotated dims
    (last); the logit scale is 1/sqrt(D) = 1/sqrt(d_c + d_r) as Eq. (19). The rotated query slice is the
    head's own (W^QR = the slice of the layer's W_q); the shared rotated key k_t^R is the mean over heads of
    the keys' last d_r dims, i.e. W^KR h_t with W^KR the mean of the slices of the layer's W_k: one d_r x C
    projection per layer, of the same function class as DeepSeek-V2's W^KR, with no parameter of its own.
    `rope_dim` d_r: any even width in [2, D] (d_c = 0 at d_r = D); default DeepSeek-V2's ratio
    d_r : d_c = 64 : 128 = 1 : 2 (`default_rope_dim`: D / 3 rounded down to even). The rotation is RoPE's
    interleaved pairs over d_r (frequencies base^(-2i/d_r)); RoPE's extensions (interpolation, YaRN, ...) apply
    to the slice.
    Deviations: MLA's low-rank compression of q and of k/v (c_t^Q, c_t^KV, Eqs. (9)-(13)) is NOT implemented,
    only the decoupled positional slice; d_c + d_r = D inside one head instead of d_h + d_h^R wide query and
    key heads (the values keep D); W^QR reads h_t through W_q (DeepSeek-V2 reads the compressed c_t^Q).
    """

    name = "rope_decoupled"
    init_reference = {}
    shift_invariant = True
    float_positions = True

    def __init__(self, *, rope_dim: PositiveInt | None = None, **options):
        if options.pop("rotary_dim", None) is not None or options.pop("rotary_heads", None) is not None:
            raise ConfigError(f"{self.name} sets the rotated width with rope_dim (rotary_dim and rotary_heads "
                              "are plain rope's)")  # fmt: skip
        dim, heads = options.get("dim"), options.get("num_heads")
        head_dim = dim // heads if dim and heads and dim % heads == 0 else None
        width = rope_dim if rope_dim is not None or head_dim is None else default_rope_dim(head_dim)
        if head_dim is not None and (width % 2 or not 2 <= width <= head_dim):
            raise ConfigError(f"{self.name} needs an even rope_dim in [2, head dim {head_dim}], got {width}")
        super().__init__(rotary_dim=width, **options)
        self.rope_dim = self.rotary_dim

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        content = q.shape[-1] - self.rope_dim
        cos_sin = self.cos_sin(positions)
        q_rope = rotate_pairs(q[..., content:], *cos_sin).type_as(q)  # (B, H, L, d_r): each head's own
        k_shared = k[..., content:].mean(1, keepdim=True)  # (B, 1, L, d_r): k_t^R, one for all heads
        k_rope = rotate_pairs(k_shared, *cos_sin).type_as(k).expand(*k.shape[:-1], self.rope_dim)
        return torch.cat((q[..., :content], q_rope), -1), torch.cat((k[..., :content], k_rope), -1)
