import math
from typing import Annotated

import torch
from annotated_types import Gt, Le
from pydantic import AllowInfNan
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from pe_core.errors import ConfigError
from pe_core.ranges import AboveOne, AtLeastOne, PositiveFloat, PositiveInt

RopeFraction = Annotated[float, Gt(0), Le(1), AllowInfNan(False)]  # (0, 1]: the share of frequencies that rotate


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate consecutive pairs (x_2i, x_2i+1) of the last dim of x (..., R) by angles a_i, given at full width
    as cos = (cos a_0, cos a_0, cos a_1, ...) and sin = (-sin a_0, sin a_0, -sin a_1, ...) (`RoPE.cos_sin`):
    x * cos + (x_1, x_0, x_3, x_2, ...) * sin, x-transformers' rotate_half form for interleaved pairs. Bitwise
    equal to (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos), with one copy (the swap) instead of three."""
    swapped = torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (..., R)
    return x * cos + swapped * sin


class RoPE(PositionalEncoding):
    """Rotary position embedding: rotate each (q, k) pair 2i, 2i+1 by angle pos * base^(-2i/R).

    Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding". Interleaved pairs as
    in the paper (and x-transformers' `RotaryEmbedding` + `apply_rotary_pos_emb`, checked against it with
    the same settings). q.k then depends only on the distance j - i. Options:
    `base`; `rotary_dim` R (partial rotary, GPT-J: only the first R dims of each head rotate, the
    frequencies use R; default R = D); `interpolation_factor` s >= 1 (position interpolation, Chen et al.
    2023: angles of pos / s); `ntk_base_rescale` a (NTK-aware scaling, bloc97 2023: base * a^(R/(R-2)), as
    x-transformers' `base_rescale_factor`, which also uses the rotated dim R).
    Length extension (checked against `transformers.modeling_rope_utils`' "yarn" and "dynamic" initialisation;
    both need `original_length`, the training length L0): `yarn_factor` s > 1 (YaRN, Peng et al. 2023: the
    frequencies that turn fewer than beta_slow = 1 times over L0 are interpolated by s, those turning more
    than beta_fast = 32 times kept, a linear ramp between, on the floor / ceil correction dims; logits scaled
    by the attention temperature (0.1 ln s + 1)^2, i.e. q and k each by 0.1 ln s + 1, here on all head dims
    through `attention_scale` where transformers scales the rotated dims' cos / sin);
    `dynamic_ntk_factor` a >= 1 (dynamic NTK, emozilla 2023: at an evaluated length L > L0, the base is
    base * (a L / L0 - (a - 1))^(R/(R-2)); L = the largest position + 1 of each example, i.e. of each row of
    (B, L) positions: the Transformer gives padded slots position 0 (`length_dependent`), so an example's
    logits do not depend on the padded length of its batch. transformers' `dynamic_rope_update` takes the
    largest position of the whole batch instead).
    `rope_fraction` p in (0, 1] (p-RoPE, Barbero et al. 2025, "Round and Round We Go"): only the highest-
    frequency p fraction of the R/2 frequencies rotate (int(p R // 2) of them, as transformers' "proportional"
    rope type), the rest get frequency 0 (unrotated, position-free channels); applied after the options above.
    Deployed scalings (checked against transformers' "llama3" and "longrope" initialisation; both need
    `original_length`): `llama3_factor` s > 1 with `low_freq_factor` (1) and `high_freq_factor` (4) (Llama 3.1,
    Meta 2024: wavelengths above L0 / low interpolated by s, below L0 / high kept, blended between);
    `longrope_short_factor` and `longrope_long_factor` (LongRoPE, Ding et al. 2024, as Phi-3: R/2 rescale
    factors each, frequencies divided by the short ones for an example up to L0 long and by the long ones
    beyond, per example as dynamic NTK, hence `length_dependent`; q and k scaled by transformers' attention
    factor sqrt(1 + ln s / ln L0), s = `longrope_factor`, by default max_length / L0 as transformers'
    max_position_embeddings / original_max_position_embeddings, 1 for s <= 1, through `attention_scale`).
    Extensions that need `original_length` exclude each other and interpolation / NTK rescaling.
    `rotary_heads` k < H: only the first k heads rotate, the others get no position (x-transformers'
    `rotate_num_heads` rotates the last k; the heads are interchangeable). Applies to xPos's decay too; YaRN's
    and LongRoPE's temperature, a logit scale, to every head.
    Shapes: q, k (B, H, L, D); cos, sin (L, R) or (B, 1, L, R).
    """

    name = "rope"
    init_reference = {}
    shift_invariant = True
    float_positions = True

    def __init__(self, *, base: AboveOne = 10000.0, rotary_dim: PositiveInt | None = None,
                 interpolation_factor: AtLeastOne = 1.0, ntk_base_rescale: PositiveFloat = 1.0,
                 yarn_factor: AboveOne | None = None, dynamic_ntk_factor: AtLeastOne | None = None,
                 original_length: PositiveInt | None = None, rope_fraction: RopeFraction = 1.0,
                 rotary_heads: PositiveInt | None = None, llama3_factor: AboveOne | None = None,
                 low_freq_factor: PositiveFloat | None = None, high_freq_factor: PositiveFloat | None = None,
                 longrope_short_factor: list[float] | None = None, longrope_long_factor: list[float] | None = None,
                 longrope_factor: AtLeastOne | None = None, **common):  # fmt: skip
        super().__init__(**common)
        self.rotary_dim = R = self.head_dim if rotary_dim is None else rotary_dim
        if R % 2 or not 0 < R <= self.head_dim:
            raise ConfigError(f"{self.name} needs an even rotary_dim in [2, head dim {self.head_dim}], got {R}")
        if ntk_base_rescale != 1 and R <= 2:
            raise ConfigError(f"ntk_base_rescale needs rotary_dim > 2, got {R}")
        self.rotary_heads = self.num_heads if rotary_heads is None else rotary_heads
        if self.rotary_heads > self.num_heads:
            raise ConfigError(
                f"{self.name} rotary_heads must be in [1, num_heads={self.num_heads}], got {rotary_heads}"
            )
        longrope = _check_longrope(longrope_short_factor, longrope_long_factor, longrope_factor, R)
        llama3 = _check_llama3(llama3_factor, low_freq_factor, high_freq_factor)
        _check_extension(interpolation_factor, ntk_base_rescale, yarn_factor, dynamic_ntk_factor, llama3_factor,
                         longrope, original_length)  # fmt: skip
        if ntk_base_rescale != 1:
            base = base * ntk_base_rescale ** (R / (R - 2))
        self.interpolation_factor, self.base, self.rope_fraction = interpolation_factor, base, rope_fraction
        self.dynamic_ntk_factor, self.original_length = dynamic_ntk_factor, original_length
        # frequencies follow each example's length (dynamic NTK; LongRoPE's long factors beyond original_length)
        self.length_dependent = dynamic_ntk_factor is not None or longrope
        self.magnitude = 1.0  # YaRN's and LongRoPE's per-vector scale of q and k
        inv_freq = base ** (-torch.arange(0, R, 2).float() / R)
        if yarn_factor is not None:
            inv_freq, self.magnitude = yarn_frequencies(base, R, yarn_factor, original_length)
        if llama3:
            inv_freq = llama3_frequencies(inv_freq, llama3_factor, *llama3, original_length)
        self.register_buffer("long_inv_freq", None, persistent=False)  # LongRoPE's beyond original_length
        if longrope:
            if original_length < 2:
                raise ConfigError(
                    f"longrope needs original_length >= 2 (its attention factor divides by ln L0), "
                    f"got {original_length}"
                )
            self.magnitude = longrope_attention_factor(longrope_factor or self.max_length / original_length,
                                                       original_length)  # fmt: skip
            long_inv_freq = inv_freq / torch.tensor(longrope_long_factor, dtype=torch.float)
            inv_freq = inv_freq / torch.tensor(longrope_short_factor, dtype=torch.float)
            self.register_buffer("long_inv_freq", self.truncate(long_inv_freq), persistent=False)  # (R/2,)
        self.register_buffer("inv_freq", self.truncate(inv_freq), persistent=False)  # (R/2,)
        self.register_position_table("rotations", "cos_sin_table")  # (2, N, R)

    def truncate(self, inv_freq: Tensor) -> Tensor:
        """p-RoPE: frequency 0 for all but the first (highest) int(p R // 2) frequencies of the last dim, the
        count transformers' "proportional" RoPE rotates (`_compute_proportional_rope_parameters`, R = head dim;
        0 for p R < 2: nothing rotates)."""
        keep = int(self.rope_fraction * self.rotary_dim // 2)
        return torch.cat(
            (inv_freq[..., :keep], inv_freq.new_zeros(*inv_freq.shape[:-1], inv_freq.shape[-1] - keep)), -1
        )

    def frequencies(self, length: int | Tensor) -> Tensor:
        """Inverse frequencies at an evaluated length (largest position + 1): (R/2,) for an int or a 0-dim
        length, (B, R/2) for (B,) lengths. `inv_freq`, except for dynamic NTK beyond `original_length`, whose
        base grows with the length."""
        if not self.length_dependent:
            return self.inv_freq
        R, a, L0 = self.rotary_dim, self.dynamic_ntk_factor, self.original_length
        length = torch.as_tensor(length, device=self.inv_freq.device)[..., None]  # (1,) or (B, 1)
        if self.long_inv_freq is not None:  # LongRoPE: the long factors beyond original_length
            return torch.where(length > L0, self.long_inv_freq, self.inv_freq)
        base = self.base * (a * length.to(self.inv_freq.dtype) / L0 - (a - 1)) ** (R / (R - 2))
        exponents = torch.arange(0, R, 2, device=self.inv_freq.device, dtype=self.inv_freq.dtype) / R
        return torch.where(length > L0, self.truncate(base**-exponents), self.inv_freq)  # (R/2,) or (B, R/2)

    def attention_scale(self) -> float:
        return self.magnitude**2 * self.head_dim**-0.5

    def angles(self, positions: Tensor, inv_freq: Tensor) -> Tensor:
        """(...,) positions and (R/2,) inverse frequencies, or (B, L) positions and (B, R/2) frequencies of each
        row -> (..., R/2) angles."""
        if inv_freq.dim() == 2:
            inv_freq = inv_freq[:, None]  # (B, 1, R/2)
        return positions.float()[..., None] * inv_freq / self.interpolation_factor

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """(L, R) or (B, 1, L, R) cos and signed sin of the angles of `positions`, each angle twice, as
        `rotate_pairs` takes them: rows of the `rotations` position table, or, for float positions
        (`continuous_positions`) and for dynamic NTK beyond `original_length` (frequencies that depend on the
        evaluated length of each row), computed in this forward."""
        dynamic = self.length_dependent
        lengths = positions.max(-1).values + 1 if dynamic else None  # () for (L,) positions, (B,) for (B, L)
        if positions.is_floating_point() or (dynamic and bool((lengths > self.original_length).any())):
            cos, sin = self.cos_sin_table(positions, self.frequencies(lengths) if dynamic else None)
        else:
            cos, sin = self.rotations[:, positions]  # each (L, R) or (B, L, R)
        return (cos, sin) if positions.dim() == 1 else (cos[:, None], sin[:, None])

    def cos_sin_table(self, positions: Tensor, inv_freq: Tensor | None = None) -> Tensor:
        """(...,) positions -> (2, ..., R): cos and signed sin of their angles (at `inv_freq`, by default the
        table's), each angle twice."""
        angles = self.angles(positions, self.inv_freq if inv_freq is None else inv_freq)
        cos, sin = angles.cos(), angles.sin()
        return torch.stack((cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)))

    def rotate_one(self, x: Tensor, cos_sin: tuple[Tensor, Tensor], scale: Tensor | None = None) -> Tensor:
        """Rotate (and scale, for xPos) the first R dims of the first `rotary_heads` heads of x (B, H, L, D); the
        rest pass through."""
        if self.rotary_heads < x.shape[1]:
            heads = self.rotary_heads
            return torch.cat((self.rotate_one(x[:, :heads], cos_sin, scale), x[:, heads:]), dim=1)
        rotated = rotate_pairs(x[..., : self.rotary_dim], *cos_sin)
        if scale is not None:
            rotated = rotated * scale
        if self.rotary_dim < x.shape[-1]:
            rotated = torch.cat((rotated, x[..., self.rotary_dim :]), dim=-1)
        return rotated.type_as(x)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos_sin = self.cos_sin(positions)
        return self.rotate_one(q, cos_sin), self.rotate_one(k, cos_sin)


def _check_extension(interpolation, ntk, yarn, dynamic, llama3, longrope, original_length) -> None:
    chosen = [name for name, on in (("interpolation_factor", interpolation != 1), ("ntk_base_rescale", ntk != 1),
              ("yarn_factor", yarn is not None), ("dynamic_ntk_factor", dynamic is not None),
              ("llama3_factor", llama3 is not None), ("longrope_long_factor", longrope)) if on]  # fmt: skip
    needs_length = [name for name in chosen if name not in ("interpolation_factor", "ntk_base_rescale")]
    if len(chosen) > 1 and needs_length:
        raise ConfigError(
            "yarn_factor, dynamic_ntk_factor, llama3_factor and longrope_long_factor exclude other extensions; "
            f"got {' and '.join(chosen)}"
        )
    if needs_length and original_length is None:
        raise ConfigError(f"{chosen[-1]} needs original_length (the training length)")
    if original_length is not None and not needs_length:
        raise ConfigError(
            "original_length is used only with yarn_factor, dynamic_ntk_factor, llama3_factor or longrope_long_factor"
        )


def _check_llama3(factor, low, high) -> tuple[float, float] | None:
    """(low_freq_factor, high_freq_factor) of Llama 3's scaling (defaults 1 and 4, Llama 3.1's), or None."""
    if factor is None:
        if low is not None or high is not None:
            raise ConfigError("low_freq_factor and high_freq_factor are used only with llama3_factor")
        return None
    low, high = 1.0 if low is None else low, 4.0 if high is None else high
    if high <= low:
        raise ConfigError(f"llama3 needs high_freq_factor > low_freq_factor, got {high} and {low}")
    return low, high


def _check_longrope(short, long, factor, rotary_dim: int) -> bool:
    """Whether LongRoPE is on: both factor lists, each of R/2 positive numbers."""
    if short is None and long is None:
        if factor is not None:
            raise ConfigError("longrope_factor is used only with longrope_short_factor and longrope_long_factor")
        return False
    if short is None or long is None:
        raise ConfigError("longrope needs both longrope_short_factor and longrope_long_factor")
    for name, factors in (("longrope_short_factor", short), ("longrope_long_factor", long)):
        if len(factors) != rotary_dim // 2 or not all(
            isinstance(f, int | float) and not isinstance(f, bool) and math.isfinite(f) and f > 0 for f in factors
        ):
            raise ConfigError(f"{name} must be {rotary_dim // 2} positive numbers (rotary_dim / 2), got {factors!r}")
    return True


def llama3_frequencies(inv_freq: Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                       original_length: int) -> Tensor:  # fmt: skip
    """Llama 3.1's RoPE scaling (Meta 2024; transformers' "llama3" rope type): wavelengths 2 pi / f longer than
    original_length / low_freq_factor are interpolated by `factor`, those shorter than original_length /
    high_freq_factor kept, and those between blended by (original_length / wavelength - low) / (high - low)."""
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > original_length / low_freq_factor, inv_freq / factor, inv_freq)
    smooth = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= original_length / high_freq_factor) & (wavelength <= original_length / low_freq_factor)
    return torch.where(medium, blended, scaled)


def longrope_attention_factor(factor: float, original_length: int) -> float:
    """LongRoPE's q / k scale (Ding et al. 2024, as transformers' "longrope"): sqrt(1 + ln s / ln L0) for an
    extension s = `factor` > 1, else 1."""
    return math.sqrt(1 + math.log(factor) / math.log(original_length)) if factor > 1 else 1.0


def yarn_frequencies(base: float, dim: int, factor: float, original_length: int, beta_fast: float = 32.0,
                     beta_slow: float = 1.0) -> tuple[Tensor, float]:  # fmt: skip
    """YaRN (Peng et al. 2023): (R/2,) inverse frequencies and the q / k magnitude 0.1 ln s + 1.

    Dimension pair i turns original_length * base^(-2i/R) / (2 pi) times over the training length; the pairs
    below the correction dim of beta_fast turns keep their frequency, those above the one of beta_slow turns
    are divided by s, with a linear ramp between (correction dims floored / ceiled, as the reference code)."""

    def correction_dim(turns: float) -> float:
        return dim * math.log(original_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    high = high + 0.001 if low == high else high
    ramp = ((torch.arange(dim // 2).float() - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: interpolate
    inv_freq = base ** (-torch.arange(0, dim, 2).float() / dim)
    return inv_freq / factor * ramp + inv_freq * (1 - ramp), 0.1 * math.log(factor) + 1.0
