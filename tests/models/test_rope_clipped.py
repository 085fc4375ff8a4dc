"""Clipped RoPE (`rope_clipped`; Li et al. 2026, hrlics/CoPE), not `cope` (Golovneva et al. 2024).

Claims of lightning_modules/encodings/rope_clipped.py covered here:
- "0 = plain RoPE": test_no_clipping_is_rope
- "the lowest n ... multiplied by the half-cosine taper m_k = 0.5 (1 + cos(pi k / (n - 1)))", "HardClip ...
  set to 0": test_the_lowest_frequencies_are_tapered_to_zero
- "default: ... round(R/2 * 20 / 64)": test_default_clips_the_reference_share
- the clipped pair is position-free and the logits stay relative: test_clipped_pair_is_position_free_and_relative
- "re-applied to dynamic NTK's frequencies": test_clipping_is_reapplied_to_dynamic_ntk
"""

import math

import torch
from encoding_helpers import DIM, HEADS, MAX_LEN, hook_logits, qk

from lightning_modules.encodings import ENCODINGS, build_encoding


def make(name: str, **options):
    enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, **options)
    enc.reserve(200)  # the hooks are called directly: tables for positions up to 199
    return enc


def test_the_name_is_not_contextual_cope():
    assert ENCODINGS["rope_clipped"].__name__ == "ClippedRoPE" and ENCODINGS["cope"].__name__ == "CoPE"
    assert "NOT `cope`" in ENCODINGS["rope_clipped"].__doc__ and "Golovneva" in ENCODINGS["cope"].__doc__


def test_no_clipping_is_rope():
    q, k = qk(L=20)
    positions = torch.arange(20) * 7
    for options in ({"base": 500.0}, {"rotary_dim": 4}, {"rope_fraction": 0.5}):
        rope, clipped = make("rope", **options), make("rope_clipped", clipped=0, **options)
        for ours, theirs in zip(clipped.rotate(q, k, positions), rope.rotate(q, k, positions)):
            assert torch.equal(ours, theirs)


def test_the_lowest_frequencies_are_tapered_to_zero():
    """Head dim 8 (4 frequencies), n = 3: factors (1, 1, 0.5, 0) soft, (1, 0, 0, 0) hard, by hand."""
    rope = make("rope").inv_freq
    soft = make("rope_clipped", clipped=3).inv_freq
    hard = make("rope_clipped", clipped=3, clip_mode="hard").inv_freq
    torch.testing.assert_close(soft, rope * torch.tensor([1.0, 1.0, 0.5, 0.0]))
    torch.testing.assert_close(hard, rope * torch.tensor([1.0, 0.0, 0.0, 0.0]))
    wide = build_encoding("rope_clipped", dim=128, num_heads=1, max_length=MAX_LEN, causal=True, clipped=20)
    plain = build_encoding("rope", dim=128, num_heads=1, max_length=MAX_LEN, causal=True).inv_freq
    k = torch.arange(20)
    torch.testing.assert_close(wide.inv_freq[44:], plain[44:] * 0.5 * (1 + torch.cos(math.pi * k / 19)))
    assert torch.equal(wide.inv_freq[:44], plain[:44])
    assert make("rope_clipped", clipped=99).inv_freq[0] == rope[0]  # capped at R/2: the highest keeps its factor 1


def test_default_clips_the_reference_share():
    """20 of 64 frequencies at the reference's head dim 128; 5 of 16 at head dim 32."""
    for dim, clipped in ((128, 20), (32, 5)):
        enc = build_encoding("rope_clipped", dim=dim, num_heads=1, max_length=MAX_LEN, causal=True)
        rope = build_encoding("rope", dim=dim, num_heads=1, max_length=MAX_LEN, causal=True)
        changed = (enc.inv_freq != rope.inv_freq).nonzero().flatten()
        assert enc.clipped_count() == clipped and changed.min() == dim // 2 - clipped + 1  # the first keeps 1


def test_clipped_pair_is_position_free_and_relative():
    """The lowest pair has frequency 0 (unrotated), and the logits depend on j - i only (a shift of 37)."""
    enc = make("rope_clipped", clipped=2)
    q, k = qk(L=16)
    rotated_q, rotated_k = enc.rotate(q, k, torch.arange(16) * 11)
    assert torch.equal(rotated_q[..., -2:], q[..., -2:]) and torch.equal(rotated_k[..., -2:], k[..., -2:])
    positions = torch.arange(16)
    torch.testing.assert_close(hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions + 37))


def test_clipping_is_reapplied_to_dynamic_ntk():
    enc = make("rope_clipped", clipped=2, dynamic_ntk_factor=2.0, original_length=8)
    grown = enc.frequencies(40)
    assert grown[-1] == 0 and not torch.equal(grown, enc.inv_freq)
