"""Per-layer encoding schedules (issue 27): `arch.encoding` as a list, `arch.nope_every`, `arch.window`.

Claims of docs/encodings.md covered here:
- "`arch.encoding` may list one encoding per layer ... `arch.nope_every: k` makes layers k, 2k, ... none":
  test_schedules_resolve_per_layer
- "a schedule that does not fit is one line naming the problem and the valid choices":
  test_bad_schedules_are_one_line_errors, test_cli_schedule_fit_and_bad_schedule
- "the same encoding in every layer is the plain encoding": test_one_encoding_per_layer_equals_the_plain_encoding
- "layers naming the same encoding share one instance and its shared bias, computed once per forward":
  test_layers_share_an_encoding_and_its_bias
- "decoding through the KV cache equals the full forward, per layer's encoding and window":
  test_hybrid_schedule_trains_and_caches
- "`arch.window` ... a causal band": test_sliding_window_masks_match_brute_force,
  test_windowed_layer_sees_only_its_window, test_flex_windows_match_sdpa
- "run names show a schedule as `rope3.none`": test_run_name_of_a_schedule
- "the architecture dict round-trips through a checkpoint loaded with weights_only": test_schedule_checkpoint_round_trip
"""

from pathlib import Path

import pytest
import torch
from helpers import randomize_
from test_transformer import DIM, HEADS, MAX_LEN, VOCAB

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS
from lightning_modules.synthetic_model import SyntheticTaskModel
from lightning_modules.transformer import KVCache, Transformer, allowed_mask, band_mask, flex_block_mask
from pe_core.errors import ConfigError
from pe_sweeps.runs.run_naming import distinguishing, encoding_label, in_name, schedule_label

ROOT = Path(__file__).resolve().parents[2]


def arch(encoding="rope", depth=4, **kwargs) -> ArchConfig:
    return ArchConfig(encoding, dim=DIM, depth=depth, num_heads=HEADS, dropout=0.0, vocab_size=VOCAB,
                      max_length=MAX_LEN, **kwargs)  # fmt: skip


def model(encoding="rope", depth=4, causal=True, seed=0, **kwargs) -> Transformer:
    torch.manual_seed(seed)
    return randomize_(Transformer(arch(encoding, depth, **kwargs), causal=causal), seed).eval()


def tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def test_schedules_resolve_per_layer():
    assert arch("rope").layer_encodings == ["rope"] * 4
    assert arch(["rope", "rope", "rope", "none"]).layer_encodings == ["rope", "rope", "rope", "none"]
    assert arch("rope", depth=8, nope_every=4).layer_encodings == (["rope"] * 3 + ["none"]) * 2  # iRoPE
    assert arch("alibi", depth=5, nope_every=2).layer_encodings == ["alibi", "none"] * 2 + ["alibi"]
    assert arch(window=64).layer_windows == [64] * 4
    assert arch(window=[8, None, 8, None]).layer_windows == [8, None, 8, None]
    assert arch().layer_windows == [None] * 4
    m = model(["rope", "alibi", "rope", "none"])
    assert [e.name for e in m.encodings] == ["rope", "alibi", "none"]
    assert [m.layer_encoding(i).name for i in range(4)] == ["rope", "alibi", "rope", "none"]
    assert model(["none", "rope", "rope", "rope"]).encoding.name == "rope"  # the stack's encoding: first not none


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(encoding=["rope", "none"]), "arch.encoding lists 2 encodings but arch.depth is 4"),
        (dict(encoding=["rope", "rope", "nope", "none"]), "arch.encoding layer 3: unknown encoding 'nope'; choose"),
        (dict(encoding=["rope", "none", 3, "none"]), "arch.encoding layer 3: an encoding name, got 3"),
        (dict(nope_every=5), r"arch.nope_every must be an integer in [2, 4] (arch.depth), got 5"),
        (dict(nope_every=1), r"arch.nope_every must be an integer in [2, 4] (arch.depth), got 1"),
        (dict(nope_every=2, depth=1), "arch.nope_every must be null (arch.depth is 1), got 2"),
        (dict(encoding=["rope", "none"] * 2, nope_every=2), "arch.nope_every applies to a single arch.encoding"),
        (dict(window=0), "arch.window sizes must be integers >= 1 (the keys a query sees, itself included) or null"),
        (dict(window=[4, None, -1, None]), "arch.window sizes must be integers >= 1"),
        (dict(window=[4, None]), "arch.window lists 2 sizes but arch.depth is 4"),
        (dict(encoding=["learned", "none"] * 2), "encoding 'learned' adds positions to the input embeddings"),
    ],
)  # fmt: skip
def test_bad_schedules_are_one_line_errors(kwargs, expected):
    with pytest.raises(ConfigError) as error:
        arch(**{"depth": 4, **kwargs})
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)


def test_window_needs_a_causal_model():
    with pytest.raises(ConfigError, match="arch.window .* needs a causal model"):
        Transformer(arch(window=4), causal=False)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_one_encoding_per_layer_equals_the_plain_encoding(name):
    """A list naming one encoding in every layer is the plain encoding: the same initial weights (same seed),
    the same state_dict keys and bit-for-bit the same outputs and gradients."""
    causal = True
    plain, listed = model(name, depth=3, causal=causal), model([name] * 3, depth=3, causal=causal)
    assert list(plain.state_dict()) == list(listed.state_dict())
    for (key, a), b in zip(plain.state_dict().items(), listed.state_dict().values()):
        assert torch.equal(a, b), key
    x = tokens(2, 9)
    a, b = plain(x), listed(x)
    assert torch.equal(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    for (key, p), q in zip(plain.named_parameters(), listed.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), key


def test_layers_share_an_encoding_and_its_bias(monkeypatch):
    m = model(["alibi", "none", "alibi", "none"])
    assert m.layer_encoding(0) is m.layer_encoding(2) and m.layer_encoding(1) is m.layer_encoding(3)
    assert m.layer_encoding(0) is m.encoding and len(m.encodings) == 2
    calls = []
    bias = type(m.encoding).bias
    monkeypatch.setattr(type(m.encoding), "bias", lambda self, positions: calls.append(1) or bias(self, positions))
    m(tokens(2, 7))
    assert len(calls) == 1  # once per forward, for the two ALiBi layers


@pytest.mark.parametrize(
    "encoding, window",
    [(["rope", "none"], None), (["rope", "none"], [3, None]), (["rope", "t5_bias", "none", "rope"], [2, None, 5, 4])],
)
def test_hybrid_schedule_trains_and_caches(encoding, window):
    """Forward and backward reach every layer; decoding through the KV cache (a prompt, then one token at a
    time) gives the full forward's hidden states, each layer with its own encoding's hooks and window."""
    m = model(encoding, depth=len(encoding), window=window).train()
    x = tokens(2, 11)
    m(x).square().mean().backward()
    for i, block in enumerate(m.blocks):
        assert block.attn.qkv.weight.grad.abs().sum() > 0, i
    m.eval()
    with torch.no_grad():
        full = m(x)
        cache = KVCache(len(encoding))
        steps = [m.decode(x[:, :4], cache)] + [m.decode(x[:, t : t + 1], cache) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_sliding_window_masks_match_brute_force():
    for length, window in [(7, 1), (7, 3), (6, 6), (5, 9)]:
        want = torch.tensor([[j <= i and i - j < window for j in range(length)] for i in range(length)])
        assert torch.equal(allowed_mask(length, True, None, "cpu", window)[0, 0], want)
        for new in (1, 3):  # the last `new` query rows of a cached step
            assert torch.equal(band_mask(new, length, window, "cpu"), want[-new:])
        mask_mod = flex_block_mask(length, True, None, "cpu", window).mask_mod
        got = torch.tensor(
            [[bool(mask_mod(0, 0, torch.tensor(i), torch.tensor(j))) for j in range(length)] for i in range(length)]
        )
        assert torch.equal(got, want)


@torch.no_grad()
def test_windowed_layer_sees_only_its_window():
    """One layer with window w: the output at position i changes with token i - w + 1 and never with the
    earlier ones (brute force over every position)."""
    window, length = 3, 9
    m = model("rope", depth=1, window=window)
    x = tokens(1, length)
    base = m(x)
    for j in range(length):
        changed = x.clone()
        changed[0, j] = (changed[0, j] + 1) % VOCAB
        moved = (m(changed) - base).abs().amax(-1)[0] > 1e-6  # (L,): which outputs moved
        want = torch.tensor([j <= i < j + window for i in range(length)])
        assert torch.equal(moved, want), j


@torch.no_grad()
def test_flex_windows_match_sdpa():
    """FlexAttention (eager on the CPU) with per-layer encodings and windows equals the SDPA path."""
    encoding, window = ["alibi", "none", "alibi", "rope"], [3, None, 5, 2]
    sdpa = model(encoding, window=window, attention_backend="sdpa")
    flex = model(encoding, window=window, attention_backend="flex")
    x = tokens(2, 10)
    torch.testing.assert_close(flex(x), sdpa(x), atol=1e-5, rtol=1e-5)


def test_run_name_of_a_schedule():
    assert schedule_label(["rope", "rope", "rope", "none"]) == "rope3.none"
    assert schedule_label(["rope", "rope", "rope", "none"] * 3) == "rope3.none"
    assert schedule_label(["rope", "none"] * 2) == "rope.none"
    assert schedule_label(["alibi"] * 4) == "alibi"
    assert schedule_label(["rope", "rope", "none", "alibi", "rope"]) == "rope2.none.alibi.rope"
    assert encoding_label("rope") == "rope"
    assert encoding_label(["rope", "rope"], {"depth": 2}) == "rope"
    assert encoding_label("rope", {"nope_every": 4, "depth": 8}) == "rope3.none"  # iRoPE, as the list would be
    assert encoding_label(["rope", "rope", "rope", "none"], {"depth": 4}) == "rope3.none"
    hparams = {"arch": arch("rope", depth=4, nope_every=2).as_dict()}
    assert SyntheticTaskModel.encoding_of(hparams) == "rope.none"
    assert SyntheticTaskModel.encoding_of({"arch": arch("t5_bias").as_dict()}) == "t5_bias"
    assert in_name("model.arch.nope_every") and in_name("model.init_args.arch.nope_every")
    found = distinguishing({}, {"nope_every": 2, "window": 8}, {"nope_every": None, "window": None},
                           ["--model.arch.nope_every=2", "--model.arch.window=8"])  # fmt: skip
    assert found == {"model.arch.window": 8}  # nope_every is in the encoding's label


@pytest.mark.parametrize("names", [["rope", "rope", "rope", "none"], ["alibi", "none"], ["t5_bias", "rope", "none"]])
def test_a_schedule_label_is_an_encoding_value_that_reads_back(names):
    """`arch.encoding: rope3.none` is the schedule its run name shows: one string, so a hybrid is a value of an
    encoding sweep axis (Optuna's categorical choices cannot hold a list)."""
    label = schedule_label(names)
    built = arch(label, depth=2 * len(names))
    assert built.layer_encodings == names * 2 and encoding_label(label, built.as_dict()) == label
    assert Transformer(built, causal=True).layer_names == names * 2


def test_no_registered_name_ends_in_a_digit():
    """A label run is a name and a layer count ("rope3"): a name ending in a digit would read as a count."""
    assert not [name for name in ENCODINGS if name[-1].isdigit()]


@pytest.mark.parametrize(
    ("label", "expected"),
    [("rope.none", "does not divide arch.depth 3"), ("rope.nonex.none", "unknown encoding 'nonex'"),
     ("rope0.none", "not an encoding name with an optional layer count"), ("rope..none", "not an encoding name")],
)  # fmt: skip
def test_bad_schedule_labels_are_one_line(label, expected):
    with pytest.raises(ConfigError, match=expected):
        arch(label, depth=3)


def test_schedule_checkpoint_round_trip(tmp_path):
    """The architecture dict of a schedule (lists, nulls) loads with weights_only and rebuilds the same model."""
    config = arch(["rope", "alibi", "rope", "none"], window=[4, None, 4, None])
    m = model(config.encoding, window=config.window)
    torch.save({"hyper_parameters": {"arch": config.as_dict()}, "state_dict": m.state_dict()}, tmp_path / "a.ckpt")
    saved = torch.load(tmp_path / "a.ckpt", weights_only=True)
    loaded = ArchConfig.of(saved["hyper_parameters"]["arch"])
    assert loaded == config and loaded.first_difference(config) is None
    again = Transformer(loaded, causal=True).eval()
    again.load_state_dict(saved["state_dict"])  # strict: the same keys
    x = tokens(2, 8)
    assert torch.equal(again(x), m(x))


@pytest.mark.slow  # trains a model
def test_cli_schedule_fit_and_bad_schedule(tiny_fit_args, capsys, monkeypatch):
    from helpers import cli_in_process, fit

    record = fit([*tiny_fit_args, "--model.arch.depth=4", "--model.arch.nope_every=2"])
    assert record.status == "finished" and record.encoding == "rope.none"
    assert record.name.startswith("copy-rope.none-") and "nope_every" not in record.name
    assert record.config["model"]["init_args"]["arch"]["nope_every"] == 2
    code, _, err = cli_in_process([*tiny_fit_args, "--model.arch.depth=4", "--model.arch.nope_every=5"], capsys,
                                  monkeypatch, ROOT)  # fmt: skip
    assert code == 2 and "arch.nope_every must be an integer in [2, 4]" in err and len(err.strip().splitlines()) == 1
