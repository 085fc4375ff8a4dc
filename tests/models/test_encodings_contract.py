"""The encoding contract over the whole ENCODINGS registry: the hooks (positional_logits, batched positions,
shift invariance, attention scale, position limits), registry and option errors, reference initialisation
(each encoding's `init_reference`), fully masked rows, and the Transformer contract for option variants that the
registry-parametrised tests (defaults only) do not reach.

A new encoding (one file and one line in lightning_modules/encodings/__init__.py) is picked up here with no
edit: everything per-encoding these tests need is read from the class (`causal_only`, `shift_invariant`,
`max_positions`, `init_reference`).

Claims of docs/encodings.md covered here:
- "declares its capabilities (causal_only, shift_invariant, max_positions)":
  test_causal_only_and_head_split_checked_at_build, test_shift_invariance_of_hooks,
  test_max_positions_refused_with_config_error
- "learned | ... positions beyond max_length are a clear error": test_max_positions_refused_with_config_error
- "positional_logits(L) returns exactly the logit term it adds": test_positional_logits_is_the_bias
- "tupe_a | untied positional attention, 1/sqrt(2 d_head)"; "deberta | ... 1/sqrt(3 d_head)": test_attention_scale
- the options docs/encodings.md lists per encoding and their defaults (t5_bias 32 buckets, max distance 128; cope
  max_pos 64; sandwich sandwich_dim 128; scale_tokens off), and "python -m lightning_modules.encodings rope lists an
  encoding's options" (its ranges: tests/core/test_ranges.py):
  test_the_documented_options_and_defaults_are_the_encodings, test_every_option_is_accepted,
  test_unknown_option_names_the_valid_ones
- "an encoding option of the wrong type or range" is one line: test_bad_options_are_one_line
- "Initialisation: every trainable position tensor starts as its method's reference code does ... init_reference
  ... checks its statistics": test_initialisation_matches_the_reference,
  test_check_init_rejects_the_defects_it_exists_for
- "Attention goes through scaled_dot_product_attention (the default attend), except shaw with values: true" and
  the encodings that replace softmax (softmax_attention = False): test_only_shaw_replaces_sdpa
"""

import inspect
import math

import pytest
import torch
from encoding_helpers import (
    CAUSAL,
    DIM,
    HEAD_DIM,
    HEADS,
    MAX_LEN,
    NAMES,
    VOCAB,
    hook_logits,
    make,
    make_model,
    make_plain,
)
from helpers import randomize_
from torch import nn

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding, encoding_options, option_parameters
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError

INIT_DIM, INIT_HEADS = 128, 16  # dynamic_bias's width is C / 4 = 32


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


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("alibi", {"heads": 5}, r"alibi heads must be in \[1, num_heads=4\]"),
        ("alibi", {"heads": 0}, "encoding 'alibi' option 'heads' must be an integer >= 1, got 0"),
        ("rope", {"yarn_factor": 4.0}, "needs original_length"),
        (
            "rope",
            {"yarn_factor": 0.5, "original_length": 8},
            "option 'yarn_factor' must be a finite number > 1, got 0.5",
        ),
        ("rope", {"yarn_factor": 2.0, "interpolation_factor": 2.0, "original_length": 8}, "exclude other extensions"),
        ("rope", {"rope_fraction": 0.0}, r"option 'rope_fraction' must be a finite number in \(0, 1\], got 0.0"),
        ("rope", {"original_length": 8}, "only with yarn_factor, dynamic_ntk_factor, llama3_factor or longrope"),
        ("sandwich", {"sandwich_dim": 7}, "sandwich_dim must be even"),
        ("cope", {"max_pos": 1}, "option 'max_pos' must be an integer >= 2, got 1"),
        ("sandwich", {"heads": 2}, "encoding 'sandwich' has no option 'heads'"),
        ("alibi", {"yarn_factor": 2.0}, "encoding 'alibi' has no option 'yarn_factor'"),
    ],
)
def test_bad_options_are_one_line(name, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        make_plain(name, **options)
    assert "\n" not in str(err.value)


DOCUMENTED_OPTIONS = {  # the options docs/encodings.md names, per encoding (each also takes randomize_positions)
    "rope": {"base", "rotary_dim", "interpolation_factor", "ntk_base_rescale", "yarn_factor", "dynamic_ntk_factor",
             "original_length", "rope_fraction", "rotary_heads", "llama3_factor", "low_freq_factor", "high_freq_factor",
             "longrope_short_factor", "longrope_long_factor", "longrope_factor"},
    "pope": {"base", "bias_uniform_init"}, "dd_alibi_row": {"gate_dim"},
    "alibi": {"heads"}, "sinusoidal": {"scale_tokens"}, "scaled_sinusoidal": {"scale_tokens"},
    "learned": {"init_from", "init_scale", "init_rows", "freeze"}, "shaw": {"values", "max_relative"},
    "tupe_a": {"untie_cls", "proj_bias", "mode"}, "tupe_r": {"untie_cls", "proj_bias", "mode"},
    "cope": {"max_pos"}, "sandwich": {"sandwich_dim"}, "dynamic_bias": {"log_distance"},
    "path": {"w_rank", "short_conv"}, "stick_breaking": {"attend_current"},
}  # fmt: skip


DOCUMENTED_DEFAULTS = {("t5_bias", "num_buckets"): 32, ("t5_bias", "max_distance"): 128, ("cope", "max_pos"): 64,
                   ("sandwich", "sandwich_dim"): 128, ("tupe_a_tied", "untie_cls"): False,
                   ("sinusoidal", "scale_tokens"): False, ("scaled_sinusoidal", "scale_tokens"): False,
                   ("dd_alibi_row", "gate_dim"): 8, ("pope", "bias_uniform_init"): False}  # fmt: skip


def test_the_documented_options_and_defaults_are_the_encodings():
    """Every option docs/encodings.md's table and option lists name is one `encoding_options` lists (the command the
    page gives to list them), with the default the page states; every encoding takes randomize_positions
    and randomize_positions_eval (off)."""
    for name in NAMES:
        assert {"randomize_positions", "randomize_positions_eval"} <= set(encoding_options(name)), name
        assert option_parameters(name)["randomize_positions_eval"].default is False  # 0..L-1 at evaluation
    for name, options in DOCUMENTED_OPTIONS.items():
        assert options <= set(encoding_options(name)), (name, options - set(encoding_options(name)))
    for (name, option), default in DOCUMENTED_DEFAULTS.items():
        assert option_parameters(name)[option].default == default, (name, option)
    for name in ("t5_bias", "cope", "sandwich"):  # the defaults really are what gets built
        enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
        for (owner, option), default in DOCUMENTED_DEFAULTS.items():
            if owner == name:
                assert getattr(enc, option) == default, (name, option)


def test_only_shaw_replaces_sdpa():
    """The default `attend` is SDPA; only Shaw (for its relative values) overrides it, and the encodings that
    declare `softmax_attention = False` (stick-breaking), which must."""
    from lightning_modules.encodings import PositionalEncoding

    overriding = {name for name, cls in ENCODINGS.items() if cls.attend is not PositionalEncoding.attend}
    other = {name for name, cls in ENCODINGS.items() if not cls.softmax_attention}
    assert overriding == {"shaw"} | other


INIT_STD_FACTOR = 1.25  # a sample std must lie within this factor of the reference's (tensors of >= 64 values)


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
    """Every trainable tensor of every encoding starts as its reference code does (the class's `init_reference`),
    so a wrong init (e.g. PyTorch's N(0, 1) Embedding default) fails here."""
    reference = ENCODINGS[name].init_reference
    assert reference is not None, f"{name}: declare its trainable tensors' reference init as `init_reference`"
    torch.manual_seed(0)
    enc = build_encoding(name, dim=INIT_DIM, num_heads=INIT_HEADS, max_length=256,
                         causal=ENCODINGS[name].causal_only, cls_first=True)  # fmt: skip
    trainable = {key: p for key, p in enc.named_parameters() if p.requires_grad}
    assert set(trainable) == set(reference), f"{name}: tensors {sorted(trainable)}"
    for key, param in trainable.items():
        try:
            check_init(param, reference[key], enc)
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


VARIANTS = [
    ("shaw", {"values": True, "max_relative": 3}),
    ("tupe_a", {"mode": "bert_ad"}),
    ("tupe_r", {"mode": "bert_ad", "untie_cls": False}),
    ("rope", {"rotary_dim": 4, "interpolation_factor": 2.0, "ntk_base_rescale": 3.0}),
    ("rope", {"rotary_heads": 2, "rotary_dim": 4}),
    ("xpos", {"rotary_dim": 4, "scale_base": 16.0}),
    ("deberta", {"position_buckets": 8, "max_relative_positions": 20}),
    ("deberta", {"position_buckets": 0, "max_relative_positions": 5}),
    ("dynamic_bias", {"depth": 3, "log_distance": True}),
    ("fire", {"mlp_width": 8}),
    ("learned", {"randomize_positions": 128}),
]


VARIANT_IDS = [f"{name}-{'-'.join(map(str, options.values()))}" for name, options in VARIANTS]


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


@pytest.mark.parametrize(
    "name, options",
    [("cope", {}), ("fox", {}), ("sandwich", {}), ("alibi", {"heads": 2}), ("rope", {"rope_fraction": 0.25}),
     ("rope", {"yarn_factor": 4.0, "original_length": 8}), ("rope", {"dynamic_ntk_factor": 2.0, "original_length": 8}),
     ("pope", {}), ("dd_alibi_row", {}), ("rope", {"rotary_heads": 1}),
     ("rope", {"llama3_factor": 8.0, "original_length": 8}),
     ("rope", {"longrope_short_factor": [1.0, 1.1, 1.2, 1.3], "longrope_long_factor": [1.0, 2.0, 4.0, 8.0],
               "original_length": 8})],
)  # fmt: skip
def test_transformer_runs_and_learns(name, options):
    torch.manual_seed(0)
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=2, num_heads=HEADS, vocab_size=20, max_length=32)
    model = Transformer(arch, causal=True)
    tokens = torch.randint(0, 20, (3, 24))
    padding = torch.ones(3, 24, dtype=torch.bool)
    padding[1, 18:] = False
    out = model(tokens, padding_mask=padding)
    assert out.shape == (3, 24, DIM) and torch.isfinite(out).all()
    # a causal model: the first 10 outputs do not depend on later tokens
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 20
    torch.testing.assert_close(model(changed)[:, :10], model(tokens)[:, :10])
    out.sum().backward()
    grads = [p.grad for p in model.encoding.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
