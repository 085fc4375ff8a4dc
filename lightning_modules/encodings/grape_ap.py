from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.alibi import alibi_slopes
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.grape_a import LLAMA_INIT_FACTOR
from lightning_modules.encodings.rope import rotate_pairs
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt


def path_integral(edges: Tensor) -> Tensor:
    """(..., L, L) edge potentials psi(t, l) -> (..., L, L) the causal path sums b(t, j) = sum_{l=j+1}^{t}
    psi(t, l) (GRAPE Eq. 5.2; edges with l > t are ignored, entries j > t are meaningless: masked)."""
    causal = torch.ones(edges.shape[-2:], dtype=torch.bool, device=edges.device).tril()
    edges = edges.masked_fill(~causal, 0.0)
    return edges.sum(-1, keepdim=True) - edges.cumsum(-1)


class GrapeAP(PositionalEncoding):
    """Path-integral additive GRAPE (GRAPE-AP): the logit bias b_h(t, j) = sum_{l=j+1}^{t} psi_h(t, l) with edge
    potentials psi_h(t, l) = alpha_h logsigmoid(<p_t, R_l rms(p_l)> / d_p), R_l = exp(l J) (every plane turns by l).

    Zhang et al., ICLR 2026, "Group Representational Position Encoding" (arXiv 2512.07805): Eq. 5.1 (the edge
    potential with link g = log sigmoid, footnote 2), Eq. 5.2 (the causal path sum, `path_integral`), Eq. 5.4
    (the unipotent path product I - b E of rank-1 factors, E^2 = 0), Appendix C (FoX is the case of edges
    independent of the endpoint, psi(t, l) = log f_l; ALiBi the case psi = -beta_h). As the reference's
    model/llama-mha-grape-ap-v1.py: alpha_h = ALiBi's slopes (fixed); the probe p_t is rms-normalised only on
    the rotated side (the paper normalises both); R_l rotates with frequency 1 (the reference's `Rotary(base=1)`);
    the 1/d_p scale. `probe`: "own" (the reference's default p_tie_mode none: p = W_p x, `probe_dim` d_p = 8 per
    head, as its pdim8 configs), "q" or "k" (p_tie_mode pq / pk: p is the query / key, d_p = D; its pv is not
    offered, the encoding never sees the values). Deviations: the encoding contract hands the encoding keys, not
    the layer input, so the own probe reads the concatenated keys, p = W_p k (as `fox`'s gates; one W_p for all
    layers, the reference has one per layer); W_p ~ N(0, 0.25/C) as the reference's init_llama_mha_weights;
    the reference's interleaving is the half-split layout rotated the other way (an orthogonal change of
    the probe's coordinates, see scripts/parity_grape.py); positions enter as the given positions l. Not shift
    invariant (R_l is absolute in l); causal only; SDPA only (a prefix sum per query row, no score_mod);
    `probe="q"` reads the cached queries too, so it has no KV cache.
    """

    name = "grape_ap"
    init_reference = {"probe_proj.weight": ("normal", lambda enc: LLAMA_INIT_FACTOR * enc.dim**-0.5)}
    causal_only = True

    def __init__(self, *, probe: Literal["own", "q", "k"] = "own", probe_dim: PositiveInt = 8, **common):
        super().__init__(**common)
        self.probe = probe
        self.probe_dim = probe_dim if probe == "own" else self.head_dim
        if self.probe_dim % 2:
            raise ConfigError(f"{self.name} rotates its probe in planes of 2 dims: probe_dim must be even, got "
                              f"{self.probe_dim}")  # fmt: skip
        if probe != "own" and probe_dim != 8:
            raise ConfigError(f"{self.name} probe_dim is used only with probe='own' (q and k have the head dim)")
        self.kv_cache = probe != "q"  # cached rows get zero queries: probes of the past would be lost
        self.register_buffer("slopes", torch.tensor(alibi_slopes(self.num_heads)), persistent=False)  # (H,)
        self.probe_proj = None
        if probe == "own":
            self.probe_proj = nn.Linear(self.dim, self.num_heads * self.probe_dim, bias=False)
            nn.init.normal_(self.probe_proj.weight, std=LLAMA_INIT_FACTOR * self.dim**-0.5)

    def probes(self, q: Tensor, k: Tensor) -> Tensor:
        """(B, H, L, d_p) probes p_t."""
        if self.probe == "q":
            return q
        if self.probe == "k":
            return k
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D)  # (B, L, C)
        return self.probe_proj(keys).view(B, L, H, self.probe_dim).transpose(1, 2)

    def edges(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        """(B, H, L, L) edge potentials psi_h(t, l) = alpha_h logsigmoid(<p_t, R_l rms(p_l)> / d_p) (Eq. 5.1)."""
        p = self.probes(q, k).float()
        angles = positions.float()[..., None] * torch.ones(self.probe_dim // 2, device=p.device)  # frequency 1
        if positions.dim() == 2:
            angles = angles[:, None]  # (B, 1, L, d_p/2)
        cos, sin = angles.cos(), angles.sin()
        cos, sin = cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)
        rotated = rotate_pairs(F.rms_norm(p, (self.probe_dim,)), cos, sin)  # R_l rms(p_l)
        similarity = p @ rotated.transpose(-1, -2) / self.probe_dim  # (B, H, L, L): <p_t, R_l p^_l> / d_p
        return F.logsigmoid(similarity) * self.slopes[:, None, None]

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        return path_integral(self.edges(q, k, positions))  # (B, H, L, L); j > t is masked
