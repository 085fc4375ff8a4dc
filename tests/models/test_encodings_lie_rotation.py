"""Learned rotations by a matrix exponential, in 1-D: LieRE (Ostmeier et al.) and ComRoPE (Yu et al., CVPR 2025).

Their defining properties: R(p) = exp(p s S) with S skew-symmetric is orthogonal, a one-parameter group
(R(p + q) = R(p) R(q)), so the logits depend on n - m only; with RoPE's block-diagonal generator it is RoPE;
the generator learns (gradients reach it).
"""

import pytest
import torch
from encoding_helpers import make_encoding, make_plain

from lightning_modules.encodings.base import PositionalEncoding
from pe_core.errors import ConfigError

CASES = [
    ("liere", {}),
    ("liere", {"per_head": False, "block_size": 4}),
    ("comrope", {}),
    ("comrope", {"variant": "ap", "block_size": 4}),
]
IDS = [f"{name}-{'-'.join(map(str, options.values())) or 'default'}" for name, options in CASES]


def qk(B: int = 2, L: int = 9, H: int = 4, D: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(B, H, L, D), torch.randn(B, H, L, D)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_rotation_is_orthogonal_and_a_group(name, options):
    """R(p)^T R(p) = I and R(p + q) = R(p) R(q) (S fixed: exp of commuting multiples), R(0) = I, R(-p) = R(p)^T."""
    enc = make_encoding(name, **options)
    eye = torch.eye(enc.head_dim, dtype=torch.float64)
    for p, q in [(3.0, 5.0), (-2.5, 40.0)]:
        r_p, r_q = enc.rotation_matrix(p), enc.rotation_matrix(q)
        torch.testing.assert_close(r_p.mT @ r_p, eye.expand_as(r_p), atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.rotation_matrix(p + q), r_p @ r_q, atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.rotation_matrix(-p), r_p.mT, atol=1e-10, rtol=0)
    torch.testing.assert_close(enc.rotation_matrix(0.0), eye.expand_as(r_p))


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_hook_rotates_by_the_dense_exponential(name, options):
    """The hook's block-by-block exp applied to q is the dense exp(p s S) q, per row of (B, L) positions too."""
    enc = make_encoding(name, **options)
    q, k = qk()
    positions = torch.tensor([[0, 1, 2, 3, 5, 6, 7, 9, 11], [4, 5, 6, 8, 10, 12, 13, 14, 15]])
    rq, rk = enc.rotate(q, k, positions)
    for b in range(2):
        for i, p in enumerate(positions[b].tolist()):
            r = enc.rotation_matrix(float(p)).float()  # (H', D, D)
            torch.testing.assert_close(rq[b, :, i], (r @ q[b, :, i, :, None])[..., 0], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(rk[b, :, i], (r @ k[b, :, i, :, None])[..., 0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_logits_depend_on_the_distance_only(name, options):
    """(R(m) q)^T (R(n) k) = q^T R(n - m) k: shifting every position by a constant leaves the logits unchanged,
    while another spacing changes them (the position does enter)."""
    enc = make_encoding(name, **options)
    q, k = qk()
    positions = torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 34])

    def logits(pos):
        rq, rk = enc.rotate(q, k, pos)
        return rq @ rk.mT

    torch.testing.assert_close(logits(positions + 17), logits(positions), atol=1e-4, rtol=1e-4)
    assert (logits(positions * 2) - logits(positions)).abs().max() > 1e-2
    assert type(enc).shift_invariant


def set_rope_generator(enc: PositionalEncoding, thetas: torch.Tensor) -> None:
    """Give `enc` RoPE's generator: the 2x2 block [[0, -theta_m], [theta_m, 0]] on dims (2m, 2m + 1)."""
    with torch.no_grad():
        if enc.name == "liere":  # S = U - U^T, U the strict upper triangle: U[2m, 2m + 1] = -theta_m
            raw = torch.zeros_like(enc.generator_raw)
            block = enc.block_size
            for m, theta in enumerate(thetas):
                i = 2 * m
                raw[:, i // block, i % block, i % block + 1] = -theta
            enc.generator_raw.copy_(raw)
        else:  # P - P^T with P = [[0, -theta / 2], [theta / 2, 0]]; LD's multiplier 1
            base = torch.zeros_like(enc.angle_base)
            base[..., 0, 1], base[..., 1, 0] = -thetas / 2, thetas / 2
            enc.angle_base.copy_(base)
            if enc.multiplier is not None:
                enc.multiplier.fill_(1.0)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("liere", {"block_size": 2}),
        ("liere", {}),
        ("liere", {"per_head": False}),
        ("comrope", {}),
        ("comrope", {"variant": "ap"}),
    ],  # fmt: skip
)
def test_rope_generator_gives_rope(name, options):
    """With RoPE's block-diagonal generator (theta_m = base^(-2m/D)), the rotation is `rope`'s, also
    inside one full-width LieRE block (block_size = head dim: the exp of the whole so(D) element)."""
    enc, rope = make_plain(name, **options), make_plain("rope")
    set_rope_generator(enc, rope.inv_freq)
    q, k = qk()
    positions = torch.randint(0, 60, (2, 9))
    for ours, theirs in zip(enc.rotate(q, k, positions), rope.rotate(q, k, positions), strict=True):
        # float32 exp of angles up to 60 rad by scaling and squaring: ~1e-4 from RoPE's float32 cos / sin
        torch.testing.assert_close(ours, theirs, atol=3e-4, rtol=1e-4)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_gradients_reach_the_generator(name, options):
    """The logits' gradient reaches every generator parameter the method uses (LieRE: the strict upper triangle
    only, as `triu` in the reference; ComRoPE: P's off-diagonal entries, and LD's multiplier)."""
    enc = make_plain(name, **options).train()
    q, k = qk()
    rq, rk = enc.rotate(q, k, torch.arange(9))
    (rq @ rk.mT).square().sum().backward()
    for key, param in enc.named_parameters():
        grad = param.grad
        assert grad is not None and torch.isfinite(grad).all(), key
        if key in ("generator_raw", "angle_base"):  # U - U^T, P - P^T: the diagonal never enters
            used = torch.ones(enc.block_size, enc.block_size).triu(1).bool()
            if key == "angle_base":
                used = used | used.T
            assert (grad[..., used] != 0).all() and (grad[..., ~used] == 0).all(), key
        else:
            assert (grad != 0).all(), key


@pytest.mark.parametrize("name", ["liere", "comrope"])
def test_block_size_must_divide_the_head_dim(name):
    with pytest.raises(ConfigError, match="block_size must divide the head dim 8, got 3") as err:
        make_plain(name, block_size=3)
    assert "\n" not in str(err.value)


def test_position_scale_scales_the_positions():
    """R(p) with position_scale s is exp(p s S): s = 1 / 64 at position 64 is exp(S), the references' [0, 1]."""
    enc = make_encoding("liere", position_scale=1 / 64)
    s = enc.generator().double()
    dense = torch.stack([torch.block_diag(*head) for head in s])
    torch.testing.assert_close(enc.rotation_matrix(64.0), torch.linalg.matrix_exp(dense))
    q, k = qk()
    positions = torch.arange(9)
    unscaled = make_encoding("liere")
    unscaled.load_state_dict(enc.state_dict())
    for ours, theirs in zip(enc.rotate(q, k, positions * 64), unscaled.rotate(q, k, positions), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
