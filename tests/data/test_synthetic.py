"""Tests for datamodules/synthetic.py; every test runs over the TASKS registry (and both formattings).

Claims of docs/tasks.md covered here:
- "Generated deterministically from data.seed": test_deterministic
- "train lengths in [min_len, train_max_len], validation and test at every eval_length_stride-th length up to
  eval_max_len (default 4x; stride default 1), always including train_max_len and eval_max_len": test_lengths,
  test_sizes_known_before_setup
- "Decoder-only (prompt SEP answer, loss on the answer) or, with --model.causal=false, a bidirectional encoder that
  predicts every answer token at MASK slots": test_format_example, test_batches, test_supervised_targets_are_the_answer
- "batches are right-padded ... and padded positions carry no loss": test_batches
- "val/loss (in distribution)": test_val_loss_counts_only_in_distribution_lengths
- "val/acc_constant, the best input-blind answer": test_constant_accuracy_is_the_best_input_blind_answer_per_length
- "A bad encoding, task or option is one line ... naming the valid choices": test_unknown_task_lists_choices,
  test_config_errors
"""

import numpy as np
import pytest
import torch

from datamodules.synthetic import (
    IGNORE_INDEX,
    MASK,
    PAD,
    SEP,
    SLOT,
    TASKS,
    SyntheticDataModule,
    format_example,
)
from datamodules.tasks import limits, split_options, unpack
from pe_core.errors import ConfigError

NUM_SYMBOLS, TRAIN_MAX_LEN = 12, 6  # 12: every registered task's alphabet fits


CAUSAL = pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
TASK = pytest.mark.parametrize("task", list(TASKS))


def make_dm(task, causal=True, **overrides):
    kwargs = dict(
        task=task,
        causal=causal,
        min_len=2,
        train_max_len=TRAIN_MAX_LEN,
        eval_max_len=11,
        eval_length_stride=2,
        num_symbols=NUM_SYMBOLS,
        train_size=96,
        eval_per_length=5,
        batch_size=16,
        seed=3,
    )
    dm = SyntheticDataModule(**{**kwargs, **overrides})
    dm.setup()
    return dm


def batches(dm):
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        yield from loader


def test_format_example():
    prompt, answer = [5, 6, 7], [8, 9]
    assert format_example(prompt, answer, causal=True) == ([5, 6, 7, SEP, 8], [-100, -100, -100, 8, 9])
    tokens, targets = format_example(prompt, answer, causal=False)
    assert tokens == [5, 6, 7, SEP, MASK, MASK] and targets == [-100, -100, -100, -100, 8, 9]


@TASK
@CAUSAL
def test_deterministic(task, causal):
    a, b, c = make_dm(task, causal), make_dm(task, causal), make_dm(task, causal, seed=4)
    for split in ("train_set", "val_set", "test_set"):
        assert getattr(a, split).examples == getattr(b, split).examples
        assert getattr(a, split).examples != getattr(c, split).examples
    for x, y in zip(a.train_dataloader(), b.train_dataloader(), strict=True):  # seeded shuffling
        assert all(torch.equal(x[k], y[k]) for k in x)


@TASK
def test_lengths(task):
    dm = make_dm(task)
    train_lengths = [e.length for e in dm.train_set.examples]
    assert len(train_lengths) == 96 and min(train_lengths) >= 2 and max(train_lengths) <= TRAIN_MAX_LEN
    assert dm.eval_lengths == [2, 4, 6, 8, 10, 11]  # stride 2 plus train_max_len and eval_max_len
    for split in (dm.val_set, dm.test_set):
        lengths = [e.length for e in split.examples]
        assert lengths == sorted(lengths)
        assert {n: lengths.count(n) for n in set(lengths)} == {n: 5 for n in dm.eval_lengths}
    assert dm.val_set.examples != dm.test_set.examples


def test_more_examples_at_the_trained_lengths():
    """eval_per_train_length examples for every length <= train_max_len (cheap, short), eval_per_length beyond."""
    dm = make_dm("copy", eval_per_train_length=9)
    for split in (dm.val_set, dm.test_set):
        lengths = [e.length for e in split.examples]
        assert lengths == sorted(lengths)
        assert {n: lengths.count(n) for n in set(lengths)} == {2: 9, 4: 9, 6: 9, 8: 5, 10: 5, 11: 5}


def test_a_null_seed_is_seed_0_outside_the_cli():
    """cli.py fills a null data.seed with the run's seed (tests/app/test_cli.py); built directly it is 0."""
    assert make_dm("copy", seed=None).val_set.examples == make_dm("copy", seed=0).val_set.examples


@TASK
@CAUSAL
def test_batches(task, causal):
    dm = make_dm(task, causal)
    longest = 0
    for batch in batches(dm):
        tokens, targets, mask = batch["tokens"], batch["targets"], batch["padding_mask"]
        assert tokens.dtype == targets.dtype == batch["length"].dtype == torch.long
        assert mask.dtype == torch.bool and tokens.shape == targets.shape == mask.shape
        assert torch.equal(mask, tokens != PAD)
        assert (targets[~mask] == IGNORE_INDEX).all()
        assert tokens.max() < dm.vocab_size
        supervised = targets != IGNORE_INDEX  # (B, L)
        if causal:  # the next input is the target, except after the last real token (the final answer)
            shifted = supervised[:, :-1] & mask[:, 1:]  # (B, L - 1)
            assert torch.equal(tokens[:, 1:][shifted], targets[:, :-1][shifted])
            last = mask.sum(1) - 1  # (B,)
            assert supervised[torch.arange(len(last)), last].all()
        else:
            assert (tokens[supervised] == MASK).all()  # unscored answer slots (after a terminator) are MASK too
        longest = max(longest, tokens.shape[1])
    assert longest <= dm.max_seq_len  # a bound: a decoder drops unscored answer padding


@TASK
@CAUSAL
def test_supervised_targets_are_the_answer(task, causal):
    dm = make_dm(task, causal, eval_max_len=TRAIN_MAX_LEN)
    rng = np.random.default_rng([dm.seed, 1])  # regenerate the validation prompts and answers
    for example, n in zip(dm.val_set.examples, [n for n in dm.eval_lengths for _ in range(5)], strict=True):
        options = split_options(task, {}, False)
        prompt, answer, _ = unpack(TASKS[task].generate(rng, n, NUM_SYMBOLS, TRAIN_MAX_LEN, **options))
        assert [t for t in example.targets if t != IGNORE_INDEX] == [t for t in answer if t != IGNORE_INDEX]
        if SLOT not in prompt:
            assert example.tokens[: len(prompt) + 1] == prompt + [SEP]
        assert example.length == n
        assert len(example.tokens) == len(example.targets)


@TASK
@CAUSAL
def test_sizes_known_before_setup(task, causal):
    dm = SyntheticDataModule(task=task, causal=causal, train_max_len=5, num_symbols=12)
    declared = limits(task, 20, 12, 5, {}).get("vocab", 0)  # tokens after the shared vocabulary (lego, scan, pcfg)
    assert dm.vocab_size == max(5 + 12 + 5, declared)
    assert dm.eval_lengths == list(range(1, 21))
    assert dm.train_set is None  # nothing generated before setup()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(task="nope"),
        dict(min_len=0),
        dict(min_len=5, train_max_len=4),
        dict(train_max_len=8, eval_max_len=7),
        dict(eval_length_stride=0),
        dict(num_symbols=0),
        dict(train_size=0),
        dict(eval_per_length=0),
        dict(batch_size=0),
        dict(task="addition", num_symbols=9),
        dict(task="modular_arithmetic", task_options={"modulus": 1}, num_symbols=12),
        dict(task="modular_arithmetic", task_options={"modulus": 5}, num_symbols=7),
        dict(task="copy", task_options={"modulus": 5}),
        dict(task="flip_flop", task_options={"p_ignore": 1.5}),
    ],
)
def test_config_errors(kwargs):
    with pytest.raises(ConfigError) as err:
        SyntheticDataModule(**kwargs)
    assert "\n" not in str(err.value)


def test_unknown_task_lists_choices():
    with pytest.raises(ConfigError, match="unknown task 'nope'; choose one of: copy, reverse"):
        SyntheticDataModule(task="nope")


def test_val_loss_counts_only_in_distribution_lengths():
    """val/loss averages the loss of the batches' examples with length <= train_max_len; longer ones only count
    in the per-length accuracies (and in val/examples)."""
    from types import SimpleNamespace

    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel

    dm = make_dm("copy")
    torch.manual_seed(0)
    arch = ArchConfig(dim=16, depth=1, num_heads=2, vocab_size=dm.vocab_size, max_length=dm.max_seq_len)
    model = SyntheticTaskModel(arch)
    model._trainer = SimpleNamespace(datamodule=dm)
    batch = dm.collate_fn(dm.val_set.examples[::3])  # lengths on both sides of train_max_len 6
    inside = batch["length"] <= TRAIN_MAX_LEN
    assert inside.any() and not inside.all()
    with torch.no_grad():
        model._eval_step(batch, "val")
        logits = model(batch)
    expected = model.loss(logits[inside], batch["targets"][inside])
    assert model.losses["val"].compute().item() == pytest.approx(expected.item(), rel=1e-5)
    assert model.losses["val"].compute().item() != pytest.approx(model.loss(logits, batch["targets"]).item(), rel=1e-3)
    assert model.examples["val"].compute().item() == len(batch["length"])


@TASK
def test_constant_accuracy_is_the_best_input_blind_answer_per_length(task):
    """`val/acc_constant` (compare's `precondition: baseline`): per in-distribution length, the share of the
    evaluation examples whose scored answer is that length's most frequent one, averaged over lengths as val/acc is;
    no model that ignores its input scores more on these examples."""
    dm = make_dm(task, eval_per_length=24)
    by_length = {}
    for example in dm.val_set.examples:
        if example.length <= TRAIN_MAX_LEN:
            answer = tuple(t for t in example.targets if t != IGNORE_INDEX)
            by_length.setdefault(example.length, []).append(answer)
    expected = np.mean([max(map(answers.count, answers)) / len(answers) for answers in by_length.values()])
    assert dm.constant_accuracy("val") == pytest.approx(expected)
    assert 0 < dm.constant_accuracy("test") <= 1


def test_constant_accuracy_of_a_one_symbol_copy_is_one():
    assert make_dm("copy", num_symbols=1).constant_accuracy("val") == 1.0  # every answer of a length is the same
