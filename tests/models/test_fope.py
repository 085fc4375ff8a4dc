"""FoPE (`fope`; Hua et al., ICML 2025, TsinghuaC3I/Fourier-Position-Embedding).

Claims of lightning_modules/encodings/fope.py covered here:
- "the under-trained ones, below the floor 2 pi / L_train ..., are clipped to zero, and the M others form the
  basis"; "`train_length` L_train": test_the_basis_is_the_frequencies_above_the_floor
- "C_hd(p) = sum_m a_hmd cos(w_m p), S_hd(p) = sum_m b_hmd sin(w_m p)": test_each_pair_has_the_declared_spectrum
- "at gain 0 pair d is RoPE at w_{d ceil(M / d_out)}", position-free pairs (both `free_pairs`):
  test_at_gain_zero_the_fourier_pairs_are_rope
- "xavier_normal_(gain) plus the step identity ... fixed ... (`learnable=True` trains them)":
  test_coefficients_start_as_the_reference_and_are_fixed_by_default
- "Not shift invariant": test_not_shift_invariant
"""

import math

import pytest
import torch
from encoding_helpers import HEADS, hook_logits

from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.fope import step_eye
from pe_core.errors import ConfigError

DIM = 64  # head dim 16: 8 frequencies, D // 4 = 4 Fourier pairs


def make(max_length: int = 64, **options):
    return build_encoding("fope", dim=DIM, num_heads=HEADS, max_length=max_length, causal=True, **options)


def test_the_basis_is_the_frequencies_above_the_floor():
    """Head dim 16, base 10000: w_m = 10000^(-m/8); the floor 2 pi / L_train keeps those at or above it."""
    rope = 10000.0 ** (-torch.arange(8) / 8)
    for train_length in (16, 64, 1000):
        enc = make(max_length=4096, train_length=train_length)
        assert torch.equal(enc.basis_freq, rope[rope >= 2 * math.pi / train_length])
    assert make(max_length=64).basis_freq.numel() == 3  # default L_train = max_length: 1, 0.316, 0.1 >= 0.098
    assert make(max_length=64, floor_ratio=0.2).basis_freq.numel() == 4  # and 0.0316 >= 0.0196
    with pytest.raises(ConfigError, match="below the floor"):
        make(max_length=2, train_length=2)


def test_each_pair_has_the_declared_spectrum():
    """Over positions 0..511, C_hd and S_hd are exactly the coefficient-weighted cosines and sines of the basis:
    a least-squares fit on cos(w_m p) (sin(w_m p)) recovers a_h:d (b_h:d), and nothing is left over."""
    enc = make(init_gain=0.7)
    positions = torch.arange(512)
    cos, sin = enc.cos_sin(positions)  # (H, L, D/2)
    angles = positions.double()[:, None] * enc.basis_freq.double()  # (L, M)
    for part, basis, coef in ((cos, angles.cos(), enc.cos_coef), (sin, angles.sin(), enc.sin_coef)):
        for h in range(HEADS):
            fit = torch.linalg.lstsq(basis, part[h, :, : enc.fourier_pairs].double()).solution  # (M, d_out)
            torch.testing.assert_close(fit, coef[h].double(), atol=1e-4, rtol=0)
            torch.testing.assert_close(basis @ fit, part[h, :, : enc.fourier_pairs].double(), atol=1e-4, rtol=0)
    assert (cos[..., enc.fourier_pairs :] == 1).all() and (sin[..., enc.fourier_pairs :] == 1).all()


def test_at_gain_zero_the_fourier_pairs_are_rope():
    """gain 0: pair d < d_out turns by w_{d step} (step = ceil(M / d_out); a pair with d step >= M has no
    frequency and is zeroed, as the reference's step identity); the others are position-free: unchanged
    (`identity`) or (x0 - x1, x1 + x0) (`reference`)."""
    q, k = torch.randn(2, 2, HEADS, 20, DIM // HEADS).unbind(0)
    positions = torch.arange(20) * 5
    for max_length, train_length in ((64, None), (4096, 1000)):  # M = 3 = d_out (step 1); M = 5 > 4 (step 2)
        enc = make(max_length=max_length, train_length=train_length, init_gain=0.0, free_pairs="identity")
        M, d_out = enc.basis_freq.numel(), enc.fourier_pairs
        step = math.ceil(M / d_out)
        rope = build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=max_length, causal=True)
        rope.reserve(100)
        fourier = 2 * d_out
        rope_q, _ = rope.rotate(q, k, positions)
        ours_q, _ = enc.rotate(q, k, positions)
        assert (M, d_out, step) == ((3, 3, 1) if train_length is None else (5, 4, 2))
        for d in range(d_out):
            if d * step >= M:
                assert (ours_q[..., 2 * d : 2 * d + 2] == 0).all()
                continue
            angle = positions * enc.basis_freq[d * step]  # (L,)
            x0, x1 = q[..., 2 * d], q[..., 2 * d + 1]
            torch.testing.assert_close(ours_q[..., 2 * d], x0 * angle.cos() - x1 * angle.sin())
            torch.testing.assert_close(ours_q[..., 2 * d + 1], x1 * angle.cos() + x0 * angle.sin())
            if step == 1:  # the same frequencies as RoPE's first pairs
                torch.testing.assert_close(ours_q[..., 2 * d : 2 * d + 2], rope_q[..., 2 * d : 2 * d + 2])
        assert torch.equal(ours_q[..., fourier:], q[..., fourier:])
    reference = make(init_gain=0.0)
    ours_q, _ = reference.rotate(q, k, positions)
    free = q[..., reference.fourier_pairs * 2 :]
    expected = torch.stack((free[..., 0::2] - free[..., 1::2], free[..., 1::2] + free[..., 0::2]), -1).flatten(-2)
    torch.testing.assert_close(ours_q[..., reference.fourier_pairs * 2 :], expected)


def test_coefficients_start_as_the_reference_and_are_fixed_by_default():
    """Coefficients minus the step identity ~ N(0, gain^2 2 / (d_out (M + H))) (xavier_normal_ on (H, M, d_out));
    buffers saved with the model by default, trained parameters with learnable=True."""
    torch.manual_seed(0)
    enc = build_encoding("fope", dim=512, num_heads=8, max_length=512, causal=True)  # the 60M config's shape
    M, d_out = enc.basis_freq.numel(), enc.fourier_pairs
    assert (M, d_out) == (16, 16)
    std = 0.3 * math.sqrt(2 / (d_out * (M + 8)))
    for coef in (enc.sin_coef, enc.cos_coef):
        noise = coef - step_eye(M, d_out)
        assert abs(noise.std().item() - std) < 0.1 * std and abs(noise.mean().item()) < 4 * std / 45
    assert torch.equal(step_eye(4, 2), torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    assert not list(enc.parameters()) and {"sin_coef", "cos_coef"} <= set(enc.state_dict())
    learned = make(learnable=True)
    q, k = torch.randn(2, 1, HEADS, 6, DIM // HEADS).unbind(0)
    sum(x.sum() for x in learned.rotate(q, k, torch.arange(6))).backward()
    assert {name for name, p in learned.named_parameters() if p.grad is not None} == {"sin_coef", "cos_coef"}


def test_not_shift_invariant():
    enc = make(init_gain=0.5)
    q, k = torch.randn(2, 1, HEADS, 10, DIM // HEADS).unbind(0)
    positions = torch.arange(10)
    assert not torch.allclose(hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions + 7), atol=1e-3)
