"""Tests for datamodules/synthetic.py; every test runs over the TASKS registry (and both formattings)."""

import numpy as np
import pytest
import torch

from datamodules.synthetic import (
    IGNORE_INDEX,
    MASK,
    PAD,
    PLUS,
    QUERY,
    SEP,
    SYMBOL0,
    TASKS,
    SyntheticDataModule,
    format_example,
)
from lightning_modules.errors import ConfigError

NUM_SYMBOLS, TRAIN_MAX_LEN = 10, 6


def _digits_value(tokens):  # LSB-first digit tokens -> int
    return sum((t - SYMBOL0) * 10**i for i, t in enumerate(tokens))


def _check_addition(prompt, answer, n):
    plus = prompt.index(PLUS)
    a, b = prompt[:plus], prompt[plus + 1 :]
    assert len(a) == len(b) == n and len(answer) == n + 1
    assert _digits_value(answer) == _digits_value(a) + _digits_value(b)


def _check_lookup(prompt, answer, n):
    assert prompt[-2] == QUERY and len(prompt) == n + 2
    q = prompt[-1] - SYMBOL0 - NUM_SYMBOLS
    assert 0 <= q < min(n, TRAIN_MAX_LEN)
    assert answer == [prompt[q]]


SEMANTICS = {
    "copy": lambda p, a, n: a == p and len(p) == n,
    "reverse": lambda p, a, n: a == p[::-1] and len(p) == n,
    "sort": lambda p, a, n: a == sorted(p) and len(p) == n,
    "addition": lambda p, a, n: _check_addition(p, a, n) is None,
    "lookup": lambda p, a, n: _check_lookup(p, a, n) is None,
}

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


@TASK
def test_task_semantics(task):
    assert task in SEMANTICS, f"add a semantic check for task '{task}' to SEMANTICS"
    rng = np.random.default_rng(0)
    for n in [1, 2, 5, TRAIN_MAX_LEN, 3 * TRAIN_MAX_LEN]:
        for _ in range(20):
            prompt, answer = TASKS[task](rng, n, NUM_SYMBOLS, TRAIN_MAX_LEN)
            assert SEMANTICS[task](prompt, answer, n)
            vocab = SYMBOL0 + NUM_SYMBOLS + TRAIN_MAX_LEN
            assert all(0 <= t < vocab for t in prompt + answer)
            assert all(SYMBOL0 <= t < SYMBOL0 + NUM_SYMBOLS for t in answer)


def test_addition_carries():
    # 95 + 17 = 112, digits LSB first: [5, 9] + [7, 1] -> [2, 1, 1]
    prompt, answer = (
        [SYMBOL0 + 5, SYMBOL0 + 9, PLUS, SYMBOL0 + 7, SYMBOL0 + 1],
        [SYMBOL0 + d for d in (2, 1, 1)],
    )
    _check_addition(prompt, answer, 2)


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
            assert (tokens[supervised] == MASK).all() and (tokens[~supervised & mask] != MASK).all()
        longest = max(longest, tokens.shape[1])
    assert longest == dm.max_seq_len


@TASK
@CAUSAL
def test_supervised_targets_are_the_answer(task, causal):
    dm = make_dm(task, causal, eval_max_len=TRAIN_MAX_LEN)
    rng = np.random.default_rng([dm.seed, 1])  # regenerate the validation prompts and answers
    for example, n in zip(dm.val_set.examples, [n for n in dm.eval_lengths for _ in range(5)], strict=True):
        prompt, answer = TASKS[task](rng, n, NUM_SYMBOLS, TRAIN_MAX_LEN)
        assert [t for t in example.targets if t != IGNORE_INDEX] == answer
        assert example.tokens[: len(prompt) + 1] == prompt + [SEP] and example.length == n
        assert len(example.tokens) == len(example.targets)


@TASK
@CAUSAL
def test_sizes_known_before_setup(task, causal):
    dm = SyntheticDataModule(task=task, causal=causal, train_max_len=5, num_symbols=12)
    assert dm.vocab_size == 5 + 12 + 5
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
    ],
)
def test_config_errors(kwargs):
    with pytest.raises(ConfigError) as err:
        SyntheticDataModule(**kwargs)
    assert "\n" not in str(err.value)


def test_unknown_task_lists_choices():
    with pytest.raises(ConfigError, match="unknown task 'nope'; choose one of: copy, reverse"):
        SyntheticDataModule(task="nope")
