"""Additive logit biases, functions of the distance: ALiBi, T5's buckets, KERPLE, FIRE and Sandwich; closed forms and
parity with x-transformers.

Claims of docs/encodings.md covered here:
- "t5_bias | bucketed relative bias (32 buckets, max distance 128)": test_t5_bucket_table_bidirectional,
  test_t5_bucket_table_causal, test_t5_bias_is_table_lookup_of_bucket, test_t5_bias_matches_x_transformers
- "a max_distance beyond the training length leaves the far buckets untrained (one warning line)":
  test_t5_untrained_buckets_are_those_the_training_length_never_reaches,
  test_fitting_warns_once_about_untrained_t5_buckets
- "alibi | linear bias -m_h abs(i-j), geometric slopes; symmetric when bidirectional": test_alibi_slopes_closed_form,
  test_alibi_bias_closed_form, test_alibi_matches_x_transformers
- "alibi takes heads (ALiBi on the first k heads only, x-transformers' alibi_num_heads)":
  test_alibi_heads_subset_matches_x_transformers
- "kerple_log, kerple_power | -r1 log(1 + r2 abs(i-j)), -r1 abs(i-j)^r2": test_kerple_log_hand_computed,
  test_kerple_power_hand_computed
- "fire | MLP over progressively interpolated log distance": test_fire_closed_form_with_hand_set_mlp,
  test_fire_defaults_and_threshold_frozen
- "sandwich | bias (p_i.p_j - d'/2) H/(8h) from sinusoids of width sandwich_dim ..., no input embedding":
  test_sandwich_closed_form
"""

import math

import pytest
import torch
from encoding_helpers import (
    CAUSAL,
    DIM,
    HEAD_DIM,
    HEADS,
    MAX_LEN,
    make,
    make_encoding,
    make_plain,
    t5_bucket_closed_form,
)
from x_transformers.x_transformers import (
    AlibiPositionalBias,
    RelativePositionBias,
)

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.alibi import alibi_slopes
from lightning_modules.encodings.t5_bias import t5_bucket, untrained_buckets


def test_alibi_slopes_closed_form():
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0**-k for k in (2, 4, 6, 8)]
    # 6 heads: the 4-head slopes, then every other slope of the 8-head ones (paper's recipe)
    assert alibi_slopes(6) == [2.0**-k for k in (2, 4, 6, 8, 1, 3)]
    assert alibi_slopes(12)[8:] == [2.0 ** (-k / 2) for k in (1, 3, 5, 7)]


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("heads", [8, 6])
def test_alibi_bias_closed_form(heads, causal):
    L = 12
    enc = make("alibi", causal, heads=heads, dim=8 * heads)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    slopes = torch.tensor(alibi_slopes(heads))
    expected = -slopes[:, None, None] * (i - j).abs().float()
    assert torch.equal(enc.positional_logits(L), expected)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("heads", [8, 6, 4])
def test_alibi_matches_x_transformers(heads, causal):
    L = 20
    enc = make("alibi", causal, heads=heads, dim=8 * heads)
    ref = AlibiPositionalBias(heads=heads)
    torch.testing.assert_close(enc.positional_logits(L), ref(L, L), atol=1e-5, rtol=0)
    positions = torch.sort(torch.randint(0, 200, (3, L)), dim=-1).values  # (B, L) custom positions
    torch.testing.assert_close(enc.bias(positions), ref.forward_custom_pos(positions), atol=1e-5, rtol=0)


@pytest.mark.parametrize("heads", [1, 2, 3, 4])
def test_alibi_heads_subset_matches_x_transformers(heads):
    enc = make_plain("alibi", heads=heads)
    ref = AlibiPositionalBias(heads=heads, total_heads=HEADS)
    torch.testing.assert_close(enc.bias(torch.arange(11)), ref(11, 11))
    assert (enc.bias(torch.arange(11))[heads:] == 0).all()


def test_t5_bucket_table_bidirectional():
    rel = torch.arange(-300, 301)  # j - i
    got = dict(zip(rel.tolist(), t5_bucket(rel, bidirectional=True).tolist()))
    assert got[0] == 0
    assert [got[-d] for d in range(1, 8)] == list(range(1, 8))
    assert {got[-d] for d in range(8, 12)} == {8}
    assert got[-12] == 9
    assert got[-90] == 14 and got[-91] == 15
    assert {got[-d] for d in range(91, 301)} == {15}
    for d in range(1, 301):  # j > i: the same bucket + 16
        assert got[d] == got[-d] + 16
    assert 16 not in got.values()
    assert set(got.values()) == set(range(32)) - {16}
    assert all(got[r] == t5_bucket_closed_form(r, True) for r in got)


def test_t5_bucket_table_causal():
    rel = torch.arange(-300, 301)
    got = dict(zip(rel.tolist(), t5_bucket(rel, bidirectional=False).tolist()))
    assert {got[r] for r in range(0, 301)} == {0}  # j >= i
    assert [got[-d] for d in range(1, 16)] == list(range(1, 16))  # 16 exact buckets on the one side
    assert got[-300] == 31 and set(got.values()) == set(range(32))
    assert all(got[r] == t5_bucket_closed_form(r, False) for r in got)


@pytest.mark.parametrize("num_buckets, max_distance, train_length", [(32, 128, 64), (32, 64, 64), (32, 128, 20),
                                                                     (32, 128, 200), (16, 50, 30)])  # fmt: skip
@pytest.mark.parametrize("causal", CAUSAL)
def test_t5_untrained_buckets_are_those_the_training_length_never_reaches(causal, num_buckets, max_distance,
                                                                          train_length):  # fmt: skip
    """Against the closed form: the buckets of distances up to max_distance less those of |j - i| < the
    training length (ALiBi's reproduction, causal, 128 at a context of 64: buckets 27-31)."""
    bucket = lambda rel: t5_bucket_closed_form(rel, not causal, num_buckets, max_distance)  # noqa: E731
    reach = range(-max_distance - 1, max_distance + 2)
    expected = {bucket(r) for r in reach} - {bucket(r) for r in range(1 - train_length, train_length)}
    assert untrained_buckets(num_buckets, max_distance, not causal, train_length) == sorted(expected)
    if causal and (num_buckets, max_distance, train_length) == (32, 128, 64):
        assert sorted(expected) == [27, 28, 29, 30, 31]
    for name in ("t5_bias", "tupe_r", "bert_r"):
        enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal,
                             num_buckets=num_buckets, max_distance=max_distance)  # fmt: skip
        note = enc.untrained_note(train_length)
        assert (note is None) == (not expected), (name, note)
        if note:
            assert "\n" not in note and f"max_distance={max_distance}" in note and f"length {train_length}" in note
    assert all(make(name, causal=True).untrained_note(4) is None for name in ("alibi", "rope", "learned"))


def test_fitting_warns_once_about_untrained_t5_buckets():
    """One warning line when the training length is known and buckets stay untrained; none otherwise."""
    import warnings
    from types import SimpleNamespace

    from lightning_modules.synthetic_model import SyntheticTaskModel

    def warnings_of(options: dict, datamodule) -> list[str]:
        arch = ArchConfig("t5_bias", encoding_options=options, dim=DIM, depth=1, num_heads=HEADS, vocab_size=20,
                          max_length=512)  # fmt: skip
        model = SyntheticTaskModel(arch)
        model._trainer = SimpleNamespace(datamodule=datamodule)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.setup("fit")
        return [str(w.message) for w in caught if "t5_bias" in str(w.message)]

    (line,) = warnings_of({}, SimpleNamespace(train_seq_len=64))
    assert line.startswith("encoding 't5_bias': relative buckets 27-31 ") and "\n" not in line
    assert warnings_of({"max_distance": 64}, SimpleNamespace(train_seq_len=64)) == []
    assert warnings_of({}, SimpleNamespace()) == []  # training length unknown: nothing said


@pytest.mark.parametrize("causal", CAUSAL)
def test_t5_bias_is_table_lookup_of_bucket(causal):
    L = 150
    enc = make("t5_bias", causal)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    buckets = t5_bucket(j - i, bidirectional=not causal)
    enc.reserve(L)  # beyond max_length: the Transformer grows the position tables so
    assert torch.equal(enc.buckets(torch.arange(L)), buckets)
    assert torch.equal(enc.positional_logits(L), enc.table.weight[buckets].permute(2, 0, 1) * enc.scale)
    assert enc.scale == HEAD_DIM**0.5  # x-transformers' default scale


@pytest.mark.parametrize("causal", CAUSAL)
def test_t5_bias_matches_x_transformers(causal):
    L = 300
    enc = make("t5_bias", causal)
    ref = RelativePositionBias(scale=HEAD_DIM**0.5, causal=causal, heads=HEADS)  # causal = one-sided buckets
    ref.relative_attention_bias.weight.data.copy_(enc.table.weight)
    torch.testing.assert_close(enc.positional_logits(L), ref(L, L), atol=1e-5, rtol=0)


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
    enc = make_encoding("fire", randomize=False)
    assert enc.c.item() == pytest.approx(0.1) and enc.init_threshold.item() == 512.0
    assert not enc.init_threshold.requires_grad and enc.threshold_multiplier.requires_grad
    assert enc.mlp[0].out_features == 32 and enc.mlp[2].out_features == HEADS
    # below the threshold the normaliser is the constant psi(512): a shift leaves the bias alone ...
    torch.testing.assert_close(enc.bias(torch.arange(8) + 100), enc.bias(torch.arange(8)))
    # ... beyond it, the query position normalises
    assert not torch.allclose(enc.bias(torch.arange(8) + 1000), enc.bias(torch.arange(8)))


def test_sandwich_closed_form():
    enc = make_plain("sandwich", sandwich_dim=16)
    positions = torch.tensor([0, 3, 4, 10, 31])
    bias = enc.bias(positions)
    for h in range(HEADS):
        for a, i in enumerate(positions.tolist()):
            for b, j in enumerate(positions.tolist()):
                inner = sum(math.cos((i - j) / 10000 ** (2 * m / 16)) for m in range(1, 9))
                expected = (inner - 8) * HEADS / (8 * (h + 1))
                assert bias[h, a, b].item() == pytest.approx(expected, abs=1e-4)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all() and (bias <= 1e-6).all()
    torch.testing.assert_close(bias, bias.transpose(-1, -2))  # bidirectional: symmetric
    x = torch.randn(2, len(positions), DIM)
    assert torch.equal(enc.embed(x, positions), x)  # no input embedding: the bias is its only position signal
