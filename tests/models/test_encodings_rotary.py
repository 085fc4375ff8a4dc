"""Rotary encodings: RoPE and its options (base, rotary_dim, interpolation, NTK, YaRN, dynamic NTK, p-RoPE,
rotary_heads, Llama 3, LongRoPE), xPos and PoPE; parity with x-transformers and with transformers' RoPE
initialisation where they coincide.

Claims of docs/encodings.md covered here:
- "rope | rotary q/k (interleaved pairs), option base": test_rope_matches_x_transformers,
  test_rope_logits_depend_on_distance_only
- "rope also takes rotary_dim, interpolation_factor, ntk_base_rescale": test_rope_options_match_x_transformers,
  test_rope_option_errors
- "yarn_factor (YaRN ...) ... original_length ... checked against transformers' RoPE initialisation", and rope's
  "interleaved pairs": test_yarn_matches_transformers, test_yarn_rotation_matches_transformers_half_split_layout
- "dynamic_ntk_factor (dynamic NTK: the base grows with the evaluated length)": test_dynamic_ntk_matches_transformers,
  test_dynamic_ntk_rotates_with_the_frequencies_of_each_evaluated_length
- "rope_fraction (p-RoPE ...: only the highest-frequency fraction rotates)":
  test_p_rope_rotates_only_the_highest_frequencies, test_p_rope_matches_transformers_proportional_rope
- "xpos | rotary with exponential decay; causal only": test_xpos_matches_x_transformers,
  test_xpos_is_causal_only_and_decays
- "rotary_heads (only the first k heads rotate)": test_rotary_heads_rotate_only_the_first_heads
- "llama3_factor ... longrope_short_factor, longrope_long_factor ... checked against transformers":
  test_llama3_matches_transformers, test_longrope_matches_transformers, test_deployed_scaling_errors_are_one_line
- "pope | polar q/k ...": test_pope_matches_x_transformers, test_pope_is_shift_invariant_and_doubles_the_query_key_width
"""

import math

import pytest
import torch
import torch.nn.functional as F
from encoding_helpers import DIM, HEAD_DIM, HEADS, MAX_LEN, make, make_encoding, make_plain, qk
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from x_transformers.x_transformers import (
    PolarEmbedding,
    RotaryEmbedding,
    apply_polar_pos_emb,
    apply_rotary_pos_emb,
)

from lightning_modules.encodings import build_encoding
from pe_core.errors import ConfigError


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rope_matches_x_transformers(base):
    torch.manual_seed(0)
    B, L = 2, 24
    enc = make("rope", causal=True, base=base)
    ref = RotaryEmbedding(HEAD_DIM, base=base)
    q, k = torch.randn(2, B, HEADS, L, HEAD_DIM).unbind(0)
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [13]])):
        freqs, scale = ref(positions)
        rq, rk = enc.rotate(q, k, positions)
        torch.testing.assert_close(rq, apply_rotary_pos_emb(q, freqs, scale), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rk, apply_rotary_pos_emb(k, freqs, scale), atol=1e-5, rtol=1e-5)


def test_rope_logits_depend_on_distance_only():
    """q_i . k_j after rotation equals q . R(j - i) k for positions far apart: the closed form."""
    torch.manual_seed(0)
    enc = make("rope", causal=True)
    q, k = torch.randn(2, 1, 1, 1, HEAD_DIM).unbind(0)
    for i, j in [(3, 3), (2, 5), (40, 45)]:
        rq, _ = enc.rotate(q, q, torch.tensor([i]))
        _, rk = enc.rotate(k, k, torch.tensor([j]))
        _, rel = enc.rotate(k, k, torch.tensor([j - i]))  # rotate k alone by j - i (>= 0: a table row)
        torch.testing.assert_close((rq * rk).sum(), (q * rel).sum(), atol=1e-5, rtol=1e-5)
    assert torch.equal(enc.rotate(q, k, torch.tensor([0]))[0], q)  # position 0 is the identity


ROPE_OPTIONS = [
    {"interpolation_factor": 4.0},
    {"ntk_base_rescale": 8.0},
    {"rotary_dim": 4},
    {"rotary_dim": 6, "interpolation_factor": 2.0, "ntk_base_rescale": 3.0, "base": 500.0},
]


def _reference_rotary(options: dict, **extra) -> RotaryEmbedding:
    return RotaryEmbedding(
        options.get("rotary_dim", HEAD_DIM), base=options.get("base", 10000.0),
        interpolation_factor=options.get("interpolation_factor", 1.0),
        base_rescale_factor=options.get("ntk_base_rescale", 1.0), **extra,
    )  # fmt: skip


@pytest.mark.parametrize("options", ROPE_OPTIONS)
def test_rope_options_match_x_transformers(options):
    B, L = 2, 24
    enc, ref = make_encoding("rope", **options), _reference_rotary(options)
    q, k = qk(B, L)
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [13]])):
        freqs, _ = ref(positions)
        rq, rk = enc.rotate(q, k, positions)
        torch.testing.assert_close(rq, apply_rotary_pos_emb(q, freqs), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rk, apply_rotary_pos_emb(k, freqs), atol=1e-5, rtol=1e-5)
        rotary_dim = options.get("rotary_dim", HEAD_DIM)
        assert torch.equal(rq[..., rotary_dim:], q[..., rotary_dim:])  # partial rotary: the rest untouched


def test_rope_option_errors():
    for bad in (
        {"rotary_dim": 5},
        {"rotary_dim": 10},
        {"interpolation_factor": 0.5},
        {"rotary_dim": 2, "ntk_base_rescale": 2.0},
    ):
        with pytest.raises(ConfigError):
            make_encoding("rope", **bad)


def hf_config(rope_type: str, **params) -> LlamaConfig:
    rope = {"rope_type": rope_type, "rope_theta": 10000.0, **params}
    return LlamaConfig(hidden_size=DIM, num_attention_heads=HEADS, max_position_embeddings=16, rope_parameters=rope)


@pytest.mark.parametrize("factor, original", [(4.0, 16), (8.0, 4096), (2.5, 100)])
def test_yarn_matches_transformers(factor, original):
    enc = make_plain("rope", yarn_factor=factor, original_length=original)
    config = hf_config("yarn", factor=factor, original_max_position_embeddings=original)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(enc.inv_freq, inv_freq)
    assert enc.attention_scale() == pytest.approx(attention_factor**2 * HEAD_DIM**-0.5)


@pytest.mark.parametrize("length", [10, 16, 40, 64])
def test_dynamic_ntk_matches_transformers(length):
    enc = make_plain("rope", dynamic_ntk_factor=2.0, original_length=16)
    config = hf_config("dynamic", factor=2.0)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=length)
    torch.testing.assert_close(enc.frequencies(length), inv_freq)


@pytest.mark.parametrize("length", [10, 16, 40])
def test_dynamic_ntk_rotates_with_the_frequencies_of_each_evaluated_length(length):
    """Up to original_length the rows of the rotations table; beyond it, angles at the base of that length
    (computed in the forward, never from a table built for another length)."""
    enc = make_plain("rope", dynamic_ntk_factor=2.0, original_length=16)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config("dynamic", factor=2.0), "cpu", seq_len=length)
    angles = torch.arange(length).float()[:, None] * inv_freq
    q, k = qk(L=length)
    ours_q, _ = enc.rotate(q, k, torch.arange(length))
    cos, sin = angles.cos().repeat_interleave(2, -1), torch.stack((-angles.sin(), angles.sin()), -1).flatten(-2)
    swapped = torch.stack((q[..., 1::2], q[..., 0::2]), -1).flatten(-2)
    torch.testing.assert_close(ours_q, q * cos + swapped * sin, atol=1e-5, rtol=1e-5)


def test_yarn_rotation_matches_transformers_half_split_layout():
    """Our interleaved pairs (2i, 2i+1) are transformers' (i, i + R/2): the same scores after a permutation."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    enc = make_plain("rope", yarn_factor=4.0, original_length=16)
    config = hf_config("yarn", factor=4.0, original_max_position_embeddings=16)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    L = 40
    q, k = qk(L=L)
    angles = torch.arange(L).float()[:, None] * inv_freq
    emb = torch.cat((angles, angles), -1)
    perm = torch.cat((torch.arange(0, HEAD_DIM, 2), torch.arange(1, HEAD_DIM, 2)))  # interleaved -> half split
    q_hf, k_hf = apply_rotary_pos_emb(
        q[..., perm], k[..., perm], emb.cos()[None] * attention_factor, emb.sin()[None] * attention_factor
    )
    ours_q, ours_k = enc.rotate(q, k, torch.arange(L))
    scores = ours_q @ ours_k.transpose(-1, -2) * enc.attention_scale()
    torch.testing.assert_close(scores, q_hf @ k_hf.transpose(-1, -2) * HEAD_DIM**-0.5, atol=1e-4, rtol=1e-4)


def test_p_rope_rotates_only_the_highest_frequencies():
    full, partial = make_plain("rope"), make_plain("rope", rope_fraction=0.5)
    torch.testing.assert_close(partial.inv_freq[:2], full.inv_freq[:2])
    assert (partial.inv_freq[2:] == 0).all()
    q, k = qk(L=9)
    rq, rk = partial.rotate(q, k, torch.arange(9))
    torch.testing.assert_close(rq[..., 4:], q[..., 4:])  # pairs 2, 3 (dims 4-7) unrotated


P_ROPE_FRACTIONS = [0.1, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0]


@pytest.mark.parametrize("head_dim", [8, 12, 16, 24, 32, 64, 128])
def test_p_rope_matches_transformers_proportional_rope(head_dim):
    """The inverse frequencies, hence how many rotate (int(p D // 2)), are transformers' "proportional" rope
    type's for every fraction: a rounded count rotated one more in 15 of these 56 settings."""
    for fraction in P_ROPE_FRACTIONS:
        enc = build_encoding("rope", dim=2 * head_dim, num_heads=2, max_length=16, causal=True, rope_fraction=fraction)
        rope = {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": fraction}
        config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, rope_parameters=rope)
        inv_freq, _ = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
        assert int((enc.inv_freq != 0).sum()) == int((inv_freq != 0).sum()), (head_dim, fraction)
        torch.testing.assert_close(enc.inv_freq, inv_freq, msg=f"head dim {head_dim}, rope_fraction {fraction}")


@pytest.mark.parametrize("options", [{}, {"scale_base": 64.0}, {"rotary_dim": 4, "scale_base": 32.0}])
def test_xpos_matches_x_transformers(options):
    B, L = 2, 24
    enc = make_encoding("xpos", **options)
    ref = _reference_rotary(options, use_xpos=True, scale_base=options.get("scale_base", 512.0))
    q, k = qk(B, L)
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [300]])):
        freqs, scale = ref(positions)
        enc.check_positions(positions)  # as the Transformer: the tables grown beyond max_length
        rq, rk = enc.rotate(q, k, positions)
        torch.testing.assert_close(rq, apply_rotary_pos_emb(q, freqs, scale), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rk, apply_rotary_pos_emb(k, freqs, scale**-1.0), atol=1e-5, rtol=1e-5)


def test_xpos_is_causal_only_and_decays():
    with pytest.raises(ConfigError, match="'xpos' is causal-only"):
        build_encoding("xpos", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=False)
    enc = make_encoding("xpos", scale_base=8.0)
    zeta = (torch.arange(0, HEAD_DIM, 2) + 0.4 * HEAD_DIM) / (1.4 * HEAD_DIM)  # the paper's gamma = 0.4
    assert torch.equal(enc.zeta, zeta.repeat_interleave(2))
    for n in (0, 5, 20):  # q at n, k at 0: q.k carries scale_q / scale_k = zeta^(n / scale_base)
        scale = enc.decay(torch.tensor([n, 0]))  # (2, R)
        torch.testing.assert_close(scale[0] / scale[1], enc.zeta ** (n / 8.0))


@pytest.mark.parametrize("heads", [1, 3])
def test_rotary_heads_rotate_only_the_first_heads(heads):
    """The first k heads are rope's, the others none's (unrotated); so are their logits."""
    enc, full, none = make_plain("rope", rotary_heads=heads), make_plain("rope"), make_plain("none")
    q, k = qk(L=11)
    for positions in (torch.arange(11), torch.arange(11) + torch.tensor([[0], [13]])):
        rq, rk = enc.rotate(q, k, positions)
        fq, fk = full.rotate(q, k, positions)
        nq, nk = none.rotate(q, k, positions)
        assert torch.equal(rq[:, :heads], fq[:, :heads]) and torch.equal(rk[:, :heads], fk[:, :heads])
        assert torch.equal(rq[:, heads:], nq[:, heads:]) and torch.equal(rk[:, heads:], nk[:, heads:])


def test_rotary_heads_range():
    with pytest.raises(ConfigError, match=r"rotary_heads must be in \[1, num_heads=4\], got 5"):
        make_plain("rope", rotary_heads=5)


@pytest.mark.parametrize(
    "factor, low, high, original",
    [(8.0, 1.0, 4.0, 8192), (4.0, 1.0, 4.0, 16), (2.0, 2.0, 8.0, 40), (32.0, 1.0, 4.0, 64)],
)
def test_llama3_matches_transformers(factor, low, high, original):
    """Checked for head dims whose wavelengths fall in all three bands (kept, blended, interpolated)."""
    enc = make_plain("rope", llama3_factor=factor, low_freq_factor=low, high_freq_factor=high, original_length=original)
    params = {"factor": factor, "low_freq_factor": low, "high_freq_factor": high}
    config = hf_config("llama3", original_max_position_embeddings=original, **params)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    torch.testing.assert_close(enc.inv_freq, inv_freq)
    assert attention_factor == 1.0 and enc.attention_scale() == HEAD_DIM**-0.5


LONG_SHORT = ([1.0, 1.2, 1.5, 2.0], [1.0, 3.0, 9.0, 20.0])  # R/2 = 4 factors each


@pytest.mark.parametrize("factor", [None, 4.0, 1.0])
@pytest.mark.parametrize("length", [10, 16, 17, 40])
def test_longrope_matches_transformers(length, factor):
    """Short factors up to original_length, long ones beyond (transformers' `longrope_frequency_update`: the long
    set once seq_len > original_max_position_embeddings), and the attention factor, q and k each by
    sqrt(1 + ln s / ln L0): s = max_length / L0 (transformers' max_position_embeddings / original) unless given."""
    short, long = LONG_SHORT
    options = {"longrope_factor": factor} if factor is not None else {}
    enc = make_plain("rope", longrope_short_factor=short, longrope_long_factor=long, original_length=16, **options)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short, "long_factor": long,
            "original_max_position_embeddings": 16} | ({"factor": factor} if factor is not None else {})  # fmt: skip
    config = LlamaConfig(
        hidden_size=DIM, num_attention_heads=HEADS, max_position_embeddings=MAX_LEN, rope_parameters=rope
    )
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=length)
    torch.testing.assert_close(enc.frequencies(length), inv_freq)
    assert enc.attention_scale() == pytest.approx(attention_factor**2 * HEAD_DIM**-0.5)
    assert attention_factor > 1 or factor == 1.0
    # the rotation: angles at those frequencies, per example (a short row keeps the short factors)
    positions = torch.arange(length) * torch.ones(2, 1, dtype=torch.long)
    positions[1, 9:] = 0  # a padded row of 9 positions
    q, k = qk(L=length)
    ours_q, _ = enc.rotate(q, k, positions)
    short_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=9)
    for row, freq in ((0, inv_freq), (1, short_freq)):
        angles = positions[row].float()[:, None] * freq
        cos, sin = angles.cos().repeat_interleave(2, -1), torch.stack((-angles.sin(), angles.sin()), -1).flatten(-2)
        swapped = torch.stack((q[row, ..., 1::2], q[row, ..., 0::2]), -1).flatten(-2)
        torch.testing.assert_close(ours_q[row], q[row] * cos + swapped * sin, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"llama3_factor": 8.0}, "llama3_factor needs original_length"),
        ({"low_freq_factor": 2.0}, "used only with llama3_factor"),
        ({"llama3_factor": 8.0, "low_freq_factor": 4.0, "original_length": 8}, "high_freq_factor > low_freq_factor"),
        ({"llama3_factor": 8.0, "yarn_factor": 2.0, "original_length": 8}, "exclude other extensions"),
        ({"longrope_short_factor": [1.0] * 4, "original_length": 8}, "needs both longrope_short_factor and"),
        ({"longrope_short_factor": [1.0] * 3, "longrope_long_factor": [1.0] * 4, "original_length": 8},
         r"longrope_short_factor must be 4 positive numbers \(rotary_dim / 2\)"),
        ({"longrope_short_factor": [1.0] * 4, "longrope_long_factor": [1.0, 2.0, 0.0, 1.0], "original_length": 8},
         "longrope_long_factor must be 4 positive numbers"),
        ({"longrope_short_factor": [1.0] * 4, "longrope_long_factor": [2.0] * 4},
         "longrope_long_factor needs original_length"),
        ({"longrope_factor": 4.0}, "longrope_factor is used only with"),
        ({"longrope_short_factor": 2.0, "longrope_long_factor": [2.0] * 4},
         "option 'longrope_short_factor' must be a list"),
        ({"longrope_short_factor": [1.0] * 4, "longrope_long_factor": [2.0] * 4, "original_length": 8,
          "interpolation_factor": 2.0}, "exclude other extensions"),
    ],
)  # fmt: skip
def test_deployed_scaling_errors_are_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as err:
        make_plain("rope", **options)
    assert "\n" not in str(err.value)


def test_pope_matches_x_transformers():
    """Same q, k, positions and phase offsets (clamped to [-2 pi, 0]) -> x-transformers' transformed q and k,
    and logits in the closed form sum_c softplus(q_c) softplus(k_c) cos((i - j) theta_c - delta_c)."""
    enc = make_plain("pope")
    with torch.no_grad():
        enc.phase_bias.uniform_(-8.0, 1.0)  # some beyond the clamp on both sides
    ref = PolarEmbedding(HEAD_DIM, HEADS)
    ref.learned_bias.data.copy_(enc.phase_bias.data)
    L = 20
    q, k = qk(L=L)
    freqs, bias = ref(torch.arange(L) + 5)
    for positions in (torch.arange(L) + 5, (torch.arange(L) + 5).expand(2, L)):
        rq, rk = enc.rotate(q, k, positions)
        torch.testing.assert_close(rq, apply_polar_pos_emb(q, freqs), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rk, apply_polar_pos_emb(k, freqs + bias), atol=1e-5, rtol=1e-5)
    theta, delta = 10000.0 ** (-torch.arange(HEAD_DIM) / HEAD_DIM), enc.phase_bias.clamp(-2 * math.pi, 0)[:, None]
    distance = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).float()[..., None]  # (L, L, 1)
    magnitudes = F.softplus(q)[..., :, None, :] * F.softplus(k)[..., None, :, :]  # (B, H, L, L, D)
    closed = (magnitudes * torch.cos(distance * theta - delta)).sum(-1)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), closed, atol=1e-4, rtol=1e-4)


def test_pope_is_shift_invariant_and_doubles_the_query_key_width():
    enc = make_encoding("pope")
    q, k = qk(L=9)
    rq, rk = enc.rotate(q, k, torch.arange(9))
    sq, sk = enc.rotate(q, k, torch.arange(9) + 40)
    assert rq.shape == q.shape[:-1] + (2 * HEAD_DIM,)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), sq @ sk.transpose(-1, -2), atol=1e-4, rtol=1e-4)
    assert enc.attention_scale() == HEAD_DIM**-0.5  # the width before doubling, as x-transformers
    uniform = make_plain("pope", bias_uniform_init=True).phase_bias
    assert (uniform >= -2 * math.pi).all() and (uniform <= 0).all() and uniform.std() > 1
