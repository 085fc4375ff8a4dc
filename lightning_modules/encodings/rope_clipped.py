from typing import Literal

import torch
from torch import Tensor

from lightning_modules.encodings.rope import RoPE
from pe_core.ranges import NonNegativeInt

# the reference's clip_low_n = 20 of Llama 3's 64 frequencies (head dim 128): the share clipped by default
REFERENCE_CLIPPED, REFERENCE_FREQUENCIES = 20, 64


def clip_mask(count: int, clipped: int, mode: str) -> Tensor:
    """(count,) factors of the frequencies, highest first: 1 for all but the lowest `clipped` (n), which get
    the half-cosine taper 0.5 (1 + cos(pi k / (n - 1))), k = 0..n-1 (`soft`: 1 at the first clipped one, 0 at
    the lowest; a single clipped frequency gets 1, as the reference's linspace of one step), or 0 (`hard`)."""
    clipped = min(clipped, count)  # the reference's min(clip_low_n, freq_dim)
    theta = torch.linspace(0.0, torch.pi, steps=clipped)
    taper = 0.5 * (1.0 + torch.cos(theta)) if mode == "soft" else torch.zeros(clipped)
    return torch.cat((torch.ones(count - clipped), taper))


class ClippedRoPE(RoPE):
    """Clipped RoPE (registry name `rope_clipped`): RoPE whose lowest frequencies are softly clipped to zero.

    Li et al. 2026, "CoPE: Clipped RoPE as A Scalable Free Lunch for Long Context LLMs" (arXiv 2602.05258, code
    hrlics/CoPE). NOT `cope`, which is Golovneva et al. 2024's contextual position encoding (positions counted
    by content gates, lightning_modules/encodings/cope.py); the paper's acronym collides, hence this name.
    RoPE's inverse frequencies theta_i = base^(-2i/R), i = 0..R/2-1, highest first; the lowest n of them
    (i >= R/2 - n) are multiplied by the half-cosine taper m_k = 0.5 (1 + cos(pi k / (n - 1))), k = i - (R/2 - n)
    = 0..n-1 (the reference's `smooth_mask` over torch.linspace(0, pi, n)), so the clipping starts at 1 and ends
    at frequency 0 (a position-free pair), without the hard cut that makes the logits ring over distance.
    `clip_mode="hard"` is the paper's HardClip baseline (those n frequencies set to 0). Options:
    `clipped` n (default: the reference's 20 of Llama 3's 64 frequencies, the same share of R/2, rounded:
    round(R/2 * 20 / 64); 0 = plain RoPE; capped at R/2 as the reference's min(clip_low_n, freq_dim)); every
    RoPE option (base, rotary_dim, YaRN, dynamic NTK, ...), the clipping applied after them and re-applied to
    dynamic NTK's frequencies, as the reference re-applies its mask to a dynamic rope type's.
    Deviations: the reference's rotate_half layout (pair i = dims i and i + R/2) is RoPE's interleaved pairs here
    (a fixed permutation of the head dims, scripts/parity_rope_clipped.py permutes it back); the reference fixes
    n = 20 for 64 frequencies, here the default keeps that share for the head dim at hand.
    """

    name = "rope_clipped"
    init_reference = {}

    def __init__(self, *, clipped: NonNegativeInt | None = None, clip_mode: Literal["soft", "hard"] = "soft",
                 **rope_options):  # fmt: skip
        # read by `truncate`, which RoPE's constructor calls (plain attributes: nn.Module accepts them before init)
        self.clipped, self.clip_mode = clipped, clip_mode
        super().__init__(**rope_options)

    def clipped_count(self) -> int:
        """n: the frequencies clipped (the option, or the reference's share of R/2)."""
        count = self.rotary_dim // 2
        if self.clipped is None:
            return round(count * REFERENCE_CLIPPED / REFERENCE_FREQUENCIES)
        return min(self.clipped, count)

    def truncate(self, inv_freq: Tensor) -> Tensor:
        """RoPE's frequencies (after p-RoPE's truncation) with the lowest n clipped (`clip_mask`)."""
        inv_freq = super().truncate(inv_freq)
        mask = clip_mask(inv_freq.shape[-1], self.clipped_count(), self.clip_mode)
        return inv_freq * mask.to(inv_freq.device, inv_freq.dtype)
