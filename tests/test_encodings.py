"""Tests for lightning_modules/encodings: the hook contract over the whole ENCODINGS registry, closed forms
(sinusoid, ALiBi slopes, T5 buckets, TUPE's [CLS] scheme) and numerical parity with x-transformers.

README claims covered here:
- "none | no positional information (NoPE)": test_none_adds_no_position
- "sinusoidal | fixed sin/cos table, interleaved, no scaling": test_sinusoid_hand_computed_entries,
  test_sinusoid_formula
- "t5_bias | bucketed relative bias (32 buckets, max distance 128)": test_t5_bucket_table_bidirectional,
  test_t5_bucket_table_causal, test_t5_bias_is_table_lookup_of_bucket, test_t5_bias_matches_x_transformers,
  test_the_readmes_options_and_defaults_are_the_encodings
- "a max_distance beyond the training length leaves the far buckets untrained (one warning line)":
  test_t5_untrained_buckets_are_those_the_training_length_never_reaches,
  test_fitting_warns_once_about_untrained_t5_buckets
- "alibi | linear bias -m_h abs(i-j), geometric slopes; symmetric when bidirectional": test_alibi_slopes_closed_form,
  test_alibi_bias_closed_form, test_alibi_matches_x_transformers
- "rope | rotary q/k (interleaved pairs), option base": test_rope_matches_x_transformers,
  test_rope_logits_depend_on_distance_only
- "tupe_a | untied positional attention, 1/sqrt(2 d_head), [CLS] untied ... (untie_cls, proj_bias)"; "deberta |
  ... 1/sqrt(3 d_head)": test_tupe_cls_scheme_matches_official, test_attention_scale
- "tupe_r | tupe_a + T5 relative bias, [CLS] buckets as in the official code": test_tupe_cls_scheme_matches_official,
  test_tupe_r_causal_cls_buckets, test_tupe_r_relative_part_matches_t5_when_tied
- "bert_r | learned + T5 relative bias, unscaled": test_bert_r_is_learned_absolute_plus_tupe_r_relative_term
- "tupe_a_tied | tupe_a with [CLS] tied (untie_cls: false)": test_tupe_a_tied_is_tupe_a_without_the_cls_reset
- "learned | ... positions beyond max_length are a clear error": test_max_positions_refused_with_config_error
- "cope | ... (max_pos, 64) ... one table for all layers"; "sandwich | ... sandwich_dim (128)":
  test_cope_keeps_one_table_for_all_layers, test_the_readmes_options_and_defaults_are_the_encodings
- "sinusoidal and scaled_sinusoidal take scale_tokens (multiply the token embeddings by sqrt(d) first ...; off by
  default)": test_sinusoidal_scale_tokens_is_vaswanis_sqrt_d_input_scaling
- the options the README lists per encoding, and "encoding_options('rope') lists them":
  test_the_readmes_options_and_defaults_are_the_encodings, test_every_option_is_accepted,
  test_unknown_option_names_the_valid_ones
- "TUPE's [CLS] untying applies only where position 0 holds [CLS] ... untie_cls: true there is a one-line error.
  mode: bert_ad is tied by default": test_untie_cls_only_where_position_0_holds_cls
- "Initialisation: every trainable position tensor starts as its method's reference code does ... INIT_REFERENCE
  ... checks its statistics": test_initialisation_matches_the_reference,
  test_check_init_rejects_the_defects_it_exists_for
- "declares its capabilities (causal_only, shift_invariant, max_positions)":
  test_causal_only_and_head_split_checked_at_build, test_shift_invariance_of_hooks,
  test_max_positions_refused_with_config_error
- "positional_logits(L) returns exactly the logit term it adds": test_positional_logits_is_the_bias
- "Attention goes through scaled_dot_product_attention (the default attend), except shaw with values: true":
  test_only_shaw_replaces_sdpa
"""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import randomize_
from torch import nn
from x_transformers.x_transformers import (
    AlibiPositionalBias,
    RelativePositionBias,
    RotaryEmbedding,
    apply_rotary_pos_emb,
)

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding, encoding_options, option_parameters
from lightning_modules.encodings.alibi import alibi_slopes
from lightning_modules.encodings.sinusoidal import sinusoid_table
from lightning_modules.encodings.t5_bias import t5_bucket, untrained_buckets
from lightning_modules.encodings.tupe import TupeA
from lightning_modules.transformer import Transformer
from pe_sweeps.errors import ConfigError

DIM, HEADS, MAX_LEN = 32, 4, 64
HEAD_DIM = DIM // HEADS
NAMES = list(ENCODINGS)
CAUSAL = [True, False]


def make(name: str, causal: bool, max_length: int = MAX_LEN, heads: int = HEADS, dim: int = DIM, **options):
    """A randomized encoding, built as a [CLS]-first model would (`cls_first`: TUPE's [CLS] scheme on)."""
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    enc = build_encoding(name, dim=dim, num_heads=heads, max_length=max_length, causal=causal, cls_first=True,
                         **options)  # fmt: skip
    return randomize_(enc).eval()


def hook_logits(enc, q, k, positions):
    """The attention logits the Transformer builds from the hooks (before masking)."""
    q, k = enc.rotate(q, k, positions)
    logits = q @ k.transpose(-1, -2) * enc.attention_scale()  # (B, H, L, L)
    for term in (enc.bias(positions), enc.content_bias(q, k, positions)):
        if term is not None:
            logits = logits + term
    return logits


# ----------------------------------------------------------------------------- the contract, every encoding


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_positional_logits_is_the_bias(name, causal):
    L = 9
    enc = make(name, causal)
    logits = enc.positional_logits(L)
    bias = enc.bias(torch.arange(L))
    if bias is None:
        assert logits is None
        return
    assert logits.shape == (HEADS, L, L)
    assert torch.equal(logits, bias.expand(HEADS, L, L))
    assert not logits.requires_grad


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_batched_positions_bias_matches_per_row(name, causal):
    """bias/rotate with (B, L) positions equal the (L,) computation of each row."""
    torch.manual_seed(0)
    L, offsets = 7, [0, 3, 20]
    enc = make(name, causal)
    positions = torch.arange(L) + torch.tensor(offsets)[:, None]  # (B, L)
    q, k = torch.randn(2, len(offsets), HEADS, L, HEAD_DIM).unbind(0)
    batched = hook_logits(enc, q, k, positions)
    for b in range(len(offsets)):
        single = hook_logits(enc, q[b : b + 1], k[b : b + 1], positions[b])
        torch.testing.assert_close(batched[b], single[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_shift_invariance_of_hooks(name, causal):
    """shift_invariant encodings: embed and the hook logits ignore a constant shift of every position.
    The others must change in one of the two."""
    torch.manual_seed(0)
    L, shift = 8, 7
    enc = make(name, causal, max_length=128)
    positions = torch.arange(L)
    x = torch.randn(2, L, DIM)
    q, k = torch.randn(2, 2, HEADS, L, HEAD_DIM).unbind(0)
    logits, logits_shifted = hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions + shift)
    same_logits = torch.allclose(logits, logits_shifted, atol=1e-5, rtol=1e-5)
    same_embed = torch.allclose(enc.embed(x, positions), enc.embed(x, positions + shift), atol=1e-6)
    if ENCODINGS[name].shift_invariant:
        torch.testing.assert_close(logits_shifted, logits, atol=1e-5, rtol=1e-5)
        assert same_embed
    else:
        assert not (same_logits and same_embed)


LOGIT_TERMS = {"tupe_a": 2, "tupe_a_tied": 2, "tupe_r": 2, "deberta": 3}  # papers: 1/sqrt(n D), n logit terms


@pytest.mark.parametrize("name", NAMES)
def test_attention_scale(name):
    enc = make(name, causal=True)
    expected = (LOGIT_TERMS.get(name, 1) * HEAD_DIM) ** -0.5
    assert enc.attention_scale() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_max_positions_refused_with_config_error(name, causal):
    """Past `max_positions` an encoding raises ConfigError (never IndexError) when its positions are checked
    (`check_positions`, as the Transformer does before the hooks); without a limit it serves positions far
    beyond max_length (its position tables grown)."""
    enc = make(name, causal, max_length=16)
    L = 4
    x = torch.randn(1, L, DIM)
    q, k = torch.randn(2, 1, HEADS, L, HEAD_DIM).unbind(0)

    def run(positions):
        enc.check_positions(positions)
        return enc.embed(x, positions), hook_logits(enc, q, k, positions)

    if enc.max_positions is None:
        out = run(torch.arange(L) + 1000)
        assert all(t.isfinite().all() for t in out)
        return
    assert enc.max_positions == 16
    run(torch.arange(L) + enc.max_positions - L)  # the last servable positions are fine
    for positions in (
        torch.arange(L) + enc.max_positions - L + 1,
        torch.tensor([[0, 1, 2, 3], [0, 1, 2, 99]]),
    ):
        with pytest.raises(ConfigError, match=rf"serves positions < {enc.max_positions}.*max_length"):
            run(positions)


# ----------------------------------------------------------------------------- registry and option errors


def test_unknown_encoding_names_the_choices():
    with pytest.raises(ConfigError, match="unknown encoding 'nope'") as err:
        build_encoding("nope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
    for name in ENCODINGS:
        assert name in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_names_the_valid_ones(name):
    with pytest.raises(ConfigError, match=f"encoding '{name}' has no option 'bogus'") as err:
        build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, bogus=1)
    for option in encoding_options(name):
        assert option in str(err.value)
    if not encoding_options(name):
        assert "none" in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_causal_only_and_head_split_checked_at_build(name):
    if ENCODINGS[name].causal_only:
        with pytest.raises(ConfigError, match="causal-only"):
            build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=False)
    else:
        build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=False)
    with pytest.raises(ConfigError, match="not divisible"):
        build_encoding(name, dim=30, num_heads=4, max_length=MAX_LEN, causal=True)


def test_every_option_is_accepted():
    """Each option `encoding_options` reports is a real constructor keyword (defaults pass through)."""
    for name in NAMES:
        for option in encoding_options(name):
            for cls in ENCODINGS[name].__mro__:
                param = inspect.signature(cls.__init__).parameters.get(option)
                if param is not None:
                    break
            enc = build_encoding(
                name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, **{option: param.default}
            )
            assert isinstance(enc, ENCODINGS[name])


README_OPTIONS = {  # the options the README names, per encoding (each also takes randomize_positions)
    "rope": {"base", "rotary_dim", "interpolation_factor", "ntk_base_rescale", "yarn_factor", "dynamic_ntk_factor",
             "original_length", "rope_fraction"},
    "alibi": {"heads"}, "sinusoidal": {"scale_tokens"}, "scaled_sinusoidal": {"scale_tokens"},
    "learned": {"init_from", "init_scale", "init_rows", "freeze"}, "shaw": {"values", "max_relative"},
    "tupe_a": {"untie_cls", "proj_bias", "mode"}, "tupe_r": {"untie_cls", "proj_bias", "mode"},
    "cope": {"max_pos"}, "sandwich": {"sandwich_dim"}, "dynamic_bias": {"log_distance"},
}  # fmt: skip
README_DEFAULTS = {("t5_bias", "num_buckets"): 32, ("t5_bias", "max_distance"): 128, ("cope", "max_pos"): 64,
                   ("sandwich", "sandwich_dim"): 128, ("tupe_a_tied", "untie_cls"): False,
                   ("sinusoidal", "scale_tokens"): False, ("scaled_sinusoidal", "scale_tokens"): False}  # fmt: skip


def test_the_readmes_options_and_defaults_are_the_encodings():
    """Every option the README's table and option list name is one `encoding_options` lists (the command the
    README gives to list them), with the default the README states; every encoding takes randomize_positions
    and randomize_positions_eval (off)."""
    for name in NAMES:
        assert {"randomize_positions", "randomize_positions_eval"} <= set(encoding_options(name)), name
        assert option_parameters(name)["randomize_positions_eval"].default is False  # 0..L-1 at evaluation
    for name, options in README_OPTIONS.items():
        assert options <= set(encoding_options(name)), (name, options - set(encoding_options(name)))
    for (name, option), default in README_DEFAULTS.items():
        assert option_parameters(name)[option].default == default, (name, option)
    for name in ("t5_bias", "cope", "sandwich"):  # the defaults really are what gets built
        enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
        for (owner, option), default in README_DEFAULTS.items():
            if owner == name:
                assert getattr(enc, option) == default, (name, option)


def test_none_adds_no_position():
    """NoPE: no table, no logit term, no rotation; its model is the same for any positions."""
    enc = build_encoding("none", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
    x, q = torch.randn(2, 5, DIM), torch.randn(2, HEADS, 5, HEAD_DIM)
    positions = torch.arange(5)
    assert list(enc.parameters()) == [] and enc.bias(positions) is None and enc.positional_logits(5) is None
    assert torch.equal(enc.embed(x, positions), x) and enc.content_bias(q, q, positions) is None
    assert all(torch.equal(a, b) for a, b in zip(enc.rotate(q, q, positions + 9), (q, q)))


def test_only_shaw_replaces_sdpa():
    """The default `attend` is SDPA; only Shaw (for its relative values) overrides it."""
    from lightning_modules.encodings import PositionalEncoding

    overriding = {name for name, cls in ENCODINGS.items() if cls.attend is not PositionalEncoding.attend}
    assert overriding == {"shaw"}


def test_cope_keeps_one_table_for_all_layers():
    """CoPE's position table lives in the encoding, shared by every layer: a deeper model has no more of it."""
    sizes = []
    for depth in (1, 3):
        model = Transformer(
            ArchConfig("cope", dim=DIM, depth=depth, num_heads=HEADS, vocab_size=50, max_length=MAX_LEN)
        )
        tables = [key for key, _ in model.named_parameters() if key.startswith("encoding.")]
        assert tables == ["encoding.table"]
        sizes.append(sum(p.numel() for key, p in model.named_parameters() if "table" in key))
    assert sizes[0] == sizes[1] == 64 * HEAD_DIM  # max_pos 64 rows of a head's width


# ----------------------------------------------------------------------------- sinusoid closed form


def test_sinusoid_hand_computed_entries():
    table = sinusoid_table(torch.arange(3), dim=4)  # w_0 = 1, w_1 = 10000^(-2/4) = 0.01
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004],  # sin 1, cos 1, sin .01, cos .01
            [0.9092974268, -0.4161468365, 0.0199986667, 0.9998000067],  # sin 2, cos 2, sin .02, cos .02
        ]
    )
    torch.testing.assert_close(table, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", CAUSAL)
def test_sinusoid_formula(causal):
    d, P = 16, 50
    enc = make("sinusoidal", causal, dim=d, heads=2, max_length=P)
    expected = torch.tensor(
        [[(math.sin if c % 2 == 0 else math.cos)(p * 10000 ** (-(c - c % 2) / d)) for c in range(d)] for p in range(P)],
        dtype=torch.float32,
    )
    x = torch.randn(2, P, d)
    torch.testing.assert_close(enc.embed(x, torch.arange(P)), x + expected, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.weight, expected, atol=2e-5, rtol=0)  # the probes' table


# ----------------------------------------------------------------------------- ALiBi closed form and parity


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


# ----------------------------------------------------------------------------- T5 buckets


def t5_bucket_closed_form(rel: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """PAPERS.md section 2, in float64: n = i - j; per side |n| < max_exact exact, then logarithmic."""
    n, ret = -rel, 0
    if bidirectional:
        num_buckets //= 2
        ret = num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + math.floor(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(large, num_buckets - 1)


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


# ----------------------------------------------------------------------------- RoPE parity


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


# ----------------------------------------------------------------------------- TUPE


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


# ----------------------------------------------------------------------------- device placement


@pytest.mark.parametrize("name", NAMES)
def test_positional_logits_follow_the_module_device(name):
    """positional_logits builds its positions on the module's device, buffers included (ALiBi has only a
    buffer). The meta device checks this without a GPU; encodings with a position limit read the largest
    position back (`.item()`), which meta tensors cannot, so they are left to the GPU test."""
    enc = make(name, causal=True)
    if enc.max_positions is not None:
        pytest.skip("check_positions reads a value; covered by test_encodings_on_cuda")
    logits = enc.to("meta").positional_logits(8)
    assert logits is None or logits.device.type == "meta"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_encodings_on_cuda(name, causal):
    """Every hook runs on CUDA and agrees with the CPU computation."""
    torch.manual_seed(0)
    L = 12
    enc = make(name, causal)
    x, positions = torch.randn(2, L, DIM), torch.arange(L) + torch.tensor([[0], [5]])
    q, k = torch.randn(2, 2, HEADS, L, HEAD_DIM).unbind(0)
    cpu = (enc.positional_logits(L), enc.embed(x, positions), hook_logits(enc, q, k, positions))
    enc = enc.cuda()
    gpu = (enc.positional_logits(L), enc.embed(x.cuda(), positions.cuda()))
    gpu += (hook_logits(enc, q.cuda(), k.cuda(), positions.cuda()),)
    for a, b in zip(cpu, gpu):
        if a is None:
            assert b is None
        else:
            assert b.device.type == "cuda"
            torch.testing.assert_close(b.cpu(), a, atol=1e-4, rtol=1e-4)


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


def test_tupe_a_tied_is_tupe_a_without_the_cls_reset():
    tied = make("tupe_a_tied", causal=False)
    reference = make("tupe_a", causal=False, untie_cls=False)
    reference.load_state_dict(tied.state_dict())
    torch.testing.assert_close(tied.positional_logits(10), reference.positional_logits(10))
    assert tied.untie_cls is False and make("tupe_a", causal=False).untie_cls is True


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


@pytest.mark.parametrize("name", ["sinusoidal", "scaled_sinusoidal"])
def test_sinusoidal_scale_tokens_is_vaswanis_sqrt_d_input_scaling(name):
    plain, scaled = make(name, causal=True), make(name, causal=True, scale_tokens=True)
    scaled.load_state_dict(plain.state_dict())
    x, positions = torch.randn(2, 6, DIM), torch.arange(6)
    table = plain.embed(torch.zeros_like(x), positions)
    torch.testing.assert_close(scaled.embed(x, positions), x * DIM**0.5 + table)
    torch.testing.assert_close(plain.embed(x, positions), x + table)


# ----------------------------------------------------------------------------- initialisation, every encoding

INIT_STD_FACTOR = 1.25  # a sample std must lie within this factor of the reference's (tensors of >= 64 values)
BERT = ("normal", 0.02)  # init_bert_params / initializer_range (BERT, TUPE, DeBERTa)
ONES, ZEROS = ("const", 1.0), ("const", 0.0)


def torch_linear(fan_in: int) -> tuple:
    """PyTorch's default nn.Linear init (kaiming_uniform, a=sqrt(5)): weight and bias U(+-1/sqrt(fan_in))."""
    return ("uniform", -(fan_in**-0.5), fan_in**-0.5)


TUPE_A_INIT = {"table.weight": BERT, "norm.weight": ONES, "norm.bias": ZEROS, "proj_q.weight": BERT,
               "proj_k.weight": BERT}  # fmt: skip
FIRE_WIDTH, INIT_DIM, INIT_HEADS = 32, 128, 16  # FIRE's default mlp_width; dynamic_bias's width is C / 4 = 32

# Each trainable position tensor of each registered encoding (default options) and the reference init its
# docstring states: ("normal", std), ("uniform", low, high), ("const", value) or ("exact", table); a value
# may be a function of the encoding. A new encoding must be added here, or test_initialisation fails.
INIT_REFERENCE = {
    "none": {}, "sinusoidal": {}, "alibi": {}, "rope": {}, "xpos": {},
    "learned": {"table.weight": BERT},
    "t5_bias": {"table.weight": ("normal", lambda e: e.dim**-0.5 / e.scale)},  # bias N(0, 1/C), T5
    "tupe_a": TUPE_A_INIT,
    "tupe_a_tied": TUPE_A_INIT,
    "tupe_r": {**TUPE_A_INIT, "relative_table.weight": BERT},
    "bert_r": {"table.weight": BERT, "relative_table.weight": BERT},
    "scaled_sinusoidal": {"scale": ("const", INIT_DIM**-0.5)},
    "sinusoidal_learnable": {"table": ("exact", lambda e: sinusoid_table(torch.arange(e.num_positions), e.dim, 1e4))},
    "shaw": {"key_table.weight": ("uniform", -math.sqrt(6 / (33 + INIT_DIM // INIT_HEADS)),
                                  math.sqrt(6 / (33 + INIT_DIM // INIT_HEADS)))},  # Glorot, tensor2tensor
    "deberta": {"table.weight": BERT, "norm.weight": ONES, "norm.bias": ZEROS, "pos_key.weight": BERT,
                "pos_key.bias": ZEROS, "pos_query.weight": BERT, "pos_query.bias": ZEROS},
    "kerple_log": {"r1": ("uniform", 0.0, 2.0), "r2": ("uniform", 0.0, 1.0)},  # official ParallelKerpleLog
    "kerple_power": {"r1": ("uniform", 0.0, 1.0), "r2": ("uniform", 0.0, 2.0)},  # official ParallelKerplePower
    "fire": {"c": ("const", 0.1), "threshold_multiplier": ONES, "mlp.0.weight": torch_linear(1),
             "mlp.0.bias": torch_linear(1), "mlp.2.weight": torch_linear(FIRE_WIDTH),
             "mlp.2.bias": torch_linear(FIRE_WIDTH)},
    "dynamic_bias": {"mlp.0.weight": torch_linear(1), "mlp.0.bias": torch_linear(1),
                     **{f"mlp.{i}.{p}": torch_linear(INIT_DIM // 4) for i in (2, 4) for p in ("weight", "bias")}},
    "sandwich": {},
    "cope": {"table": ZEROS},  # x-transformers CoPE: pos_emb = zeros(max_pos, dim_head)
    "fox": {"gates.weight": torch_linear(INIT_DIM), "gates.bias": ("const", 5.0)},  # x-transformers bias_init 5
}  # fmt: skip


def check_init(value: torch.Tensor, spec: tuple, enc) -> None:
    kind, *args = spec
    args = [arg(enc) if callable(arg) else arg for arg in args]
    x = value.detach().double().flatten()
    if kind in ("exact", "const"):
        torch.testing.assert_close(value.detach(), torch.as_tensor(args[0], dtype=value.dtype).expand_as(value))
        return
    if kind == "normal":
        (std,) = args
        assert x.mean().abs() <= 4 * std / math.sqrt(x.numel()), f"mean {x.mean():.3g} for N(0, {std:.3g}^2)"
    else:
        low, high = args
        assert low <= x.min() and x.max() <= high, f"values in [{x.min():.3g}, {x.max():.3g}], not U({low}, {high})"
        assert x.max() - x.min() >= (high - low) / 2, f"values span [{x.min():.3g}, {x.max():.3g}] of U({low}, {high})"
        std = (high - low) / math.sqrt(12)
    if x.numel() >= 64:
        assert std / INIT_STD_FACTOR <= x.std() <= std * INIT_STD_FACTOR, f"std {x.std():.3g}, reference {std:.3g}"


@pytest.mark.parametrize("name", NAMES)
def test_initialisation_matches_the_reference(name):
    """Every trainable tensor of every encoding starts as its reference code does (INIT_REFERENCE), so a
    wrong init (e.g. PyTorch's N(0, 1) Embedding default) fails here."""
    assert name in INIT_REFERENCE, f"{name}: add its trainable tensors' reference init to INIT_REFERENCE"
    torch.manual_seed(0)
    enc = build_encoding(name, dim=INIT_DIM, num_heads=INIT_HEADS, max_length=256,
                         causal=ENCODINGS[name].causal_only, cls_first=True)  # fmt: skip
    trainable = {key: p for key, p in enc.named_parameters() if p.requires_grad}
    assert set(trainable) == set(INIT_REFERENCE[name]), f"{name}: tensors {sorted(trainable)}"
    for key, param in trainable.items():
        try:
            check_init(param, INIT_REFERENCE[name][key], enc)
        except AssertionError as error:
            raise AssertionError(f"{name}.{key}: {error}") from None


@pytest.mark.parametrize("spec", [("normal", 0.02), ("uniform", 0.0, 1.0)])
def test_check_init_rejects_the_defects_it_exists_for(spec):
    """PyTorch's N(0, 1) Embedding default, a Linear default at C=128, and KERPLE-power's swapped ranges."""
    torch.manual_seed(0)
    wrong = {"normal": [torch.randn(33, 16), nn.Linear(128, 128).weight],
             "uniform": [2 * torch.rand(16), 0.5 * torch.rand(64)]}[spec[0]]  # fmt: skip
    for value in wrong:
        with pytest.raises(AssertionError):
            check_init(value, spec, None)


# ----------------------------------------------------------------------------- fully masked rows, every encoding

MASK_VARIANTS = [(name, {}) for name in NAMES] + [("shaw", {"values": True})]


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name, options", MASK_VARIANTS, ids=[f"{n}{'-values' * bool(o)}" for n, o in MASK_VARIANTS])
def test_fully_masked_rows_stay_finite_and_do_not_touch_real_tokens(name, options, causal):
    """A fully padded row and a left-padded (bidirectional) or right-padded (causal) row: every output
    is finite, a real row matches its run alone, and real tokens do not depend on what the padding holds."""
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    vocab, L = 50, 8
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=2, num_heads=HEADS,
                      vocab_size=vocab, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch, causal=causal)
    model = randomize_(model).eval()
    tokens = torch.randint(1, vocab, (3, L), generator=torch.Generator().manual_seed(0))
    real = torch.ones(3, L, dtype=torch.bool)
    real[1] = False  # fully padded
    if causal:  # right-padded: a causal model masks no padding (no real query sees a later key)
        real[2, 5:] = False
    else:
        real[2, :3] = False  # left-padded
    with torch.no_grad():
        out = model(tokens, padding_mask=real)
        assert out.isfinite().all(), f"non-finite outputs in rows {(~out.isfinite()).any(-1).any(-1).tolist()}"
        torch.testing.assert_close(out[0], model(tokens[:1])[0], atol=1e-5, rtol=1e-5)
        refilled = model(torch.where(real, tokens, (tokens + 7) % vocab), padding_mask=real)
    torch.testing.assert_close(refilled[real], out[real], atol=1e-5, rtol=1e-5)
