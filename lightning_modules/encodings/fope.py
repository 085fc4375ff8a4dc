import math
from typing import Literal

import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.rope import rotate_pairs
from pe_core.errors import ConfigError
from pe_core.ranges import AboveOne, NonNegativeFloat, PositiveFloat, PositiveInt


def step_eye(inputs: int, outputs: int) -> Tensor:
    """(inputs, outputs): output d takes input frequency d * ceil(inputs / outputs) with weight 1 (the identity
    when they are equal), the reference's `get_step_eye`."""
    eye, step = torch.zeros(inputs, outputs), math.ceil(inputs / outputs)
    for d in range(outputs):
        if d * step < inputs:
            eye[d * step, d] = 1.0
    return eye


class FoPE(PositionalEncoding):
    """Fourier position embedding: each rotary pair turns by a Fourier series of frequencies, not by one.

    Hua et al., ICML 2025, "Fourier Position Embedding: Enhancing Attention's Periodic Extension for Length
    Generalization" (code TsinghuaC3I/Fourier-Position-Embedding, olmo/model.py `FourierEmbedding` on top of
    `RotaryEmbedding`, with the paper's configs: rope_clamp_floor_freq, rope_clamp_floor_to_zero,
    fourier_separate_basis, fourier_separate_head, fourier_ignore_zero, init eye_xavier_norm).
    RoPE's frequencies w_m = base^(-2m/D) (m = 0..D/2-1); the under-trained ones, below the floor
    w_floor = 2 pi / L_train * `floor_ratio` (a period longer than the training length), are clipped to zero
    (the paper's "clipping floor frequencies"), and the M others form the basis. For pair d < d_out =
    min(M, D // 4) of head h, the position p turns (x_2d, x_2d+1) by the 2x2 [[C, -S], [S, C]] with
        C_hd(p) = sum_m a_hmd cos(w_m p),   S_hd(p) = sum_m b_hmd sin(w_m p)
    (the paper's Fourier series per dimension: its own frequency with weight 1, the step identity below, plus
    small weights on the others; sine and cosine coefficients separate, per head), the same for q and k.
    The other D/2 - d_out pairs carry the zero frequency: position-free. Coefficients
    a, b (H, M, d_out): xavier_normal_(gain = `init_gain`, 0.3 in the reference's 60M configs) plus the step
    identity (`step_eye`), so at gain 0 pair d is RoPE at w_{d ceil(M / d_out)} (a pair with d ceil(M / d_out) >= M
    gets no frequency: it starts at zero, the noise aside, as in the reference); fixed, as the reference's
    default fourier_learnable=False (`learnable=True` trains them). `train_length` L_train: the training length
    the floor is taken from (default max_length; set it to the training length when evaluation runs longer).
    Not shift invariant: q.k depends on p_i and p_j, not only on p_j - p_i, unless a = b is a single frequency.
    Deviations: interleaved pairs (2d, 2d+1) where the reference pairs d and d + D/2 (a fixed permutation of the
    head dims); `free_pairs="reference"` (default) gives the position-free pairs cos = sin = 1 as the reference
    pads them (a fixed 45-degree turn scaled by sqrt 2: their q.k doubles), `"identity"` the paper's frequency
    zero, cos 0 = 1, sin 0 = 0. scripts/parity_fope.py checks it against the reference file.
    """

    name = "fope"
    float_positions = True
    init_reference = {}  # fixed coefficients (fourier_learnable=False); their init is checked in test_fope.py

    def __init__(self, *, base: AboveOne = 10000.0, train_length: PositiveInt | None = None,
                 floor_ratio: PositiveFloat = 1.0, init_gain: NonNegativeFloat = 0.3, learnable: bool = False,
                 free_pairs: Literal["reference", "identity"] = "reference", **common):  # fmt: skip
        super().__init__(**common)
        D = self.head_dim
        if D % 2 or D < 4:
            raise ConfigError(
                f"{self.name} needs an even head dim >= 4 (rotary pairs, D // 4 of them Fourier), got {D}"
            )
        self.train_length = self.max_length if train_length is None else train_length
        self.base, self.free_pairs = base, free_pairs
        inv_freq = base ** (-torch.arange(0, D, 2).float() / D)
        floor = 2 * math.pi / self.train_length * floor_ratio
        kept = inv_freq[inv_freq >= floor]  # the reference zeroes those below the floor, then drops the zeros
        if not len(kept):
            raise ConfigError(
                f"{self.name}: every frequency is below the floor 2 pi / {self.train_length} * {floor_ratio}; "
                "lower floor_ratio or base"
            )
        self.register_buffer("basis_freq", kept, persistent=False)  # (M,)
        self.fourier_pairs = min(len(kept), D // 4)  # d_out
        shape = (self.num_heads, len(kept), self.fourier_pairs)
        coefs = []
        for _ in ("sin", "cos"):  # the reference draws sin_coef first
            coef = torch.empty(shape)
            nn.init.xavier_normal_(coef, gain=init_gain)
            coefs.append(coef + step_eye(len(kept), self.fourier_pairs))
        for key, coef in zip(("sin_coef", "cos_coef"), coefs):
            if learnable:
                setattr(self, key, nn.Parameter(coef))
            else:
                self.register_buffer(key, coef)  # (H, M, d_out), saved with the model

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """(L,) or (B, L) positions (integers or floats) -> C and S, (H, L, D/2) or (B, H, L, D/2), the
        position-free pairs included."""
        angles = positions.float()[..., None] * self.basis_freq  # (..., L, M)
        cos = torch.einsum("...lm,hmd->...hld", angles.cos(), self.cos_coef.float())
        sin = torch.einsum("...lm,hmd->...hld", angles.sin(), self.sin_coef.float())
        free = self.head_dim // 2 - self.fourier_pairs
        pad = 1.0 if self.free_pairs == "reference" else 0.0
        return (nn.functional.pad(cos, (0, free), value=1.0), nn.functional.pad(sin, (0, free), value=pad))

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(positions)
        cos = cos.repeat_interleave(2, dim=-1)  # (..., H, L, D): each pair's C twice
        sin = torch.stack((-sin, sin), dim=-1).flatten(-2)  # (-S, S) per pair, as `rotate_pairs` takes it
        return rotate_pairs(q.float(), cos, sin).type_as(q), rotate_pairs(k.float(), cos, sin).type_as(k)
