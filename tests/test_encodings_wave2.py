"""Tests for the second wave of encodings and options: closed forms and numerical parity with x-transformers or
written-out copies of the official code, the `attend` hook (Shaw's relative values), randomized positions,
PE-Study table transfer, TUPE's BERT-Ad mode, and the Transformer contract for option variants that the
registry-parametrised tests (defaults only) do not reach.

README claims covered here:
- "scaled_sinusoidal | sinusoid times one learned scale": test_scaled_sinusoidal_matches_x_transformers
- "sinusoidal_learnable | trainable table initialised with the sinusoid":
  test_sinusoidal_learnable_starts_at_the_sinusoid_and_learns
- "shaw | relative key (and optionally value, values) embeddings clipped at max_relative":
  test_shaw_key_term_written_out, test_shaw_values_attend_matches_written_out
- "deberta | disentangled c2p + p2c over log buckets": test_deberta_log_buckets, test_deberta_matches_official_code
- "xpos | rotary with exponential decay; causal only": test_xpos_matches_x_transformers,
  test_xpos_is_causal_only_and_decays
- "kerple_log, kerple_power | -r1 log(1 + r2 abs(i-j)), -r1 abs(i-j)^r2": test_kerple_log_hand_computed,
  test_kerple_power_hand_computed
- "fire | MLP over progressively interpolated log distance": test_fire_closed_form_with_hand_set_mlp,
  test_fire_defaults_and_threshold_frozen
- "dynamic_bias | per-head MLP over (log) distance": test_dynamic_bias_matches_x_transformers
- "randomize_positions: N (... sorted random positions from [0, N) at training time, 0..L-1 at evaluation)":
  test_sample_positions_sorted_distinct_in_range, test_every_encoding_accepts_randomize_positions,
  test_randomized_training_positions_reach_the_encoding
- "rope also takes rotary_dim, interpolation_factor, ntk_base_rescale": test_rope_options_match_x_transformers,
  test_rope_option_errors
- "learned takes a saved table (init_from a .pt/.npy file ...; PCA to the width, standardised, init_scale, init_rows:
  first|every_k, freeze)": test_learned_init_from_pca_standardised, test_learned_init_rows_scale_and_freeze,
  test_learned_init_from_errors
- "tupe_a/tupe_r take ... mode: bert_ad" ("tied by default, as the paper's BERT-Ad"): test_tupe_bert_ad_written_out,
  test_tupe_bert_ad_cls_reset_touches_only_the_position_term
- "... except shaw with values: true, whose value term needs the attention weights":
  test_shaw_values_changes_output_and_default_stays_on_sdpa
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import randomize_
from torch import Tensor, nn
from x_transformers.x_transformers import (
    DynamicPositionBias,
    RotaryEmbedding,
    ScaledSinusoidalEmbedding,
    apply_rotary_pos_emb,
)

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.encodings.deberta import log_bucket_position
from lightning_modules.encodings.learned import transfer_table
from lightning_modules.encodings.sinusoidal import sinusoid_table
from lightning_modules.transformer import Transformer, attention_masks, sample_positions
from pe_sweeps.errors import ConfigError

DIM, HEADS, MAX_LEN, VOCAB = 32, 4, 64, 50
HEAD_DIM = DIM // HEADS
CAUSAL = [True, False]


def make(name: str, causal: bool = True, randomize: bool = True, **options):
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal, **options)
    return (randomize_(enc) if randomize else enc).eval()


def qk(B: int, L: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    return torch.randn(2, B, HEADS, L, HEAD_DIM, generator=torch.Generator().manual_seed(seed)).unbind(0)


# ----------------------------------------------------------------------------- sinusoid variants


def test_scaled_sinusoidal_matches_x_transformers():
    L = 20
    enc = make("scaled_sinusoidal", randomize=False)
    assert enc.scale.shape == (1,) and enc.scale.item() == pytest.approx(DIM**-0.5)
    with torch.no_grad():
        enc.scale.fill_(0.7)
    ref = ScaledSinusoidalEmbedding(DIM)
    ref.scale.data.copy_(enc.scale)
    for positions in (torch.arange(L), torch.arange(L) + 37):
        ours = enc.embed(torch.zeros(1, L, DIM), positions)[0]  # (L, C), interleaved sin/cos
        theirs = ref(torch.zeros(1, L, DIM), pos=positions)  # (L, C), all sines then all cosines
        torch.testing.assert_close(ours[:, 0::2], theirs[:, : DIM // 2], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours[:, 1::2], theirs[:, DIM // 2 :], atol=1e-5, rtol=1e-5)
    assert not enc.weight.requires_grad  # the probes' table is a value, not a parameter view
    torch.testing.assert_close(enc.weight, 0.7 * sinusoid_table(torch.arange(MAX_LEN), DIM))


def test_sinusoidal_learnable_starts_at_the_sinusoid_and_learns():
    enc = make("sinusoidal_learnable", randomize=False, randomize_positions=100)
    assert enc.table.shape == (100, DIM) and enc.max_positions == 100
    torch.testing.assert_close(enc.weight.detach(), sinusoid_table(torch.arange(100), DIM), atol=0, rtol=0)
    out = enc.embed(torch.zeros(2, 5, DIM), torch.tensor([[0, 1, 2, 3, 4], [3, 9, 50, 70, 99]]))
    out.sum().backward()
    assert enc.table.grad is not None and enc.table.grad[99].abs().sum() > 0 and enc.table.grad[98].abs().sum() == 0


# ----------------------------------------------------------------------------- RoPE options and xPos


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
    enc, ref = make("rope", **options), _reference_rotary(options)
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
            make("rope", **bad)


@pytest.mark.parametrize("options", [{}, {"scale_base": 64.0}, {"rotary_dim": 4, "scale_base": 32.0}])
def test_xpos_matches_x_transformers(options):
    B, L = 2, 24
    enc = make("xpos", **options)
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
    enc = make("xpos", scale_base=8.0)
    zeta = (torch.arange(0, HEAD_DIM, 2) + 0.4 * HEAD_DIM) / (1.4 * HEAD_DIM)  # the paper's gamma = 0.4
    assert torch.equal(enc.zeta, zeta.repeat_interleave(2))
    for n in (0, 5, 20):  # q at n, k at 0: q.k carries scale_q / scale_k = zeta^(n / scale_base)
        scale = enc.decay(torch.tensor([n, 0]))  # (2, R)
        torch.testing.assert_close(scale[0] / scale[1], enc.zeta ** (n / 8.0))


# ----------------------------------------------------------------------------- KERPLE


def _set_kerple(enc, r1, r2):
    with torch.no_grad():
        enc.r1.copy_(torch.tensor(r1))
        enc.r2.copy_(torch.tensor(r2))
    return enc


@pytest.mark.parametrize("causal", CAUSAL)
def test_kerple_log_hand_computed(causal):
    enc = _set_kerple(
        build_encoding("kerple_log", dim=8, num_heads=2, max_length=8, causal=causal), [1.0, 0.5], [2.0, 0.25]
    )
    got = enc.positional_logits(3)
    # head 0: -log(1 + 2 d): d=1 -> -log 3, d=2 -> -log 5; head 1: -0.5 log(1 + d/4): -0.5 log 1.25, -0.5 log 1.5
    h0 = [[0.0, -1.0986123, -1.6094379], [-1.0986123, 0.0, -1.0986123], [-1.6094379, -1.0986123, 0.0]]
    h1 = [[0.0, -0.1115718, -0.2027326], [-0.1115718, 0.0, -0.1115718], [-0.2027326, -0.1115718, 0.0]]
    torch.testing.assert_close(got, torch.tensor([h0, h1]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", CAUSAL)
def test_kerple_power_hand_computed(causal):
    enc = _set_kerple(
        build_encoding("kerple_power", dim=8, num_heads=2, max_length=8, causal=causal), [1.0, 0.5], [2.0, 0.25]
    )
    got = enc.positional_logits(3)
    # head 0: -d^2: -1, -4; head 1: -0.5 d^0.25: -0.5, -0.5 * 2^0.25 = -0.5946036
    h0 = [[0.0, -1.0, -4.0], [-1.0, 0.0, -1.0], [-4.0, -1.0, 0.0]]
    h1 = [[0.0, -0.5, -0.5946036], [-0.5, 0.0, -0.5], [-0.5946036, -0.5, 0.0]]
    torch.testing.assert_close(got, torch.tensor([h0, h1]), atol=1e-6, rtol=0)


def test_kerple_keeps_parameters_in_range_and_gradients_finite():
    for name, r2_max in (("kerple_log", math.inf), ("kerple_power", 2.0)):
        enc = _set_kerple(build_encoding(name, dim=8, num_heads=2, max_length=8, causal=True), [-1.0, 0.3], [-0.5, 3.0])
        bias = enc.bias(torch.arange(6))
        assert enc.r1.tolist() == pytest.approx([0.01, 0.3]) and enc.r2[0].item() == pytest.approx(0.01)
        assert enc.r2[1].item() == pytest.approx(min(3.0, r2_max))
        bias.sum().backward()  # distance 0 included: the power kernel's d^r2 must not give NaN gradients
        assert enc.r1.grad.isfinite().all() and enc.r2.grad.isfinite().all()
    fresh = build_encoding("kerple_log", dim=8, num_heads=4, max_length=8, causal=True)
    assert fresh.r1.shape == (4,) and ((0 <= fresh.r1) & (fresh.r1 <= 2)).all() and (fresh.r2 <= 1).all()


# ----------------------------------------------------------------------------- FIRE


@pytest.mark.parametrize("causal", CAUSAL)
def test_fire_closed_form_with_hand_set_mlp(causal):
    enc = build_encoding("fire", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal, mlp_width=1)
    c, threshold = 0.5, 4.0
    with torch.no_grad():  # f(x) = (h + 1) * relu(x): identity-like, one slope per head
        enc.mlp[0].weight.fill_(1.0), enc.mlp[0].bias.zero_()
        enc.mlp[2].weight.copy_(torch.arange(1.0, HEADS + 1)[:, None]), enc.mlp[2].bias.zero_()
        enc.c.fill_(c), enc.init_threshold.fill_(threshold), enc.threshold_multiplier.fill_(1.0)
    for offset in (0, 9):
        positions = torch.arange(8) + offset
        expected = torch.tensor(
            [[[(h + 1) * math.log(c * abs(i - j) + 1) / (math.log(c * max(i, threshold) + 1) + 1e-6)
               for j in positions.tolist()] for i in positions.tolist()] for h in range(HEADS)]
        )  # fmt: skip
        torch.testing.assert_close(enc.bias(positions), expected, atol=1e-5, rtol=1e-5)


def test_fire_defaults_and_threshold_frozen():
    enc = make("fire", randomize=False)
    assert enc.c.item() == pytest.approx(0.1) and enc.init_threshold.item() == 512.0
    assert not enc.init_threshold.requires_grad and enc.threshold_multiplier.requires_grad
    assert enc.mlp[0].out_features == 32 and enc.mlp[2].out_features == HEADS
    # below the threshold the normaliser is the constant psi(512): a shift leaves the bias alone ...
    torch.testing.assert_close(enc.bias(torch.arange(8) + 100), enc.bias(torch.arange(8)))
    # ... beyond it, the query position normalises
    assert not torch.allclose(enc.bias(torch.arange(8) + 1000), enc.bias(torch.arange(8)))


# ----------------------------------------------------------------------------- dynamic position bias


@pytest.mark.parametrize("log_distance", [False, True])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_dynamic_bias_matches_x_transformers(depth, log_distance):
    L = 17
    enc = make("dynamic_bias", depth=depth, log_distance=log_distance)
    ref = DynamicPositionBias(dim=DIM // 4, heads=HEADS, depth=depth, log_distance=log_distance)
    ours = [m for m in enc.mlp if isinstance(m, nn.Linear)]
    theirs = [m for m in ref.modules() if isinstance(m, nn.Linear)]
    assert len(ours) == len(theirs) == depth + 1
    for a, b in zip(ours, theirs):
        b.load_state_dict(a.state_dict())
    torch.testing.assert_close(enc.positional_logits(L), ref(L, L), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(enc.bias(torch.arange(L) + 50), ref(L, L), atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- Shaw


@pytest.mark.parametrize("max_relative", [2, 16])
def test_shaw_key_term_written_out(max_relative):
    B, L = 2, 9
    enc = make("shaw", max_relative=max_relative)
    q, k = qk(B, L)
    positions = torch.arange(L) + torch.tensor([[0], [4]])
    got = enc.content_bias(q, k, positions)
    a_k = enc.key_table.weight
    expected = torch.zeros(B, HEADS, L, L)
    for b in range(B):
        for i in range(L):
            for j in range(L):
                rel = max(-max_relative, min(max_relative, int(positions[b, j] - positions[b, i])))
                expected[b, :, i, j] = (q[b, :, i] * a_k[rel + max_relative]).sum(-1) / math.sqrt(HEAD_DIM)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def shaw_reference(enc, q, k, v, positions, allowed: Tensor) -> Tensor:
    """Shaw et al. eqs. (3)-(5) written out: e_ij = q_i (k_j + a^K_ij) / sqrt(D), z_i = sum_j a_ij (v_j + a^V_ij)."""
    K, L = enc.max_relative, q.shape[-2]
    rel = (positions[..., None, :] - positions[..., :, None]).clamp(-K, K) + K  # (..., L, L)
    rel = rel.expand(q.shape[0], L, L)[:, None]  # (B, 1, L, L)
    a_k, a_v = enc.key_table.weight[rel], enc.value_table.weight[rel]  # (B, 1, L, L, D)
    logits = ((q[..., :, None, :] * (k[..., None, :, :] + a_k)).sum(-1)) / math.sqrt(HEAD_DIM)
    weights = logits.masked_fill(~allowed, float("-inf")).softmax(-1)  # (B, H, L, L)
    return (weights[..., None] * (v[..., None, :, :] + a_v)).sum(-2)  # (B, H, L, D)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", CAUSAL)
def test_shaw_values_attend_matches_written_out(causal, padded):
    """The `attend` path of the Transformer (merged mask, content_bias, explicit softmax, value term)."""
    torch.manual_seed(0)
    B, L = 3, 10
    model = make_model("shaw", causal, values=True, max_relative=3)
    attn, enc = model.blocks[0].attn, model.encoding
    x = torch.randn(B, L, DIM)
    padding_mask = (torch.arange(L)[None, :] < torch.tensor([L, 7, 3])[:, None]) if padded else None
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [5], [2]])):
        mask, allowed = attention_masks(enc.bias(positions), L, causal, padding_mask, x.device)
        got = attn(x, enc, positions, mask, allowed, causal)
        q, k, v = attn.qkv(x).view(B, L, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        full = torch.ones(B, 1, L, L, dtype=torch.bool)
        if causal:
            full &= torch.ones(L, L, dtype=torch.bool).tril()
        if padding_mask is not None:
            full &= padding_mask[:, None, None, :]
        y = shaw_reference(enc, q, k, v, positions, full)
        want = attn.out(y.transpose(1, 2).reshape(B, L, DIM))
        if causal and padding_mask is not None:  # padded keys are not masked causally: compare real queries
            got, want = got[padding_mask], want[padding_mask]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_shaw_values_changes_output_and_default_stays_on_sdpa():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, HEADS, 6, HEAD_DIM).unbind(0)
    positions = torch.arange(6)
    plain = make("shaw")
    assert plain.value_table is None
    mask = plain.content_bias(q, k, positions)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(
        plain.attend(q, k, v, mask, is_causal=False, dropout_p=0.0, scale=None, positions=positions), sdpa
    )
    with_values = make("shaw", values=True)
    mask = with_values.content_bias(q, k, positions)
    out = with_values.attend(q, k, v, mask, is_causal=False, dropout_p=0.0, scale=HEAD_DIM**-0.5, positions=positions)
    assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-3)


# ----------------------------------------------------------------------------- DeBERTa


def official_make_log_bucket_position(relative_pos, bucket_size, max_position):
    """DeBERTa-v2 `make_log_bucket_position`, copied in spirit (float ops as the original)."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid), torch.tensor(mid - 1).type_as(relative_pos),
                          torch.abs(relative_pos))  # fmt: skip
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


def test_deberta_log_buckets():
    rel = torch.arange(-2000, 2001)
    got = log_bucket_position(rel, 256, 512)
    assert torch.equal(got, official_make_log_bucket_position(rel, 256, 512).long())
    values = dict(zip(rel.tolist(), got.tolist()))
    assert all(values[r] == r for r in range(-128, 129))  # exact up to mid
    # hand-computed: 129 -> 128 + ceil(log(129/128) / log(511/128) * 127) = 128 + ceil(0.714) = 129
    assert values[129] == 129 and values[-129] == -129
    assert values[511] == 255 and values[-511] == -255  # max_position - 1 -> the last bucket
    assert values[1000] == 128 + math.ceil(math.log(1000 / 128) / math.log(511 / 128) * 127)  # beyond: clipped later
    small = log_bucket_position(torch.arange(-40, 41), 8, 32)
    assert torch.equal(small, official_make_log_bucket_position(torch.arange(-40, 41), 8, 32).long())


def official_disentangled_bias(enc, q, k, relative_pos) -> Tensor:
    """DeBERTa's `disentangled_attention_bias` (c2p + p2c, scale sqrt(D * 3)), written out over (B*H, L, D)."""
    B, H, L, D = q.shape
    span = enc.span
    rel = enc.norm(enc.table.weight)[None]  # (1, 2S, C)
    pos_key = enc.pos_key(rel).view(1, 2 * span, H, D).permute(0, 2, 1, 3).reshape(H, 2 * span, D).repeat(B, 1, 1)
    pos_query = enc.pos_query(rel).view(1, 2 * span, H, D).permute(0, 2, 1, 3).reshape(H, 2 * span, D).repeat(B, 1, 1)
    query_layer, key_layer = q.reshape(B * H, L, D), k.reshape(B * H, L, D)
    scale = math.sqrt(D * 3)
    c2p_att = torch.bmm(query_layer, pos_key.transpose(-1, -2))
    c2p_pos = torch.clamp(relative_pos + span, 0, span * 2 - 1)
    c2p_att = torch.gather(c2p_att, dim=-1, index=c2p_pos.expand([B * H, L, L]))
    p2c_pos = torch.clamp(-relative_pos + span, 0, span * 2 - 1)
    p2c_att = torch.bmm(key_layer, pos_query.transpose(-1, -2))
    p2c_att = torch.gather(p2c_att, dim=-1, index=p2c_pos.expand([B * H, L, L])).transpose(-1, -2)
    return (c2p_att / scale + p2c_att / scale).view(B, H, L, L)


@pytest.mark.parametrize("buckets, max_rel", [(256, 512), (8, 20), (0, 5)])
def test_deberta_matches_official_code(buckets, max_rel):
    B, L = 2, 30
    enc = make("deberta", position_buckets=buckets, max_relative_positions=max_rel)
    assert enc.attention_scale() == pytest.approx((3 * HEAD_DIM) ** -0.5)
    q, k = qk(B, L)
    i = torch.arange(L)
    relative = i[:, None] - i[None, :]  # build_relative_position: query - key
    if buckets > 0:
        relative = official_make_log_bucket_position(relative, buckets, max_rel).long()
    expected = official_disentangled_bias(enc, q, k, relative[None])
    torch.testing.assert_close(enc.content_bias(q, k, i), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(enc.content_bias(q, k, i + 1000), expected, atol=1e-5, rtol=1e-5)  # relative only


def test_deberta_option_errors():
    with pytest.raises(ConfigError, match="max_relative_positions"):
        make("deberta", position_buckets=256, max_relative_positions=100)


# ----------------------------------------------------------------------------- TUPE BERT-Ad


@pytest.mark.parametrize("name", ["tupe_a", "tupe_r"])
@pytest.mark.parametrize("causal", CAUSAL)
def test_tupe_bert_ad_written_out(name, causal):
    """((xWq + pUq)(xWk + pUk)^T) / sqrt(4D) = all four terms, untied projections, no [CLS] reset."""
    B, L = 2, 7
    enc = make(name, causal, mode="bert_ad", untie_cls=False)
    assert enc.attention_scale() == pytest.approx((4 * HEAD_DIM) ** -0.5)
    q, k = qk(B, L)
    positions = torch.arange(L) + torch.tensor([[0], [3]])
    p = F.layer_norm(enc.table.weight[positions + 1], (DIM,), enc.norm.weight, enc.norm.bias, enc.norm.eps)
    pq = enc.proj_q(p).view(B, L, HEADS, HEAD_DIM).transpose(1, 2)  # (B, H, L, D)
    pk = enc.proj_k(p).view(B, L, HEADS, HEAD_DIM).transpose(1, 2)
    expected = ((q + pq) @ (k + pk).transpose(-1, -2)) / math.sqrt(4 * HEAD_DIM)
    if name == "tupe_r":
        expected = expected + enc.relative_bias(positions)
    logits = q @ k.transpose(-1, -2) * enc.attention_scale() + enc.bias(positions) + enc.content_bias(q, k, positions)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_tupe_bert_ad_cls_reset_touches_only_the_position_term():
    B, L = 1, 6
    tied, untied = make("tupe_a", mode="bert_ad"), make("tupe_a", mode="bert_ad", untie_cls=True, cls_first=True)
    assert tied.untie_cls is False  # BERT-Ad (the paper) has no [CLS] untying: tied by default
    q, k = qk(B, L)
    i = torch.arange(L)
    assert torch.equal(tied.content_bias(q, k, i), untied.content_bias(q, k, i))  # cross terms: no reset
    diff = untied.bias(i) - tied.bias(i)
    assert diff[:, 1:, 1:].abs().max() == 0 and diff[:, 0].abs().max() > 0
    assert make("tupe_a").content_bias(q, k, i) is None  # TUPE-A drops the cross terms
    with pytest.raises(ConfigError, match="unknown tupe mode 'bert'"):
        make("tupe_a", mode="bert")


# ----------------------------------------------------------------------------- randomized positions


def test_sample_positions_sorted_distinct_in_range():
    torch.manual_seed(0)
    positions = sample_positions(64, 40, 100)
    assert positions.shape == (64, 40) and positions.dtype == torch.long
    assert (positions[:, 1:] > positions[:, :-1]).all()  # sorted and distinct
    assert positions.min() >= 0 and positions.max() < 100
    assert len({tuple(row) for row in positions.tolist()}) > 60  # a fresh draw per row
    assert torch.equal(sample_positions(2, 5, 5), torch.arange(5).expand(2, 5))  # the whole range: 0..N-1
    with pytest.raises(ConfigError, match="randomize_positions=10 cannot hold 11"):
        sample_positions(1, 11, 10)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_encoding_accepts_randomize_positions(name):
    """Training draws random positions (outputs move between draws for position-aware encodings), evaluation
    uses 0..L-1 (deterministic, equal to explicit positions)."""
    causal = True
    arch = ArchConfig(name, encoding_options={"randomize_positions": 200}, dim=DIM, depth=1, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch, causal=causal)
    randomize_(model)
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    assert model.encoding.randomize_positions == 200
    model.train()
    drawn = model.default_positions(2, 12, tokens.device)
    assert drawn.shape == (2, 12) and (drawn[:, 1:] > drawn[:, :-1]).all() and drawn.max() < 200
    assert model(tokens).isfinite().all()
    model.eval()
    assert torch.equal(model.default_positions(2, 12, tokens.device), torch.arange(12))
    out = model(tokens)
    assert torch.equal(out, model(tokens)) and torch.equal(out, model(tokens, positions=torch.arange(12)))
    if getattr(model.encoding, "max_positions", None) is not None:  # tables sized to the sampled range
        assert model.encoding.max_positions == 200


def test_randomized_training_positions_reach_the_encoding():
    arch = ArchConfig("learned", encoding_options={"randomize_positions": 300}, dim=DIM, depth=1, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch)
    assert model.encoding.table.num_embeddings == 300
    seen = []
    handle = model.encoding.table.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    model.train()
    torch.manual_seed(1)
    model(torch.zeros(4, 20, dtype=torch.long))
    model.eval()
    model(torch.zeros(4, 20, dtype=torch.long))
    handle.remove()
    train_positions, eval_positions = seen
    assert train_positions.shape == (4, 20) and train_positions.max() >= MAX_LEN  # beyond max_length
    assert torch.equal(eval_positions, torch.arange(20))
    with pytest.raises(ConfigError, match="randomize_positions"):
        build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, randomize_positions=0)


# ----------------------------------------------------------------------------- PE-Study transfer on `learned`


@pytest.fixture
def saved_table(tmp_path):
    table = torch.randn(64, 48, generator=torch.Generator().manual_seed(0)) + torch.linspace(0, 3, 64)[:, None]
    torch.save(table, tmp_path / "table.pt")
    np.save(tmp_path / "table.npy", table.numpy())
    return table, tmp_path


def _learned(path, **options):
    return build_encoding(
        "learned", dim=DIM, num_heads=HEADS, max_length=16, causal=True, init_from=str(path), **options
    )


@pytest.mark.parametrize("suffix", ["pt", "npy"])
def test_learned_init_from_pca_standardised(saved_table, suffix):
    from sklearn.decomposition import PCA

    table, folder = saved_table
    enc = _learned(folder / f"table.{suffix}")
    weight = enc.weight.detach()
    assert weight.shape == (16, DIM) and enc.weight.requires_grad
    assert abs(weight.mean().item()) < 1e-5 and weight.std().item() == pytest.approx(1.0, abs=1e-5)
    reduced = torch.from_numpy(PCA(DIM, svd_solver="full").fit_transform(table.double().numpy())).float()[:16]
    torch.testing.assert_close(weight, (reduced - reduced.mean()) / reduced.std(), atol=1e-4, rtol=1e-4)


def test_learned_init_rows_scale_and_freeze(saved_table):
    table, folder = saved_table
    skip = _learned(folder / "table.pt", init_rows="every_k", init_stride=4, init_scale=0.02, freeze=True)
    assert not skip.weight.requires_grad
    assert skip.weight.std().item() == pytest.approx(0.02, rel=1e-4)
    full = transfer_table(table, 64, DIM, "first", 1, None)  # all 64 rows, PCA'd: rows 0, 4, ... 60 of it
    every = transfer_table(table, 16, DIM, "every_k", 4, None)
    torch.testing.assert_close(every, (full[::4] - full[::4].mean()) / full[::4].std(), atol=1e-4, rtol=1e-4)
    same_width = transfer_table(table[:, :DIM], 16, DIM, "first", 1, None)  # d' == C: no PCA, standardised
    torch.testing.assert_close(same_width, (table[:16, :DIM] - table[:16, :DIM].mean()) / table[:16, :DIM].std())


def test_learned_init_from_errors(saved_table, tmp_path):
    table, folder = saved_table
    with pytest.raises(ConfigError, match="no file"):
        _learned(tmp_path / "missing.pt")
    (tmp_path / "table.txt").write_text("1 2")
    with pytest.raises(ConfigError, match="neither a .pt nor a .npy"):
        _learned(tmp_path / "table.txt")
    with pytest.raises(ConfigError, match="17 positions .* need 65 saved rows, the file has 64"):
        _learned(folder / "table.pt", init_rows="every_k", init_stride=4, randomize_positions=17)  # rows 0, 4, ..., 64
    torch.save(table[:, :16], tmp_path / "narrow.pt")
    with pytest.raises(ConfigError, match="cannot be reduced by PCA to width 32"):
        _learned(tmp_path / "narrow.pt")
    with pytest.raises(ConfigError, match="init_rows"):
        _learned(folder / "table.pt", init_rows="last")


# ----------------------------------------------------------------------------- Transformer contract, option variants


VARIANTS = [
    ("shaw", {"values": True, "max_relative": 3}),
    ("tupe_a", {"mode": "bert_ad"}),
    ("tupe_r", {"mode": "bert_ad", "untie_cls": False}),
    ("rope", {"rotary_dim": 4, "interpolation_factor": 2.0, "ntk_base_rescale": 3.0}),
    ("xpos", {"rotary_dim": 4, "scale_base": 16.0}),
    ("deberta", {"position_buckets": 8, "max_relative_positions": 20}),
    ("deberta", {"position_buckets": 0, "max_relative_positions": 5}),
    ("dynamic_bias", {"depth": 3, "log_distance": True}),
    ("fire", {"mlp_width": 8}),
    ("learned", {"randomize_positions": 128}),
]
VARIANT_IDS = [f"{name}-{'-'.join(map(str, options.values()))}" for name, options in VARIANTS]


def make_model(name: str, causal: bool, **options) -> Transformer:
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=2, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch, causal=causal)
    return randomize_(model).eval()


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name, options", VARIANTS, ids=VARIANT_IDS)
def test_variant_no_leak_padding_and_positions(name, options, causal):
    model = make_model(name, causal, **options)
    B, L = 2, 8
    tokens = torch.randint(0, VOCAB, (B, L), generator=torch.Generator().manual_seed(0))
    emb = model.token_emb(tokens).detach().requires_grad_(True)
    handle = model.token_emb.register_forward_hook(lambda m, i, o: emb)
    try:
        out = model(tokens)
    finally:
        handle.remove()
    for t in range(L):
        (grad,) = torch.autograd.grad(out[:, t].sum(), emb, retain_graph=True)
        if causal:
            assert (grad[:, t + 1 :] == 0).all(), f"position {t} sees the future"
        else:
            assert grad[:, t + 1 :].abs().sum() > 0 or t == L - 1
    padding_mask = torch.arange(L)[None, :] < torch.tensor([L, 5])[:, None]
    padded = model(tokens, padding_mask=padding_mask)
    torch.testing.assert_close(padded[1, :5], model(tokens[1:, :5])[0], atol=1e-5, rtol=1e-5)
    positions = torch.arange(L) + torch.tensor([[0], [9]])
    per_row = model(tokens, positions=positions)
    torch.testing.assert_close(per_row[1], model(tokens[1:], positions=positions[1])[0], atol=1e-5, rtol=1e-5)
    shifted = model(tokens, positions=torch.arange(L) + 7)
    if ENCODINGS[name].shift_invariant:
        torch.testing.assert_close(shifted, out, atol=1e-4, rtol=1e-4)
