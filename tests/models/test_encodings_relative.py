"""Relative-vector encodings, whose logit terms involve q or k or a learned position projection: Shaw, DeBERTa,
TUPE (and its BERT-R baseline); written-out copies of the official code.

Claims of docs/encodings.md covered here:
- "shaw | relative key (and optionally value, values) embeddings clipped at max_relative":
  test_shaw_key_term_written_out, test_shaw_values_attend_matches_written_out
- "... except shaw with values: true, whose value term needs the attention weights":
  test_shaw_values_changes_output_and_default_stays_on_sdpa
- "deberta | disentangled c2p + p2c over log buckets": test_deberta_log_buckets, test_deberta_matches_official_code
- "tupe_a | untied positional attention, 1/sqrt(2 d_head), [CLS] untied ... (untie_cls, proj_bias)":
  test_tupe_cls_scheme_matches_official
- "tupe_r | tupe_a + T5 relative bias, [CLS] buckets as in the official code": test_tupe_cls_scheme_matches_official,
  test_tupe_r_causal_cls_buckets, test_tupe_r_relative_part_matches_t5_when_tied
- "bert_r | learned + T5 relative bias, unscaled": test_bert_r_is_learned_absolute_plus_tupe_r_relative_term
- "tupe_a_tied | tupe_a with [CLS] tied (untie_cls: false)": test_tupe_a_tied_is_tupe_a_without_the_cls_reset
- "TUPE's [CLS] untying applies only where position 0 holds [CLS] ... untie_cls: true there is a one-line error.
  mode: bert_ad is tied by default": test_untie_cls_only_where_position_0_holds_cls
- "tupe_a/tupe_r take ... mode: bert_ad" ("tied by default, as the paper's BERT-Ad"): test_tupe_bert_ad_written_out,
  test_tupe_bert_ad_cls_reset_touches_only_the_position_term
"""

import math

import pytest
import torch
import torch.nn.functional as F
from encoding_helpers import (
    CAUSAL,
    DIM,
    HEAD_DIM,
    HEADS,
    MAX_LEN,
    make,
    make_encoding,
    make_model,
    qk,
    t5_bucket_closed_form,
)
from torch import Tensor
from x_transformers.x_transformers import RelativePositionBias

from lightning_modules.encodings import build_encoding, encoding_options
from lightning_modules.encodings.deberta import log_bucket_position
from lightning_modules.encodings.tupe import TupeA
from lightning_modules.transformer import attention_masks
from pe_core.errors import ConfigError


@pytest.mark.parametrize("max_relative", [2, 16])
def test_shaw_key_term_written_out(max_relative):
    B, L = 2, 9
    enc = make_encoding("shaw", max_relative=max_relative)
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
    plain = make_encoding("shaw")
    assert plain.value_table is None
    mask = plain.content_bias(q, k, positions)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(
        plain.attend(q, k, v, mask, is_causal=False, dropout_p=0.0, scale=None, positions=positions), sdpa
    )
    with_values = make_encoding("shaw", values=True)
    mask = with_values.content_bias(q, k, positions)
    out = with_values.attend(q, k, v, mask, is_causal=False, dropout_p=0.0, scale=HEAD_DIM**-0.5, positions=positions)
    assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-3)


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
    enc = make_encoding("deberta", position_buckets=buckets, max_relative_positions=max_rel)
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
        make_encoding("deberta", position_buckets=256, max_relative_positions=100)


def tupe_reference_untied(enc: TupeA, L: int, untie_cls: bool) -> torch.Tensor:
    """The official TUPE code: full (L+1)x(L+1) logits over table rows 0..L, then the [CLS] reset."""
    p = F.layer_norm(enc.table.weight[: L + 1], (DIM,), enc.norm.weight, enc.norm.bias, enc.norm.eps)
    q, k = F.linear(p, enc.proj_q.weight, enc.proj_q.bias), F.linear(p, enc.proj_k.weight, enc.proj_k.bias)
    q, k = q.view(L + 1, HEADS, HEAD_DIM), k.view(L + 1, HEADS, HEAD_DIM)
    A = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(2 * HEAD_DIM)  # (H, L+1, L+1)
    if not untie_cls:
        return A[:, 1:, 1:]
    theta_1, theta_2 = A[:, 0, 0], A[:, 1, 1]
    A = A[:, 1:, 1:].clone()
    A[:, :, 0] = theta_2[:, None]
    A[:, 0, :] = theta_1[:, None]
    return A


def tupe_reference_buckets(L: int, causal: bool, untie_cls: bool) -> torch.Tensor:
    buckets = torch.tensor([[t5_bucket_closed_form(j - i, not causal) for j in range(L)] for i in range(L)])
    if untie_cls:
        row, col = (32, 33) if causal else (16, 32)  # bidirectional: PAPERS.md; causal: tupe.py docstring
        buckets[1:, 0] = col
        buckets[0, :] = row
    return buckets


@pytest.mark.parametrize("proj_bias", [False, True])
@pytest.mark.parametrize("untie_cls", [True, False])
@pytest.mark.parametrize("name", ["tupe_a", "tupe_r"])
def test_tupe_cls_scheme_matches_official(name, untie_cls, proj_bias):
    L = 10
    enc = make(name, causal=False, untie_cls=untie_cls, proj_bias=proj_bias)
    untied = tupe_reference_untied(enc, L, untie_cls)
    logits = enc.positional_logits(L)
    if name == "tupe_r":
        buckets = tupe_reference_buckets(L, causal=False, untie_cls=untie_cls)
        assert torch.equal(enc.relative_buckets(torch.arange(L)), buckets)
        relative = enc.relative_table.weight[buckets].permute(2, 0, 1)  # added unscaled
        assert torch.equal(enc.relative_bias(torch.arange(L)), relative)
        assert enc.relative_table.num_embeddings == (33 if untie_cls else 32)
        logits = logits - relative
    torch.testing.assert_close(logits, untied, atol=1e-5, rtol=1e-5)
    if untie_cls:  # [CLS] row/column are constants per head, distinct from the tied term
        assert (logits[:, 0, :] == logits[:, 0, :1]).all() and (logits[:, 1:, 0] == logits[:, 1:2, 0]).all()
        plain = tupe_reference_untied(enc, L, untie_cls=False)
        assert not torch.allclose(logits[:, 0], plain[:, 0])


def test_tupe_r_causal_cls_buckets():
    L = 20
    enc = make("tupe_r", causal=True)
    buckets = tupe_reference_buckets(L, causal=True, untie_cls=True)
    assert torch.equal(enc.relative_buckets(torch.arange(L)), buckets)
    assert enc.relative_table.num_embeddings == 34
    torch.testing.assert_close(
        enc.positional_logits(L) - enc.relative_table.weight[buckets].permute(2, 0, 1),
        tupe_reference_untied(enc, L, untie_cls=True),
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize("causal", CAUSAL)
def test_tupe_r_relative_part_matches_t5_when_tied(causal):
    L = 160
    enc = make("tupe_r", causal, max_length=200, untie_cls=False)
    ref = RelativePositionBias(scale=1, causal=causal, heads=HEADS)
    ref.relative_attention_bias.weight.data.copy_(enc.relative_table.weight)
    torch.testing.assert_close(enc.relative_bias(torch.arange(L)), ref(L, L), atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("untie_cls", [True, False])
def test_tupe_r_relative_bias_is_shift_invariant(untie_cls, causal):
    """The [CLS] reset sits at sequence index 0, so shifting all positions leaves the relative part alone;
    the absolute (untied) part moves."""
    L, shift = 12, 7
    enc = make("tupe_r", causal, untie_cls=untie_cls)
    positions = torch.arange(L)
    assert torch.equal(enc.relative_bias(positions + shift), enc.relative_bias(positions))
    batched = positions + torch.tensor([[0], [shift], [40]])  # (B, L), a different shift per row
    assert torch.equal(enc.relative_bias(batched), enc.relative_bias(positions).expand(3, -1, -1, -1))
    assert not torch.allclose(enc.untied(positions + shift), enc.untied(positions))


@pytest.mark.parametrize("name", ["tupe_a", "tupe_r"])
def test_untie_cls_only_where_position_0_holds_cls(name):
    """Unset, [CLS] untying follows `cls_first` (off for causal / synthetic models) and is off for BERT-Ad;
    forced on without [CLS] at position 0 it is a one-line error."""
    common = dict(dim=DIM, num_heads=HEADS, max_length=MAX_LEN)
    for causal in CAUSAL:
        assert build_encoding(name, causal=causal, **common).untie_cls is False
        assert build_encoding(name, causal=causal, cls_first=True, **common).untie_cls is True
        assert build_encoding(name, causal=causal, cls_first=True, mode="bert_ad", **common).untie_cls is False
        with pytest.raises(ConfigError, match="untie_cls needs \\[CLS\\] at position 0"):
            build_encoding(name, causal=causal, untie_cls=True, **common)
    assert "cls_first" not in encoding_options(name)  # set by the model, not a user option


def test_tupe_a_tied_is_tupe_a_without_the_cls_reset():
    tied = make("tupe_a_tied", causal=False)
    reference = make("tupe_a", causal=False, untie_cls=False)
    reference.load_state_dict(tied.state_dict())
    torch.testing.assert_close(tied.positional_logits(10), reference.positional_logits(10))
    assert tied.untie_cls is False and make("tupe_a", causal=False).untie_cls is True


@pytest.mark.parametrize("name", ["tupe_a", "tupe_r"])
@pytest.mark.parametrize("causal", CAUSAL)
def test_tupe_bert_ad_written_out(name, causal):
    """((xWq + pUq)(xWk + pUk)^T) / sqrt(4D) = all four terms, untied projections, no [CLS] reset."""
    B, L = 2, 7
    enc = make_encoding(name, causal, mode="bert_ad", untie_cls=False)
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
    tied, untied = (
        make_encoding("tupe_a", mode="bert_ad"),
        make_encoding("tupe_a", mode="bert_ad", untie_cls=True, cls_first=True),
    )
    assert tied.untie_cls is False  # BERT-Ad (the paper) has no [CLS] untying: tied by default
    q, k = qk(B, L)
    i = torch.arange(L)
    assert torch.equal(tied.content_bias(q, k, i), untied.content_bias(q, k, i))  # cross terms: no reset
    diff = untied.bias(i) - tied.bias(i)
    assert diff[:, 1:, 1:].abs().max() == 0 and diff[:, 0].abs().max() > 0
    assert make_encoding("tupe_a").content_bias(q, k, i) is None  # TUPE-A drops the cross terms
    with pytest.raises(ConfigError, match="option 'mode' must be one of 'untied', 'bert_ad', got 'bert'"):
        make_encoding("tupe_a", mode="bert")


@pytest.mark.parametrize("causal", [False, True])
def test_bert_r_is_learned_absolute_plus_tupe_r_relative_term(causal):
    """BERT-R (TUPE paper baseline) = `learned`'s input embedding + TUPE-R's relative bias without [CLS] reset."""
    bert_r = make("bert_r", causal)
    learned = make("learned", causal)
    tupe_r = make("tupe_r", causal, untie_cls=False)
    learned.table.weight.data.copy_(bert_r.table.weight)
    tupe_r.relative_table.weight.data.copy_(bert_r.relative_table.weight)
    x, positions = torch.randn(2, MAX_LEN, DIM), torch.arange(MAX_LEN)
    torch.testing.assert_close(bert_r.embed(x, positions), learned.embed(x, positions))
    torch.testing.assert_close(bert_r.positional_logits(MAX_LEN), tupe_r.relative_bias(positions))
