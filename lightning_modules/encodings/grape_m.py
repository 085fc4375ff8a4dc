import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.rope import rotate_pairs
from pe_core.errors import ConfigError
from pe_core.ranges import AboveOne, PositiveFloat

GRAPE_LOG_FREQ_SCALE = 16.0  # the reference's `grape_log_freq_scale` (learnable frequencies only)


def rope_log_frequencies(base: float, head_dim: int) -> Tensor:
    """(D/2,) log of RoPE's log-uniform spectrum theta_i = base^(-2i/D): GRAPE-M's initial frequencies."""
    return (base ** (-torch.arange(0, head_dim, 2).float() / head_dim)).log()


def rank2_exp(a: Tensor, b: Tensor, angle: Tensor | float) -> Tensor:
    """exp(angle L) for the rank-2 skew generator L = b a^T - a b^T of the plane (a, b), by GRAPE's closed-form
    Rodrigues formula (Sec. 2.3): I + sin(angle s)/s L + (1 - cos(angle s))/s^2 L^2, s = sqrt(|a|^2 |b|^2 -
    (a.b)^2). a, b (D,) -> (D, D). For an orthonormal pair it turns a towards b by `angle` (RoPE's direction;
    the paper's Eq. 2.1 writes L(a, b) = a b^T - b a^T, the other orientation)."""
    generator = torch.outer(b, a) - torch.outer(a, b)
    s = torch.sqrt(a.dot(a) * b.dot(b) - a.dot(b) ** 2)
    angle = torch.as_tensor(angle, dtype=a.dtype)
    eye = torch.eye(a.shape[0], dtype=a.dtype)
    return eye + torch.sin(angle * s) / s * generator + (1 - torch.cos(angle * s)) / s**2 * generator @ generator


class GrapeM(PositionalEncoding):
    """Multiplicative GRAPE (GRAPE-M): q_i, k_j -> G(i) q_i, G(j) k_j with G(n) = exp(n L) in SO(D), L a sum of
    D/2 commuting rank-2 skew generators theta_m (b_m a_m^T - a_m b_m^T) on orthonormal planes (a_m, b_m).

    Zhang et al., ICLR 2026, "Group Representational Position Encoding" (arXiv 2512.07805): Eq. 2.1 (the rank-2
    generator), Sec. 2.2 (the exact relative law G(t - s) = G(s)^T G(t) and G(n + m) = G(n) G(m), so
    q_i^T G(j - i) k_j depends on j - i only), Sec. 2.3 (the closed-form exponential, `rank2_exp`), Eq. 3.1
    and Proposition 3.1 (commuting multi-subspace GRAPE-M: with the canonical planes (e_2m, e_2m+1) and RoPE's
    log-uniform spectrum it IS RoPE), Algorithm 1 (a learned orthogonal basis E: Q E, rotate, E^T). The paper's
    "GRAPE-M-nonctx" model, as the reference's `MSGRAPECommuting` (model/llama-mha-grape-m-nonctx.py): the
    frequencies are learned, theta = exp(log_freq / s) with log_freq initialised to s log(RoPE's spectrum,
    `base`) and s = `log_freq_scale` (16, the reference's learning-rate trick), one spectrum for all heads
    (`share_across_heads`, the reference default) or one per head. `learnable=False` freezes them (then
    exactly `rope` with the same base). `learned_basis` (Algorithm 1 / Prop. 3.1's "possibly learned
    orthogonal basis"; not in the reference's experiments): E = exp(S - S^T), one for all heads, S initialised
    to 0 (E = I, so training starts as canonical GRAPE-M); the planes become a_m, b_m = E e_2m, E e_2m+1.
    Deviations from the reference: its planes are the half-split pairs (x_m, x_m+D/2) rotated the other way
    (apply_rotary_emb); ours are the paper's interleaved pairs (e_2m, e_2m+1) in RoPE's direction, a fixed
    orthogonal change of basis that leaves every logit equal (scripts/parity_grape.py feeds the permuted
    coordinates and matches it). The contextual form (GRAPE-M-ctx: phases summed from a gate of the layer
    input) is not here: the encoding contract hands the encoding q and k, not the layer input.
    Shapes: q, k (B, H, L, D); positions (L,) or (B, L).
    """

    name = "grape_m"
    init_reference = {
        "log_freq": ("exact", lambda enc: rope_log_frequencies(enc.base, enc.head_dim) * GRAPE_LOG_FREQ_SCALE)
    }
    shift_invariant = True

    def __init__(self, *, base: AboveOne = 10000.0, learnable: bool = True, share_across_heads: bool = True,
                 log_freq_scale: PositiveFloat = GRAPE_LOG_FREQ_SCALE, learned_basis: bool = False,
                 **common):  # fmt: skip
        super().__init__(**common)
        if self.head_dim % 2:
            raise ConfigError(f"{self.name} rotates planes of 2 dims and needs an even head dim, got {self.head_dim}")
        self.base, self.learnable, self.share_across_heads = base, learnable, share_across_heads
        self.log_freq_scale = log_freq_scale if learnable else 1.0  # as the reference: the scale serves training
        log_freq = rope_log_frequencies(base, self.head_dim) * self.log_freq_scale  # (D/2,)
        if not share_across_heads:
            log_freq = log_freq.repeat(self.num_heads, 1)  # (H, D/2)
        if learnable:
            self.log_freq = nn.Parameter(log_freq)
        else:
            self.register_buffer("log_freq", log_freq, persistent=False)
        self.basis_generator = nn.Parameter(torch.zeros(self.head_dim, self.head_dim)) if learned_basis else None

    def frequencies(self) -> Tensor:
        """(D/2,) shared or (H, D/2) per-head angular frequencies theta, in float32."""
        return torch.exp(self.log_freq.float() / self.log_freq_scale)

    def basis(self, dtype: torch.dtype = torch.float32) -> Tensor | None:
        """The learned orthogonal basis E = exp(S - S^T) (D, D), or None for the canonical planes."""
        if self.basis_generator is None:
            return None
        skew = self.basis_generator.to(dtype)
        return torch.linalg.matrix_exp(skew - skew.T)

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Full-width cos and signed sin of the angles n theta_m as `rotate_pairs` takes them, broadcastable to
        (B, H, L, D): (L, D) or (B, 1, L, D) shared, (H, L, D) or (B, H, L, D) per head."""
        freq = self.frequencies()
        if freq.dim() == 2:
            freq = freq[:, None, :]  # (H, 1, D/2)
        n = positions.float()[..., None]  # (L, 1) or (B, L, 1)
        if positions.dim() == 2:
            n = n[:, None]  # (B, 1, L, 1)
        angles = n * freq
        cos, sin = angles.cos(), angles.sin()
        return cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)

    def rotate_one(self, x: Tensor, cos_sin: tuple[Tensor, Tensor], basis: Tensor | None) -> Tensor:
        """G(n) x for (B, H, L, D) x: into the basis, the planar rotations, back (Algorithm 1)."""
        y = x.float() if basis is None else x.float() @ basis
        y = rotate_pairs(y, *cos_sin)
        return (y if basis is None else y @ basis.T).type_as(x)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos_sin, basis = self.cos_sin(positions), self.basis()
        return self.rotate_one(q, cos_sin, basis), self.rotate_one(k, cos_sin, basis)

    @torch.no_grad()
    def group_element(self, n: float) -> Tensor:
        """G(n) as (H, D, D) matrices, written out from the definition: the product over the planes (a_m, b_m)
        (columns 2m, 2m+1 of E, or of I) of the closed-form exp(n theta_m L_m) (`rank2_exp`), in float64. For
        tests of the group law; the hooks never build it."""
        freq = (self.log_freq.double() / self.log_freq_scale).exp().expand(self.num_heads, self.head_dim // 2)
        basis = self.basis(torch.float64)
        basis = torch.eye(self.head_dim, dtype=torch.float64) if basis is None else basis.cpu()
        heads = []
        for theta in freq.cpu():
            g = torch.eye(self.head_dim, dtype=torch.float64)
            for m, theta_m in enumerate(theta):
                g = g @ rank2_exp(basis[:, 2 * m], basis[:, 2 * m + 1], n * theta_m)
            heads.append(g)
        return torch.stack(heads)

    def generator(self) -> Tensor:
        """The Lie-algebra element L = sum_m theta_m (b_m a_m^T - a_m b_m^T) (H, D, D) in float64, G(n) = exp(n L)."""
        freq = (self.log_freq.detach().double() / self.log_freq_scale).exp().cpu()
        freq = freq.expand(self.num_heads, self.head_dim // 2)  # (H, D/2)
        basis = self.basis(torch.float64)
        basis = torch.eye(self.head_dim, dtype=torch.float64) if basis is None else basis.detach().cpu()
        a, b = basis[:, 0::2], basis[:, 1::2]  # (D, D/2) each
        planes = torch.einsum("im,jm->mij", b, a) - torch.einsum("im,jm->mij", a, b)  # (D/2, D, D)
        return torch.einsum("hm,mij->hij", freq, planes)

    def extra_repr(self) -> str:
        return (
            f"base={self.base}, learnable={self.learnable}, share_across_heads={self.share_across_heads}, "
            f"learned_basis={self.basis_generator is not None}"
        )
