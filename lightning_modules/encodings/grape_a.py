import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.alibi import alibi_slopes
from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.t5_bias import relative_distance
from pe_core.ranges import PositiveFloat

GATE_NORM_EPS = 1e-6  # the reference's u_l2_eps / v_l2_eps
# the reference's init_llama_mha_weights: every matrix of the model, u and v included, ends N(0, (0.5/sqrt(C))^2)
LLAMA_INIT_FACTOR = 0.5


def softplus_inverse(y: float) -> float:
    """x with softplus(x) = y > 0 (the reference's omega parametrisation)."""
    return math.log(math.expm1(y))


class GrapeA(PositionalEncoding):
    """Additive GRAPE (GRAPE-A): the logit bias (j - i) omega_h (lambda_q(q_i) + lambda_k(k_j)) of a rank-1
    unipotent action in GL(D + 2), with content gates lambda_q(q) = softplus(v_h.q / sqrt(D)) and
    lambda_k(k) = softplus(u_h.k / sqrt(D)).

    Zhang et al., ICLR 2026, "Group Representational Position Encoding" (arXiv 2512.07805): Eq. 4.1-4.3 (the
    homogeneous lift, G_add(n) = I + n omega A with A^2 = 0, q_i^T G_add(j - i)^-T k_j depends on j - i only),
    Eq. 4.4-4.6 (the content-gated closed form, the paper's GRAPE-A-QK), Eq. 4.7 and Sec. 4.2 (with the gates
    replaced by the constant 1 it is exactly ALiBi, slope beta_h = omega_h). `gate`: "qk" (Eq. 4.6, the
    reference's model/llama-mha-grape-a-querykeygated.py), "q" (GRAPE-A-Q, lambda_q only, querygated.py), "k"
    (GRAPE-A-K, lambda_k only, keygated.py) or "none" (the ALiBi setting, Eq. 4.7: a content-free `bias`).
    As the reference: omega_h = softplus(w_h) * m_h with m_h ALiBi's geometric slopes and w_h learned,
    initialised to softplus^-1(`omega_init`) (1: omega_h = m_h, so gate "none" starts as `alibi` exactly);
    u_h, v_h ~ N(0, 0.25/C) (the bias module draws N(0, 1/D), then the reference's init_llama_mha_weights
    redraws every matrix of the model with std 0.5/sqrt(C); only their directions matter), unit-normalised
    before use (`gate_norm`, the reference's u_l2_norm / v_l2_norm); causal only (the reference's models are
    causal LMs; for j > i the paper's (j - i) would reward the future, and the causal mask removes it).
    Positions enter as p_j - p_i of the given positions (the reference: slot indices). The gates read the q
    and k the Transformer hands the encoding; the reference's Llama applies QK RMSNorm to them first (an
    architecture choice, not the encoding's). FoX is the path-integral form of Sec. 5 / Appendix C, not this
    one (see grape_ap). Parity: scripts/parity_grape.py.
    """

    name = "grape_a"
    init_reference = {
        "omega": ("const", softplus_inverse(1.0)),
        "u": ("normal", lambda enc: LLAMA_INIT_FACTOR * enc.dim**-0.5),
        "v": ("normal", lambda enc: LLAMA_INIT_FACTOR * enc.dim**-0.5),
    }
    causal_only = True
    shift_invariant = True
    flex = True

    def __init__(self, *, gate: Literal["qk", "q", "k", "none"] = "qk", omega_init: PositiveFloat = 1.0,
                 gate_norm: bool = True, **common):  # fmt: skip
        super().__init__(**common)
        self.gate, self.gate_norm = gate, gate_norm
        self.register_buffer("slopes", torch.tensor(alibi_slopes(self.num_heads)), persistent=False)  # (H,)
        self.omega = nn.Parameter(torch.full((self.num_heads,), softplus_inverse(omega_init)))
        std = LLAMA_INIT_FACTOR * self.dim**-0.5
        self.u = nn.Parameter(torch.randn(self.num_heads, self.head_dim) * std) if "k" in gate else None
        self.v = nn.Parameter(torch.randn(self.num_heads, self.head_dim) * std) if "q" in gate else None

    def rates(self) -> Tensor:
        """(H,) omega_h = softplus(w_h) m_h."""
        return F.softplus(self.omega.float()) * self.slopes

    def gates(self, x: Tensor, direction: Tensor | None) -> Tensor | None:
        """(B, H, L, D) queries or keys -> (B, H, L) softplus(w_h.x / sqrt(D)), or None without that gate."""
        if direction is None:
            return None
        direction = direction.float()
        if self.gate_norm:
            direction = F.normalize(direction, dim=-1, eps=GATE_NORM_EPS)
        return F.softplus(torch.einsum("bhld,hd->bhl", x.float(), direction) / math.sqrt(self.head_dim))

    def bias(self, positions: Tensor) -> Tensor | None:
        if self.gate != "none":
            return None
        distance = relative_distance(positions).unsqueeze(-3).float()  # (..., 1, L, L): j - i
        return distance * self.rates()[:, None, None]  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod | None:
        if self.gate != "none":
            return None
        at, rates = position_at(positions), self.rates()
        return lambda score, b, h, i, j: score + (at(b, j) - at(b, i)) * rates[h]

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor | None:
        if self.gate == "none":
            return None
        query_gate, key_gate = self.gates(q, self.v), self.gates(k, self.u)  # (B, H, L) or None each
        rate = 0.0
        if query_gate is not None:
            rate = rate + query_gate[..., :, None]
        if key_gate is not None:
            rate = rate + key_gate[..., None, :]
        distance = relative_distance(positions).unsqueeze(-3).float()  # (..., 1, L, L)
        return distance * self.rates()[:, None, None] * rate  # (B, H, L, L); j > i is masked

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod | None:
        if self.gate == "none":
            return None
        query_gate, key_gate = self.gates(q, self.v), self.gates(k, self.u)
        query_gate = q.new_zeros(q.shape[:-1], dtype=torch.float32) if query_gate is None else query_gate
        key_gate = k.new_zeros(k.shape[:-1], dtype=torch.float32) if key_gate is None else key_gate
        at, rates = position_at(positions), self.rates()
        return lambda score, b, h, i, j: (
            score + (at(b, j) - at(b, i)) * rates[h] * (query_gate[b, h, i] + key_gate[b, h, j])
        )
