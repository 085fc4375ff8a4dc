import torch
from torch import Tensor, nn

from lightning_modules.encodings.grape_a import LLAMA_INIT_FACTOR, softplus_inverse
from lightning_modules.encodings.grape_m import GrapeM, rope_log_frequencies
from pe_core.ranges import PositiveFloat


class GrapeMContextual(GrapeM):
    """Contextual multiplicative GRAPE (GRAPE-M-ctx, phase-modulated, commuting): q_t, k_t -> G(Phi_t) q_t,
    G(Phi_t) k_t with GRAPE-M's G (the same commuting rank-2 planes and learned spectrum) at a content phase
    Phi_t = sum_{tau < t} omega_tau, omega_tau = sigmoid(w.k_tau / s + b / s) in (0, 1).

    Zhang et al., ICLR 2026, "Group Representational Position Encoding" (arXiv 2512.07805): Sec. 2.2's law in
    the phase, G(Phi_t)^T G(Phi_j) = G(Phi_j - Phi_t), so the logit of (t, j) is q_t^T G(Phi_j - Phi_t) k_j; the
    "phase-modulated" contextual form (the paper's GRAPE-M-ctx row). As the reference's
    model/llama-mha-grape-m-ctx.py (`MSGRAPEContextType1` and `_cumulative_phase`): the exclusive cumulative sum;
    one phase for all heads (`phase_per_head` false, the reference's grape_ctx_per_head) or one per head; s =
    `phase_scale` (16, grape_ctx_omega_scale); b = softplus^-1(`phase_init`) (1e-3, grape_ctx_init_omega; with
    the sigmoid this is sigmoid(-6.9 / 16) ~ 0.39 per token, not 1e-3); w ~ N(0, 0.25/C) (the reference zeroes
    it, then its init_llama_mha_weights redraws every matrix with std 0.5/sqrt(C)); frequencies learned as
    exp(log_freq), unscaled (`log_freq_scale` 1: the reference's ctx model has no scale), from RoPE's spectrum.
    Deviations: the encoding contract hands the encoding keys, not the layer input, so the gate reads the
    concatenated keys (as `fox`; one gate for all layers, the reference has one per layer); interleaved planes
    (see grape_m). No position enters: Phi replaces it (shift invariant); the phase of a slot sums the keys of
    every earlier slot, padded ones included (right padding leaves real tokens' phases exact). No KV cache: a
    cached step sees only the new keys, not the phase of the past.
    """

    name = "grape_m_ctx"
    init_reference = {
        "log_freq": ("exact", lambda enc: rope_log_frequencies(enc.base, enc.head_dim)),
        "phase_proj.weight": ("normal", lambda enc: LLAMA_INIT_FACTOR * enc.dim**-0.5),
        "phase_proj.bias": ("const", softplus_inverse(1e-3)),
    }
    kv_cache = False

    def __init__(self, *, log_freq_scale: PositiveFloat = 1.0, phase_per_head: bool = False,
                 phase_scale: PositiveFloat = 16.0, phase_init: PositiveFloat = 1e-3, **common):  # fmt: skip
        super().__init__(log_freq_scale=log_freq_scale, **common)
        self.phase_scale = phase_scale
        self.phase_proj = nn.Linear(self.dim, self.num_heads if phase_per_head else 1)
        nn.init.normal_(self.phase_proj.weight, std=LLAMA_INIT_FACTOR * self.dim**-0.5)
        nn.init.constant_(self.phase_proj.bias, softplus_inverse(phase_init))

    def phases(self, k: Tensor) -> Tensor:
        """(B, H, L, D) keys -> (B, 1 or H, L) Phi_t = sum_{tau < t} sigmoid(phase_proj(k_tau) / s)."""
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D)  # (B, L, C)
        omega = torch.sigmoid(self.phase_proj(keys).float() / self.phase_scale)  # (B, L, 1 or H)
        return (omega.cumsum(1) - omega).transpose(1, 2)  # exclusive

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        freq = self.frequencies()
        if freq.dim() == 2:
            freq = freq[:, None, :]  # (H, 1, D/2)
        angles = self.phases(k)[..., None] * freq  # (B, H or 1, L, D/2)
        cos, sin = angles.cos(), angles.sin()
        cos_sin = cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)
        basis = self.basis()
        return self.rotate_one(q, cos_sin, basis), self.rotate_one(k, cos_sin, basis)
