"""Task-supplied position ids (Abacus, position coupling), addition_zhou, passkey depth bins, mqar.

Claims of docs/tasks.md covered here:
- "`positions: abacus`: each digit's id is its 1-based index within its number, 0 for other tokens, plus an offset
  drawn per example in [0, max_offset) at training time (0 at evaluation)": test_abacus_by_hand,
  test_abacus_matches_the_reference_helper, test_offsets_at_training_time_only
- "`positions: coupling`: digits of equal significance share an id ...": test_coupling_by_hand,
  test_coupling_matches_the_reference_dataset, test_offsets_at_training_time_only
- "the collate pads them ...; the model gives them to the Transformer (only when the task supplies them)":
  test_positions_are_padded_and_only_present_when_supplied, test_the_model_sees_the_task_positions
- "addition_zhou: operands of different lengths ..., index hints": test_addition_zhou_by_hand,
  test_option_variants_match_the_reference
- "passkey ... val/acc_depth_<percent>": test_depth_bins_only_for_depth_tasks, test_fit_addition_zhou_abacus_and_passkey
- "a bad option is one line naming the option and its choices": test_bad_options_are_one_line
"""

import numpy as np
import pytest
import torch

from datamodules.synthetic import PAD, SyntheticDataModule, make_examples
from datamodules.tasks import TASKS, split_options, unpack
from datamodules.tasks import positions as P
from datamodules.tasks.tokens import PLUS, QUERY, SEP, SLOT, SYMBOL0, symbols, tokens, vocab_size
from pe_core.errors import ConfigError

NUM_SYMBOLS, TRAIN_MAX_LEN = 12, 8
D = lambda *digits: tokens(digits)  # digit tokens


def generate(task, n, seed, train=True, **options):
    options = split_options(task, options, train)
    return unpack(TASKS[task].generate(np.random.default_rng(seed), n, NUM_SYMBOLS, TRAIN_MAX_LEN, **options))


# Abacus (McLeish et al. 2024)


def test_abacus_by_hand():
    # 21 + 543 written LSD first, = 564 (0465 LSD first, 4 digits): ids count within each number from 1
    full = D(1, 2) + [PLUS] + D(3, 4, 5) + [SEP] + D(4, 6, 5, 0)
    assert P.abacus(full) == [1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4]
    assert P.abacus(full, offset=7) == [8, 9, 0, 8, 9, 10, 0, 8, 9, 10, 11]  # the reference's `output[output>0] += k`
    assert P.abacus([QUERY] + D(3) + [SYMBOL0 + 10, SYMBOL0 + 11] + D(1, 1)) == [
        0,
        1,
        0,
        0,
        1,
        2,
    ]  # symbols > 9: no digit


def reference_abacus_helper(mask: torch.Tensor) -> torch.Tensor:
    """mcleish7/arithmetic abacus.py `Abacus.helper`, transcribed (digit mask (B, L) -> ids (B, L))."""
    shifted_mask = torch.cat([torch.zeros((mask.shape[0], 1), dtype=mask.dtype), mask[:, :-1]], dim=1)
    starts = (shifted_mask != mask) & mask
    segment_ids = torch.cumsum(starts, dim=1)
    index = torch.arange(mask.size(1)).repeat(mask.size(0), 1)
    reset_index = torch.zeros_like(mask).long().scatter_add(1, segment_ids, index * starts.long())
    positions = index - reset_index.gather(1, segment_ids) + 1
    return positions * mask


def test_abacus_matches_the_reference_helper():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, SYMBOL0 + 14, size=(64, 30))  # specials, digits and non-digit symbols
    expected = reference_abacus_helper(torch.from_numpy((rows >= SYMBOL0) & (rows < SYMBOL0 + 10)))
    assert [P.abacus(row) for row in rows.tolist()] == expected.tolist()


# Position coupling (Cho et al. 2024)


def test_coupling_by_hand():
    # addition (LSD first): 53 + 94 = 147 -> 7 4 1 written LSD first; PLUS and SEP at the start id
    full = D(3, 5) + [PLUS] + D(4, 9) + [SEP] + D(7, 4, 1)
    assert P.coupling(full, start=1) == [2, 3, 1, 2, 3, 1, 2, 3, 4]
    # MSD-first operands 17 + 3981 (= 3998, answer 8 9 9 3 0): equal significance, equal id
    full = D(1, 7) + [PLUS] + D(3, 9, 8, 1) + [SEP] + D(8, 9, 9, 3, 0)
    assert P.coupling(full, start=4, msd_first_operands=True) == [6, 5, 4, 8, 7, 6, 5, 4, 5, 6, 7, 8, 9]


def reference_coupled_positions(a: str, b: str, labels: str, start: int) -> list[int]:
    """HanseulJo/position-coupling src/data/addition.py `AdditionDatasetWithCoupledPositions.__getitem__`
    (reverse_input=False, reverse_output=True), transcribed: the ids of `a + b` then of `= labels`."""
    plus_position = start
    a_positions = list(range(start + 1, start + 1 + len(a)))[::-1]
    b_positions = list(range(start + 1, start + 1 + len(b)))[::-1]
    ans_positions = list(range(start + 1, start + 1 + len(labels)))
    return a_positions + [plus_position] + b_positions + [start] + ans_positions


def test_coupling_matches_the_reference_dataset():
    for seed in range(40):
        prompt, answer, extras = generate("addition_zhou", 7, seed, positions="coupling")
        split = prompt.index(PLUS)
        a, b = ("".join(map(str, symbols(x))) for x in (prompt[:split], prompt[split + 1 :]))
        start = extras["positions"][split]
        assert extras["positions"] == reference_coupled_positions(a, b, "x" * len(answer), start)


def test_offsets_at_training_time_only():
    n, max_offset = 5, 6
    abacus = {
        generate("addition", n, s, positions="abacus", max_offset=max_offset)[2]["positions"][0] for s in range(300)
    }
    assert abacus == set(range(1, max_offset + 1))  # the LSD of a: 1 + k, k in [0, max_offset)
    starts = {
        generate("addition", n, s, positions="coupling", max_offset=max_offset)[2]["positions"][n] for s in range(300)
    }
    assert starts == set(range(1, max_offset + TRAIN_MAX_LEN - n + 1))  # Cho et al.: [1, max_position - (n + 1)]
    for scheme, first in (("abacus", 1), ("coupling", 2)):
        evaluated = {generate("addition", n, s, False, positions=scheme, max_offset=max_offset)[2]["positions"][0]
                     for s in range(20)}  # fmt: skip
        assert evaluated == {first}
    # the tokens do not depend on the scheme (offsets are drawn after them), so `none` is the task as before
    for scheme in ("abacus", "coupling"):
        assert generate("addition", n, 3, positions=scheme)[:2] == generate("addition", n, 3)[:2]


# addition_zhou (Zhou et al. 2024)


def test_addition_zhou_by_hand():
    from datamodules.tasks.arithmetic import addition_zhou_reference

    ref = lambda prompt, n, **o: addition_zhou_reference(prompt, n, NUM_SYMBOLS, TRAIN_MAX_LEN, **o)
    assert ref(D(1, 7) + [PLUS] + D(3, 9, 8, 1), 4) == D(8, 9, 9, 3, 0)  # 17 + 3981 = 3998, LSD first, 5 digits
    assert ref(D(7, 1) + [PLUS] + D(1, 8, 9, 3), 4, reverse_operands=True) == D(8, 9, 9, 3, 0)
    h = vocab_size(NUM_SYMBOLS, TRAIN_MAX_LEN)  # hint i is token h + i
    prompt = [h + 3, *D(9), h + 2, *D(5), PLUS, h + 2, *D(8)]  # hints start at 2: 95 + 8 = 103
    assert ref(prompt, 2, index_hints=True) == [h + 2, *D(3), h + 3, *D(0), h + 4, *D(1)]
    lengths = set()
    for seed in range(200):
        prompt, answer, _ = generate("addition_zhou", 6, seed)
        split = prompt.index(PLUS)
        lengths.add((split, len(prompt) - split - 1))
        assert len(answer) == 7
    assert max(map(max, lengths)) == 6 and all(6 in pair for pair in lengths) and len(lengths) == 11


VARIANTS = [
    ("addition", {"positions": "abacus"}),
    ("addition", {"positions": "coupling", "max_offset": 3}),
    ("addition_zhou", {"index_hints": True}),
    ("addition_zhou", {"reverse_operands": True, "positions": "abacus"}),
    ("addition_zhou", {"positions": "coupling"}),
    ("passkey", {"key_length": 2}),
    ("mqar", {"num_queries": 9}),
]


@pytest.mark.parametrize("task, options", VARIANTS)
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_option_variants_match_the_reference(task, options, train):
    """The registry test (tests/data/test_tasks.py) runs the default options; these run the others, and check that
    the supplied positions cover `prompt SEP answer` and stay within the declared largest id."""
    from datamodules.tasks import limits

    for n in (1, 2, 5, 8, 30):
        for seed in range(10):
            prompt, answer, extras = generate(task, n, seed, train, **options)
            opts = split_options(task, options, train)
            assert TASKS[task].reference(prompt, n, NUM_SYMBOLS, TRAIN_MAX_LEN, **opts) == answer
            if "positions" in extras:
                assert len(extras["positions"]) == len(prompt) + 1 + len(answer)
                assert 0 <= min(extras["positions"]) and max(extras["positions"]) <= limits(
                    task, n, NUM_SYMBOLS, TRAIN_MAX_LEN, opts)["max_position"]  # fmt: skip


def test_retrieval_by_hand():
    from datamodules.tasks.retrieval import mqar_reference, passkey_reference

    prompt = D(0, 1, 2) + [PLUS] + D(7, 7, 3) + D(3, 4) + [QUERY]
    assert passkey_reference(prompt, 5, 12, 8, key_length=3) == D(7, 7, 3)
    prompt, answer, extras = generate("passkey", 10, 0)
    assert prompt.index(PLUS) == round(extras["depth"] * 10) and len(prompt) == 10 + 1 + 5 + 1
    prompt = D(0, 7, 1, 9, 2, 6) + [QUERY] + D(1) + [SLOT] + D(0) + [SLOT]  # keys 0 1 2 bound to 7 9 6
    assert mqar_reference(prompt, 3, 12, 8) == D(9, 7)
    for seed in range(20):  # 20 pairs over 6 keys: keys repeat with their values; queries are distinct
        prompt, answer, _ = generate("mqar", 20, seed)
        queries = prompt[41::2]
        assert len(queries) == len(set(queries)) == 4 == len(answer)


@pytest.mark.parametrize(
    "task, options, message",
    [
        ("addition", {"positions": "rope"}, "option 'positions' must be one of: none, abacus, coupling; got 'rope'"),
        ("addition", {"positions": "abacus", "max_offset": 0}, "needs max_offset >= 1"),
        ("addition_zhou", {"positions": "abacus"}, "set reverse_operands: true"),
        ("addition_zhou", {"index_hints": True, "positions": "coupling"}, "index_hints and positions"),
        ("addition_zhou", {"index_hints": True, "num_hints": 10}, "need num_hints >= 17"),  # eval_max_len 16
        ("addition_zhou", {"index_hints": 1}, "option 'index_hints' must be"),
        ("passkey", {"key_length": 0}, "needs key_length >= 1"),
        ("mqar", {"num_queries": 0}, "needs num_queries >= 1"),
        ("mqar", {"keys": 3}, "task 'mqar' has no option 'keys'; its options: num_queries"),
    ],
)
def test_bad_options_are_one_line(task, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        SyntheticDataModule(task=task, task_options=options, num_symbols=NUM_SYMBOLS, train_max_len=4)
    assert "\n" not in str(err.value)


# Batches and the model


def make_dm(task, causal=True, **options):
    sizes = dict(train_max_len=4, eval_max_len=7, num_symbols=NUM_SYMBOLS, train_size=64, eval_per_length=4)
    dm = SyntheticDataModule(task=task, task_options=options, causal=causal, batch_size=16, seed=1, **sizes)
    dm.setup()
    return dm


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_positions_are_padded_and_only_present_when_supplied(causal):
    plain = make_dm("addition_zhou", causal)
    assert all("positions" not in b and "depth" not in b for b in plain.train_dataloader())
    dm = make_dm("addition_zhou", causal, positions="coupling")
    # rows for the largest training id, max_offset + train_max_len + 1, all trained (for the probe's checkpoints)
    assert dm.max_seq_len == dm.train_seq_len == 100 + 4 + 2
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        for batch in loader:
            positions, mask = batch["positions"], batch["padding_mask"]
            assert positions.shape == batch["tokens"].shape and positions.dtype == torch.long
            assert (positions[~mask] == 0).all() and (positions[mask] > 0).all()
            assert int(positions.max()) < dm.max_seq_len
    # each example's ids are its generator's, cut as the tokens: a decoder drops the last one
    rng = np.random.default_rng(5)
    prompt, answer, extras = unpack(TASKS["addition_zhou"].generate(rng, 3, 12, 4, positions="coupling"))
    (example,) = make_examples("addition_zhou", [3], np.random.default_rng(5), 12, 4, causal, {"positions": "coupling"})
    assert example.positions == extras["positions"][: len(example.tokens)]
    assert len(example.positions) == len(example.tokens) == len(prompt) + 1 + len(answer) - causal
    assert example.tokens[-1] != PAD


def tiny_model(dm, encoding="learned"):
    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel

    torch.manual_seed(0)
    arch = ArchConfig(encoding=encoding, dim=16, depth=1, num_heads=2, vocab_size=dm.vocab_size,
                      max_length=dm.max_seq_len)  # fmt: skip
    return SyntheticTaskModel(arch).eval()


@pytest.mark.parametrize("encoding", ["learned", "sinusoidal", "rope"])
def test_the_model_sees_the_task_positions(encoding):
    dm = make_dm("addition_zhou", reverse_operands=True, positions="abacus")
    model = tiny_model(dm, encoding)
    batch = next(iter(dm.train_dataloader()))
    run = lambda positions: model.head(model.transformer(batch["tokens"], positions, batch["padding_mask"]))
    with torch.no_grad():
        logits = model(batch)
        assert torch.equal(logits, run(batch["positions"]))
        assert not torch.allclose(logits, run(None))  # not the default 0..L-1
        changed = {k: v.clone() for k, v in batch.items()}
        changed["positions"][0, 2] += 1  # one id of the first example
        after = model(changed)
    assert not torch.allclose(after[0], logits[0]) and torch.equal(after[1:], logits[1:])


def test_task_positions_with_randomized_positions_are_one_line():
    """Task ids would silently replace the encoding's randomize_positions: refused in one line."""
    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel
    from pe_core.errors import ConfigError

    dm = make_dm("addition_zhou", reverse_operands=True, positions="abacus")
    arch = ArchConfig(encoding="learned", encoding_options={"randomize_positions": 4 * dm.max_seq_len}, dim=16,
                      depth=1, num_heads=2, vocab_size=dm.vocab_size, max_length=dm.max_seq_len)  # fmt: skip
    model = SyntheticTaskModel(arch)
    with pytest.raises(ConfigError, match="randomize_positions"):
        model(next(iter(dm.train_dataloader())))


def test_without_task_positions_the_model_is_unchanged():
    dm = make_dm("addition")
    model = tiny_model(dm)
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        expected = model.head(model.transformer(batch["tokens"], padding_mask=batch["padding_mask"]))
        assert torch.equal(model(batch), expected)


def test_depth_bins_only_for_depth_tasks():
    from types import SimpleNamespace

    for task, depth in (("passkey", True), ("copy", False)):
        dm = make_dm(task)
        assert dm.depth is depth
        model = tiny_model(dm)
        model._trainer = SimpleNamespace(datamodule=dm)
        with torch.no_grad():
            for batch in dm.val_dataloader():
                assert ("depth" in batch) is depth
                model._eval_step(batch, "val")
        values = model._depth_values("val")
        if not depth:
            assert values == {}
            continue
        assert set(values) <= {f"val/acc_depth_{p}" for p in (0, 20, 40, 60, 80)} and len(values) >= 3
        assert all(0.0 <= v <= 1.0 for v in values.values())
        depths = torch.cat([b["depth"] for b in dm.val_dataloader()])
        assert int(model.per_depth["val"].examples.sum()) == len(depths)
        bins = (depths * 5).long().clamp(max=4)
        assert model.per_depth["val"].examples.tolist() == torch.bincount(bins, minlength=5).tolist()


@pytest.mark.slow  # trains a model
def test_fit_addition_zhou_abacus_and_passkey(tiny_fit_args):
    from helpers import fit

    out = next(a for a in tiny_fit_args if a.startswith("--run.out_dir="))
    abacus = fit([*tiny_fit_args[:-1], f"{out}/abacus", "--data.task=addition_zhou", "--model.arch.encoding=learned",
                  "--data.task_options={positions: abacus, reverse_operands: true}"])  # fmt: skip
    assert abacus.status == "finished" and 0.0 <= abacus.final["val/acc"] <= 1.0
    passkey = fit([*tiny_fit_args[:-1], f"{out}/passkey", "--data.task=passkey", "--model.arch.encoding=rope"])
    assert passkey.status == "finished"
    assert any(key.startswith("val/acc_depth_") for key in passkey.final), sorted(passkey.final)
