"""GRAPE (Zhang et al., ICLR 2026): the multiplicative forms grape_m and grape_m_ctx and the additive forms
grape_a and grape_ap, against their closed forms, their reductions (RoPE, ALiBi, FoX) and their group laws.
Parity with the reference repository is scripts/parity_grape.py (it needs the fetched snapshot; these tests do
not).

Claims of docs/encodings.md covered here:
- "grape_m | ... G(n) = exp(n L) of commuting rank-2 skew generators ...; frozen, it is rope":
  test_grape_m_frozen_is_rope, test_grape_m_at_init_is_rope, test_grape_m_rotation_is_the_group_element,
  test_grape_m_group_law, test_grape_m_closed_form_is_the_matrix_exponential
- "grape_m | ... learned basis ...": test_grape_m_learned_basis_is_relative_and_norm_preserving
- "grape_m_ctx | ... G(Phi_t), Phi_t = sum_{tau<t} sigmoid(w.k_tau / 16 + b / 16) ...":
  test_grape_m_ctx_phases_written_out, test_grape_m_ctx_relative_law_in_the_phase,
  test_grape_m_ctx_constant_phase_rate_is_interpolated_rope
- "grape_a | (j - i) omega_h (softplus(v.q_i) + softplus(u.k_j)) ...; gate none is alibi":
  test_grape_a_gate_none_is_alibi, test_grape_a_gates_written_out, test_grape_a_is_shift_invariant,
  test_grape_a_unipotent_lift
- "grape_ap | b(t, j) = sum_{l=j+1}^t alpha_h logsigmoid(<p_t, R_l rms(p_l)>/d_p) ...; FoX and ALiBi are its
  endpoint-free cases": test_path_integral_with_endpoint_free_edges_is_fox,
  test_path_integral_of_constant_edges_is_alibi, test_grape_ap_edges_written_out, test_grape_ap_unipotent_path,
  test_grape_ap_probe_q_has_no_kv_cache
"""

import math

import pytest
import torch
import torch.nn.functional as F
from encoding_helpers import HEAD_DIM, HEADS, hook_logits, make_encoding, make_plain, qk

from lightning_modules.encodings.grape_a import softplus_inverse
from lightning_modules.encodings.grape_ap import path_integral
from lightning_modules.encodings.grape_m import rank2_exp


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_grape_m_frozen_is_rope(base):
    """Prop. 3.1: canonical planes and RoPE's log-uniform spectrum give RoPE exactly."""
    grape, rope = make_plain("grape_m", learnable=False, base=base), make_plain("rope", base=base)
    q, k = qk(L=16)
    positions = torch.arange(16) + 5
    for ours, theirs in zip(grape.rotate(q, k, positions), rope.rotate(q, k, positions), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [{}, {"share_across_heads": False}, {"learned_basis": True}])
def test_grape_m_at_init_is_rope(options):
    """Learned frequencies (and a learned basis, E = I) start at RoPE's: the model starts as rope."""
    grape, rope = make_plain("grape_m", **options), make_plain("rope")
    q, k = qk(L=10)
    positions = torch.randint(0, 50, (2, 10))  # (B, L) positions too
    for ours, theirs in zip(grape.rotate(q, k, positions), rope.rotate(q, k, positions), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [{}, {"share_across_heads": False}, {"learned_basis": True}])
def test_grape_m_rotation_is_the_group_element(options):
    """The hook's fast rotation is G(n) x with G(n) written out plane by plane (Sec. 2.3's closed form), also
    with trained (randomized) per-head frequencies and basis."""
    enc = make_encoding("grape_m", **options)
    q, k = qk(B=1, L=3)
    for n in (0, 3, 17):
        rotated, _ = enc.rotate(q, k, torch.full((3,), n))
        expected = torch.einsum("hij,bhlj->bhli", enc.group_element(n), q.double())
        torch.testing.assert_close(rotated.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [{}, {"share_across_heads": False, "learned_basis": True}])
def test_grape_m_group_law(options):
    """Sec. 2.2: G(n + m) = G(n) G(m), G(0) = I, G(-n) = G(n)^T, G(n)^T G(n) = I (a one-parameter subgroup of
    SO(D)), so the logits depend on j - i only (shift invariance, checked registry-wide)."""
    enc = make_encoding("grape_m", **options)
    eye = torch.eye(HEAD_DIM, dtype=torch.float64).expand(HEADS, -1, -1)
    torch.testing.assert_close(enc.group_element(0), eye)
    for n, m in ((3, 4), (-2, 7), (11, 0.5)):
        g_n = enc.group_element(n)
        torch.testing.assert_close(enc.group_element(n + m), g_n @ enc.group_element(m))
        torch.testing.assert_close(enc.group_element(-n), g_n.transpose(-1, -2))
        torch.testing.assert_close(g_n.transpose(-1, -2) @ g_n, eye)
        torch.testing.assert_close(torch.linalg.det(g_n), torch.ones(HEADS, dtype=torch.float64))


def test_grape_m_closed_form_is_the_matrix_exponential():
    """Sec. 2.3: exp(L) = I + sin(s)/s L + (1 - cos s)/s^2 L^2 for a rank-2 L of any (non-orthogonal) a, b; and
    G(n) = exp(n L) for the whole generator, the product of the commuting planes."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 6, dtype=torch.float64, generator=g)
    generator = torch.outer(b, a) - torch.outer(a, b)
    torch.testing.assert_close(rank2_exp(a, b, 0.7), torch.linalg.matrix_exp(0.7 * generator))
    enc = make_encoding("grape_m", share_across_heads=False, learned_basis=True)
    torch.testing.assert_close(enc.group_element(5), torch.linalg.matrix_exp(5 * enc.generator()))
    skew = enc.generator()
    torch.testing.assert_close(skew, -skew.transpose(-1, -2))


def test_grape_m_learned_basis_is_relative_and_norm_preserving():
    """A trained basis E (not the identity) still gives an isometry with logits of j - i only, and other logits
    than the canonical planes (the basis is used)."""
    enc = make_encoding("grape_m", learned_basis=True)
    canonical = make_encoding("grape_m")
    q, k = qk(L=8)
    positions = torch.arange(8)
    rq, rk = enc.rotate(q, k, positions)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5, rtol=1e-5)
    shifted = hook_logits(enc, q, k, positions + 13)
    torch.testing.assert_close(hook_logits(enc, q, k, positions), shifted, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(hook_logits(enc, q, k, positions), hook_logits(canonical, q, k, positions), atol=1e-3)


def test_grape_m_trains_its_frequencies():
    """log_freq is a parameter scaled by log_freq_scale: frequencies exp(log_freq / 16) get gradients."""
    enc = make_plain("grape_m")
    q, k = qk(L=6)
    rq, rk = enc.rotate(q.requires_grad_(), k, torch.arange(6))
    (rq * rk).sum().backward()
    assert enc.log_freq.grad is not None and enc.log_freq.grad.abs().sum() > 0
    assert make_plain("grape_m", learnable=False).log_freq.requires_grad is False


@pytest.mark.parametrize("omega_init", [1.0, 0.25])
def test_grape_a_gate_none_is_alibi(omega_init):
    """Eq. 4.7: with the gates replaced by 1 the bias is (j - i) beta_h, ALiBi's -m_h (i - j) for j <= i (at
    omega_init 1; omega_init c scales the slopes by c)."""
    grape, alibi = make_plain("grape_a", gate="none", omega_init=omega_init), make_plain("alibi")
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    ours, theirs = grape.positional_logits(20), alibi.positional_logits(20)
    torch.testing.assert_close(ours[:, causal], omega_init * theirs[:, causal])
    assert grape.content_bias(*qk(L=20), torch.arange(20)) is None


@pytest.mark.parametrize("gate", ["qk", "q", "k"])
def test_grape_a_gates_written_out(gate):
    """Eq. 4.6 element by element, in float64: (j - i) softplus(w_h) m_h (softplus(v_h.q_i/sqrt D) +
    softplus(u_h.k_j/sqrt D)) with unit-normalised u, v; a missing gate contributes 0."""
    enc = make_encoding("grape_a", gate=gate)
    q, k = qk(B=1, L=5)
    positions = torch.tensor([0, 2, 3, 7, 8])
    bias = enc.content_bias(q, k, positions)
    slopes = [2 ** (-8 * (h + 1) / HEADS) for h in range(HEADS)]
    for h in range(HEADS):
        omega = F.softplus(enc.omega[h].double()).item() * slopes[h]
        for i in range(5):
            for j in range(i + 1):
                rate = 0.0
                if "q" in gate:
                    v = enc.v[h].double() / enc.v[h].double().norm()
                    rate += F.softplus(v @ q[0, h, i].double() / math.sqrt(HEAD_DIM)).item()
                if "k" in gate:
                    u = enc.u[h].double() / enc.u[h].double().norm()
                    rate += F.softplus(u @ k[0, h, j].double() / math.sqrt(HEAD_DIM)).item()
                expected = (positions[j] - positions[i]).item() * omega * rate
                assert bias[0, h, i, j].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
                assert j == i or bias[0, h, i, j] < 0  # a monotone penalty into the past


@pytest.mark.parametrize("gate", ["qk", "none"])
def test_grape_a_is_shift_invariant(gate):
    """Eq. 4.3: the bias depends on j - i (and the content), not on where the sequence starts."""
    enc = make_encoding("grape_a", gate=gate)
    q, k = qk(L=9)
    positions = torch.arange(9)
    torch.testing.assert_close(hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions + 21))


def test_grape_a_unipotent_lift():
    """Sec. 4.1-4.2: in the lift q^ = [q; 1; 0], k^ = [k; 0; 1] with A_ij = -Lambda_ij omega e_{D+2} e_{D+1}^T
    (A^2 = 0), G(m) = I + m A is a one-parameter group and q^_i^T G(j - i)^-T k^_j = q_i.k_j + bias(i, j)."""
    enc = make_encoding("grape_a")
    q, k = qk(B=1, L=4)
    positions = torch.arange(4)
    bias = enc.content_bias(q, k, positions)
    D = HEAD_DIM
    h, i, j = 1, 3, 1
    basis = torch.zeros(D + 2, D + 2, dtype=torch.float64)
    basis[D + 1, D] = 1.0  # A_0 = e_{D+2} e_{D+1}^T
    rate = bias[0, h, i, j].double() / (j - i)  # omega_h Lambda_ij
    generator = -rate * basis
    assert torch.count_nonzero(generator @ generator) == 0

    def group(m):
        return torch.eye(D + 2, dtype=torch.float64) + m * generator

    torch.testing.assert_close(group(2) @ group(-5), group(-3))
    q_hat = torch.cat((q[0, h, i].double(), torch.tensor([1.0, 0.0], dtype=torch.float64)))
    k_hat = torch.cat((k[0, h, j].double(), torch.tensor([0.0, 1.0], dtype=torch.float64)))
    score = q_hat @ torch.linalg.inv(group(j - i)).T @ k_hat
    torch.testing.assert_close(score, q[0, h, i].double() @ k[0, h, j].double() + bias[0, h, i, j].double())


def test_grape_a_init_starts_at_alibi_rates():
    """omega is softplus^-1(omega_init), so omega_h = omega_init * m_h at initialisation."""
    enc = make_plain("grape_a", omega_init=0.5)
    torch.testing.assert_close(enc.omega, torch.full((HEADS,), softplus_inverse(0.5)))
    slopes = torch.tensor([2 ** (-8 * (h + 1) / HEADS) for h in range(HEADS)])
    torch.testing.assert_close(enc.rates(), 0.5 * slopes)


def test_path_integral_with_endpoint_free_edges_is_fox():
    """Appendix C: with edges psi(t, l) = log f_l (independent of the endpoint t) the path sum is FoX's
    D_tj = sum_{l=j+1}^t log f_l: equal to our fox's bias on its gates."""
    fox = make_encoding("fox")
    q, k = qk(L=10)
    B, H, L, D = k.shape
    log_f = F.logsigmoid(fox.gates(k.transpose(1, 2).reshape(B, L, H * D))).transpose(1, 2)  # (B, H, L)
    edges = log_f[..., None, :].expand(B, H, L, L)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    ours, theirs = path_integral(edges), fox.content_bias(q, k, torch.arange(L))
    torch.testing.assert_close(ours[..., causal], theirs[..., causal], atol=1e-5, rtol=1e-5)


def test_path_integral_of_constant_edges_is_alibi():
    """Sec. 5, 'Exact ALiBi': constant edges psi = -m_h give -m_h (t - j), our alibi's bias."""
    alibi = make_plain("alibi")
    L = 12
    edges = -alibi.slopes.expand(HEADS, L, L)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    torch.testing.assert_close(path_integral(edges)[:, causal], alibi.positional_logits(L)[:, causal])


@pytest.mark.parametrize("probe", ["own", "q", "k"])
def test_grape_ap_edges_written_out(probe):
    """Eq. 5.1-5.2 element by element in float64: psi(t, l) = alpha_h logsigmoid(p_t . R_l rms(p_l) / d_p) with
    R_l the rotation of every plane (x_2m, x_2m+1) by angle l, and b(t, j) their sum over j < l <= t."""
    enc = make_encoding("grape_ap", probe=probe)
    q, k = qk(B=1, L=5)
    positions = torch.tensor([0, 1, 4, 5, 9])
    bias = enc.content_bias(q, k, positions)
    p = enc.probes(q, k).double()[0]  # (H, L, d_p)
    d = p.shape[-1]
    slopes = [2 ** (-8 * (h + 1) / HEADS) for h in range(HEADS)]
    for h in range(HEADS):
        for t in range(5):
            for j in range(t + 1):
                total = 0.0
                for ell in range(j + 1, t + 1):
                    normed = p[h, ell] / p[h, ell].pow(2).mean().sqrt()
                    angle = positions[ell].item()
                    rotated = normed.clone()
                    rotated[0::2] = normed[0::2] * math.cos(angle) - normed[1::2] * math.sin(angle)
                    rotated[1::2] = normed[0::2] * math.sin(angle) + normed[1::2] * math.cos(angle)
                    total += slopes[h] * F.logsigmoid(p[h, t] @ rotated / d).item()
                assert bias[0, h, t, j].item() == pytest.approx(total, rel=1e-5, abs=1e-6)


def test_grape_ap_unipotent_path():
    """Eq. 5.4: the path product of the rank-1 unipotent factors I - psi(t, l) E (E = e_{D+2} e_{D+1}^T, E^2 = 0)
    is I - b(t, j) E, and scoring with its inverse transpose in the lift [q; 1; 0], [k; 0; 1] adds b(t, j)."""
    enc = make_encoding("grape_ap")
    q, k = qk(B=1, L=6)
    positions = torch.arange(6)
    edges, bias = enc.edges(q, k, positions)[0, 2].double(), enc.content_bias(q, k, positions)[0, 2].double()
    size = HEAD_DIM + 2
    E = torch.zeros(size, size, dtype=torch.float64)
    E[HEAD_DIM + 1, HEAD_DIM] = 1.0
    t, j = 5, 1
    product = torch.eye(size, dtype=torch.float64)
    for ell in range(j + 1, t + 1):
        product = product @ (torch.eye(size, dtype=torch.float64) - edges[t, ell] * E)
    torch.testing.assert_close(product, torch.eye(size, dtype=torch.float64) - bias[t, j] * E)
    q_hat = torch.cat((q[0, 2, t].double(), torch.tensor([1.0, 0.0], dtype=torch.float64)))
    k_hat = torch.cat((k[0, 2, j].double(), torch.tensor([0.0, 1.0], dtype=torch.float64)))
    score = q_hat @ torch.linalg.inv(product).T @ k_hat
    torch.testing.assert_close(score, q[0, 2, t].double() @ k[0, 2, j].double() + bias[t, j])
    assert bool((bias.tril() <= 0).all())  # a sum of non-positive edges: bounded, non-positive


def test_grape_ap_probe_q_has_no_kv_cache():
    """A query probe reads the past queries, which a KV cache does not keep: decoding recomputes instead; the
    own and key probes read keys only and cache."""
    assert not make_plain("grape_ap", probe="q").cacheable
    assert make_plain("grape_ap", probe="k").cacheable and make_plain("grape_ap").cacheable


def test_grape_ap_option_errors():
    from pe_core.errors import ConfigError

    with pytest.raises(ConfigError, match="probe_dim must be even"):
        make_plain("grape_ap", probe_dim=3)
    with pytest.raises(ConfigError, match="probe_dim is used only with probe='own'"):
        make_plain("grape_ap", probe="k", probe_dim=4)


def test_grape_m_ctx_phases_written_out():
    """Phi_t = sum_{tau < t} sigmoid((w.k_tau + b) / s) over the concatenated keys (exclusive: Phi_0 = 0)."""
    enc = make_encoding("grape_m_ctx", phase_per_head=True)
    _, k = qk(B=1, L=5)
    keys = k.transpose(1, 2).reshape(1, 5, -1)[0].double()  # (L, C)
    w, b = enc.phase_proj.weight.double(), enc.phase_proj.bias.double()
    omega = torch.sigmoid((keys @ w.T + b) / 16.0)  # (L, H)
    expected = torch.stack([omega[:t].sum(0) for t in range(5)], -1)  # (H, L)
    torch.testing.assert_close(enc.phases(k)[0].double(), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("options", [{}, {"phase_per_head": True, "share_across_heads": False}])
def test_grape_m_ctx_relative_law_in_the_phase(options):
    """Sec. 2.2 in the phase: the logit of (t, j) is q_t^T G(Phi_j - Phi_t) k_j, G written out from GRAPE-M's
    planes and spectrum."""
    enc = make_encoding("grape_m_ctx", **options)
    q, k = qk(B=1, L=6)
    rq, rk = enc.rotate(q, k, torch.arange(6))
    phases = enc.phases(k)[0].double().expand(HEADS, 6)  # (H, L)
    for h, t, j in ((0, 5, 2), (HEADS - 1, 3, 3), (1, 4, 0)):
        g = enc.group_element((phases[h, j] - phases[h, t]).item())[h]
        expected = q[0, h, t].double() @ g @ k[0, h, j].double()
        torch.testing.assert_close((rq[0, h, t] @ rk[0, h, j]).double(), expected, atol=1e-5, rtol=1e-5)


def test_grape_m_ctx_constant_phase_rate_is_interpolated_rope():
    """With the gate's weight at 0 every token advances the phase by c = sigmoid(b / s): Phi_t = c t, i.e. RoPE
    with positions scaled by c (`rope`'s interpolation_factor 1 / c)."""
    enc = make_plain("grape_m_ctx")
    with torch.no_grad():
        enc.phase_proj.weight.zero_()
    c = torch.sigmoid(enc.phase_proj.bias / 16.0).item()
    rope = make_plain("rope", interpolation_factor=1 / c)
    q, k = qk(L=12)
    for ours, theirs in zip(enc.rotate(q, k, torch.arange(12)), rope.rotate(q, k, torch.arange(12)), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert not enc.cacheable  # a cached step would lose the phase of the past
