"""Deterministic synthetic length-generalisation tasks and their LightningDataModule.

Train on task lengths n in [min_len, train_max_len]; validate and test on every length up to eval_max_len,
so per-length metrics show how far a positional encoding extrapolates.

Vocabulary: PAD=0, SEP=1, MASK=2, PLUS=3, QUERY=4, then `num_symbols` symbol tokens (SYMBOL0=5, ...), then
`train_max_len` index tokens (used by `lookup`). Shape legend: B batch, L padded sequence length.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from datamodules.loaders import SplitDataModule
from lightning_modules.errors import ConfigError

PAD, SEP, MASK, PLUS, QUERY = 0, 1, 2, 3, 4
SYMBOL0 = 5
IGNORE_INDEX = -100  # targets with this value carry no loss (torch cross_entropy's default ignore_index)


def vocab_size(num_symbols: int, train_max_len: int) -> int:
    """Special tokens + symbol tokens + one index token per training position."""
    return SYMBOL0 + num_symbols + train_max_len


def index_token(i: int, num_symbols: int) -> int:
    """Token id of position index i (the `lookup` query)."""
    return SYMBOL0 + num_symbols + i


# ---------------------------------------------------------------------------------------------------------
# Tasks: fn(rng, n, num_symbols, train_max_len) -> (prompt, answer), both lists of token ids.


def _symbols(rng: np.random.Generator, n: int, num_symbols: int) -> list[int]:
    return (SYMBOL0 + rng.integers(0, num_symbols, size=n)).tolist()


def copy_task(rng, n, num_symbols, train_max_len):
    """prompt = x (n random symbols), answer = x."""
    x = _symbols(rng, n, num_symbols)
    return x, list(x)


def reverse_task(rng, n, num_symbols, train_max_len):
    """prompt = x, answer = x reversed."""
    x = _symbols(rng, n, num_symbols)
    return x, x[::-1]


def sort_task(rng, n, num_symbols, train_max_len):
    """prompt = x, answer = sorted(x) (symbol ids are ordered like the symbols)."""
    x = _symbols(rng, n, num_symbols)
    return x, sorted(x)


def addition_task(rng, n, num_symbols, train_max_len):
    """prompt = a PLUS b, answer = a + b; digits are symbols 0..9, written least-significant digit first.

    LSB-first (Lee et al. 2023, "Teaching Arithmetic to Small Transformers") lets a left-to-right model
    emit each answer digit after seeing the carry it depends on: carries flow left to right. a and b have n
    uniformly random digits each (leading zeros allowed); the answer always has n + 1 digits, zero padded.
    """
    if num_symbols < 10:
        raise ConfigError(f"task 'addition' needs num_symbols >= 10 (digits 0-9), got {num_symbols}")
    a = rng.integers(0, 10, size=n).tolist()  # LSB first
    b = rng.integers(0, 10, size=n).tolist()
    total, carry = [], 0
    for da, db in zip(a, b, strict=True):
        carry, digit = divmod(da + db + carry, 10)
        total.append(digit)
    total.append(carry)  # n + 1 digits
    to_tokens = lambda digits: [SYMBOL0 + d for d in digits]
    return to_tokens(a) + [PLUS] + to_tokens(b), to_tokens(total)


def lookup_task(rng, n, num_symbols, train_max_len):
    """prompt = x QUERY q, answer = [x[q]], with q an index token for a uniform index < min(n, train_max_len).

    Queried indices stay within the training range, so beyond-training lengths test locating an index the
    model has seen among more (unseen) positions, not reading out an index token it has never trained on.
    """
    x = _symbols(rng, n, num_symbols)
    q = int(rng.integers(0, min(n, train_max_len)))
    return x + [QUERY, index_token(q, num_symbols)], [x[q]]


TASKS: dict[str, Callable] = {
    "copy": copy_task,
    "reverse": reverse_task,
    "sort": sort_task,
    "addition": addition_task,
    "lookup": lookup_task,
}


def get_task(name: str) -> Callable:
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; choose one of: {', '.join(TASKS)}")
    return TASKS[name]


# ---------------------------------------------------------------------------------------------------------
# Formatting and batching


class Example(NamedTuple):
    tokens: list[int]
    targets: list[int]  # IGNORE_INDEX except at answer positions
    length: int  # the task length n


def format_example(prompt: list[int], answer: list[int], causal: bool) -> tuple[list[int], list[int]]:
    """(tokens, targets) with the loss on the answer only.

    causal (decoder-only LM): full = prompt SEP answer; tokens = full[:-1], targets = full[1:] masked to the
    answer. Bidirectional (encoder): tokens = prompt SEP MASK*len(answer), targets = answer at the MASKs.
    """
    ignored = [IGNORE_INDEX] * len(prompt)  # positions whose target is not an answer token
    if causal:
        full = prompt + [SEP] + answer
        return full[:-1], ignored + answer
    return prompt + [SEP] + [MASK] * len(answer), ignored + [IGNORE_INDEX] + answer


def collate(examples: list[Example]) -> dict[str, Tensor]:
    """Right-pad a list of examples into a batch: tokens/targets/padding_mask (B, L), length (B,)."""
    L = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), L), PAD, dtype=torch.long)  # (B, L)
    targets = torch.full((len(examples), L), IGNORE_INDEX, dtype=torch.long)  # (B, L)
    padding_mask = torch.zeros((len(examples), L), dtype=torch.bool)  # (B, L), True = real token
    for i, e in enumerate(examples):
        tokens[i, : len(e.tokens)] = torch.tensor(e.tokens)
        targets[i, : len(e.targets)] = torch.tensor(e.targets)
        padding_mask[i, : len(e.tokens)] = True
    length = torch.tensor([e.length for e in examples], dtype=torch.long)  # (B,)
    return {"tokens": tokens, "targets": targets, "padding_mask": padding_mask, "length": length}


class ListDataset(Dataset):
    """A map-style dataset over an in-memory list of examples."""

    def __init__(self, examples: list[Example]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]


def sequence_length(task: str, n: int, num_symbols: int, train_max_len: int, causal: bool) -> int:
    """Model input length of a task example of length n (formats one throwaway example: sizes depend on n).

    Also surfaces the task's own option errors (e.g. addition with fewer than 10 symbols) as ConfigError.
    """
    prompt, answer = get_task(task)(np.random.default_rng(0), n, num_symbols, train_max_len)
    return len(format_example(prompt, answer, causal)[0])


def make_examples(
    task: str,
    lengths: list[int],
    rng: np.random.Generator,
    num_symbols: int,
    train_max_len: int,
    causal: bool,
) -> list[Example]:
    """One formatted example per entry of `lengths`, in that order."""
    fn = get_task(task)
    examples = []
    for n in lengths:
        prompt, answer = fn(rng, n, num_symbols, train_max_len)
        examples.append(Example(*format_example(prompt, answer, causal), n))
    return examples


# ---------------------------------------------------------------------------------------------------------
# DataModule


class SyntheticDataModule(SplitDataModule):
    """Synthetic length-generalisation task: train on lengths [min_len, train_max_len], evaluate up to
    eval_max_len.

    Splits are generated in `setup()` and fully determined by `seed`: train uses numpy default_rng([seed, 0])
    with lengths uniform in [min_len, train_max_len]; validation and test use default_rng([seed, 1]) and
    default_rng([seed, 2]) with `eval_per_length` examples for every length in `eval_lengths`, sorted by
    length. Batches: tokens/targets/padding_mask (B, L), length (B,); see `collate`.
    `vocab_size`, `max_seq_len` and `eval_lengths` are known after `__init__` (for argument linking).
    """

    collate_fn = staticmethod(collate)

    @staticmethod
    def check_args(task: str = "copy", **_) -> None:
        """Cheap check of registry names, run by cli.py before anything is instantiated."""
        get_task(task)

    def __init__(
        self,
        task: str = "copy",
        causal: bool = True,  # decoder-only LM formatting; False = bidirectional encoder with MASK slots
        min_len: int = 1,
        train_max_len: int = 16,
        eval_max_len: int | None = None,  # default 4 * train_max_len
        eval_length_stride: int = 1,
        num_symbols: int = 10,
        train_size: int = 20000,
        eval_per_length: int = 64,
        batch_size: int = 64,
        seed: int = 0,
        num_workers: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        get_task(task)  # unknown names fail here, before any other check
        eval_max_len = 4 * train_max_len if eval_max_len is None else eval_max_len
        _check_sizes(min_len, train_max_len, eval_max_len, eval_length_stride, num_symbols)
        _check_counts(train_size=train_size, eval_per_length=eval_per_length, batch_size=batch_size)
        if num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        self.task, self.causal, self.seed = task, causal, seed
        self.min_len, self.train_max_len, self.eval_max_len = min_len, train_max_len, eval_max_len
        self.num_symbols, self.train_size, self.eval_per_length = num_symbols, train_size, eval_per_length
        self.batch_size, self.num_workers = batch_size, num_workers
        strided = range(min_len, eval_max_len + 1, eval_length_stride)
        self.eval_lengths = sorted({*strided, train_max_len, eval_max_len})
        self.vocab_size = vocab_size(num_symbols, train_max_len)
        # sequence lengths grow with n, so the longest input over all splits is at eval_max_len
        self.max_seq_len = sequence_length(task, eval_max_len, num_symbols, train_max_len, causal)
        self.train_set = self.val_set = self.test_set = None

    def _examples(self, lengths: list[int], rng: np.random.Generator) -> ListDataset:
        args = (self.num_symbols, self.train_max_len, self.causal)
        return ListDataset(make_examples(self.task, lengths, rng, *args))

    def _eval_set(self, split: int) -> ListDataset:
        lengths = [n for n in self.eval_lengths for _ in range(self.eval_per_length)]  # sorted by length
        return self._examples(lengths, np.random.default_rng([self.seed, split]))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            rng = np.random.default_rng([self.seed, 0])
            lengths = rng.integers(self.min_len, self.train_max_len + 1, size=self.train_size).tolist()
            self.train_set = self._examples(lengths, rng)
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self._eval_set(1)
        if stage in (None, "test") and self.test_set is None:
            self.test_set = self._eval_set(2)


def _check_sizes(min_len: int, train_max_len: int, eval_max_len: int, stride: int, num_symbols: int) -> None:
    if not 1 <= min_len <= train_max_len <= eval_max_len:
        raise ConfigError(
            "lengths must satisfy 1 <= min_len <= train_max_len <= eval_max_len, got "
            f"min_len={min_len}, train_max_len={train_max_len}, eval_max_len={eval_max_len}"
        )
    if stride < 1:
        raise ConfigError(f"eval_length_stride must be >= 1, got {stride}")
    if num_symbols < 1:
        raise ConfigError(f"num_symbols must be >= 1, got {num_symbols}")


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
