"""Deterministic synthetic length-generalisation tasks and their LightningDataModule.

Train on task lengths n in [min_len, train_max_len]; validate and test on every length up to eval_max_len,
so per-length metrics show how far a positional encoding extrapolates.

The tasks live in the registry datamodules/tasks (basic tasks, the Chomsky hierarchy, flip-flop); token ids in
datamodules/tasks/tokens.py. Shape legend: B batch, L padded sequence length.
"""

from collections import Counter, defaultdict
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from datamodules.base import BatchSize, TaskDataModule, data_options_help
from datamodules.tasks import TASKS, check_task, get_task, limits, split_options, unpack  # noqa: F401 (TASKS re-exported)
from datamodules.tasks.tokens import (  # noqa: F401 (re-exported: the token ids every task shares)
    IGNORE_INDEX,
    MASK,
    PAD,
    PLUS,
    QUERY,
    SEP,
    SLOT,
    SYMBOL0,
    index_token,
    vocab_size,
)
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt

# ---------------------------------------------------------------------------------------------------------
# Formatting and batching


class Example(NamedTuple):
    tokens: list[int]
    targets: list[int]  # IGNORE_INDEX except at answer positions
    length: int  # the task length n
    positions: list[int] | None = None  # the task's own position ids of the tokens (None: the model's 0..L-1)
    depth: float | None = None  # where the answer hides in the prompt, in [0, 1] (tasks with depth)


def format_example(prompt: list[int], answer: list[int], causal: bool) -> tuple[list[int], list[int]]:
    """(tokens, targets) with the loss on the answer only.

    causal (decoder-only LM): full = prompt SEP answer; tokens = full[:-1], targets = full[1:] masked to the
    answer. Bidirectional (encoder): tokens = prompt SEP MASK*len(answer), targets = answer at the MASKs.
    Unscored answer entries (IGNORE_INDEX, after a termination token) stay MASK slots with no target for an
    encoder and are dropped from a decoder's sequence. A prompt with SLOTs carries its answer in place
    (flip-flop): no SEP, the answer fills the slots in order, a decoder predicts each from the token before
    it, an encoder at a MASK in its place.
    """
    if SLOT in prompt:
        if prompt.count(SLOT) != len(answer):
            raise ValueError(f"{prompt.count(SLOT)} answer slots for {len(answer)} answer tokens")
        fill = iter(answer)
        full = [next(fill) if t == SLOT else t for t in prompt]
        scored = [t if t_prompt == SLOT else IGNORE_INDEX for t, t_prompt in zip(full, prompt)]
        if causal:
            return full[:-1], scored[1:]
        return [MASK if t == SLOT else t for t in prompt], scored
    ignored = [IGNORE_INDEX] * len(prompt)  # positions whose target is not an answer token
    if causal:
        while answer and answer[-1] == IGNORE_INDEX:
            answer = answer[:-1]
        full = prompt + [SEP] + answer
        return full[:-1], ignored + answer
    return prompt + [SEP] + [MASK] * len(answer), ignored + [IGNORE_INDEX] + answer


def format_positions(positions: list[int], prompt: list[int], answer: list[int], causal: bool) -> list[int]:
    """A task's position ids of `prompt SEP answer` (of the prompt alone with SLOTs) cut as `format_example` cuts
    the tokens: a decoder's input drops the last token (and unscored answer padding); an encoder's MASK slots keep
    the ids of the answer tokens they stand for."""
    if SLOT in prompt:
        return positions[:-1] if causal else positions
    if causal:
        scored = len(answer)
        while scored and answer[scored - 1] == IGNORE_INDEX:
            scored -= 1
        return positions[: len(prompt) + scored]
    return positions


def collate(examples: list[Example]) -> dict[str, Tensor]:
    """Right-pad a list of examples into a batch: tokens/targets/padding_mask (B, L), length (B,); and, when the
    task supplies them, positions (B, L) (padded with 0) and depth (B,)."""
    L = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), L), PAD, dtype=torch.long)  # (B, L)
    targets = torch.full((len(examples), L), IGNORE_INDEX, dtype=torch.long)  # (B, L)
    padding_mask = torch.zeros((len(examples), L), dtype=torch.bool)  # (B, L), True = real token
    for i, e in enumerate(examples):
        tokens[i, : len(e.tokens)] = torch.tensor(e.tokens)
        targets[i, : len(e.targets)] = torch.tensor(e.targets)
        padding_mask[i, : len(e.tokens)] = True
    length = torch.tensor([e.length for e in examples], dtype=torch.long)  # (B,)
    batch = {"tokens": tokens, "targets": targets, "padding_mask": padding_mask, "length": length}
    if examples[0].positions is not None:
        batch["positions"] = torch.zeros((len(examples), L), dtype=torch.long)  # (B, L)
        for i, e in enumerate(examples):
            batch["positions"][i, : len(e.positions)] = torch.tensor(e.positions)
    if examples[0].depth is not None:
        batch["depth"] = torch.tensor([e.depth for e in examples], dtype=torch.float)  # (B,)
    return batch


class ListDataset(Dataset):
    """A map-style dataset over an in-memory list of examples."""

    def __init__(self, examples: list[Example]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]


def sequence_length(
    task: str, n: int, num_symbols: int, train_max_len: int, causal: bool, options: dict | None = None
) -> int:
    """Longest model input of a task example of length n: prompt and answer lengths depend on n only, so one
    throwaway example per split's options gives it (a decoder's bound counts the unscored answer padding it
    drops). Also surfaces the task's own option errors (e.g. addition with fewer than 10 symbols, a modulus
    below 2) as ConfigError."""
    check_task(task, options)
    longest = 0
    for train in (True, False):
        fn_options = split_options(task, options, train)
        result = get_task(task).generate(np.random.default_rng(0), n, num_symbols, train_max_len, **fn_options)
        prompt, answer, _ = unpack(result)
        bounds = limits(task, n, num_symbols, train_max_len, fn_options)
        if "prompt" in bounds:  # a prompt whose length varies with the draw
            longest = max(longest, bounds["prompt"] + 1 + bounds["answer"] - causal)
        elif SLOT in prompt:
            longest = max(longest, len(format_example(prompt, answer, causal)[0]))
        else:
            longest = max(longest, len(prompt) + 1 + len(answer) - causal)
    return longest


def make_examples(
    task: str,
    lengths: list[int],
    rng: np.random.Generator,
    num_symbols: int,
    train_max_len: int,
    causal: bool,
    options: dict | None = None,
) -> list[Example]:
    """One formatted example per entry of `lengths`, in that order; `options` go to the task's generator."""
    fn = get_task(task).generate
    examples = []
    for n in lengths:
        prompt, answer, extras = unpack(fn(rng, n, num_symbols, train_max_len, **(options or {})))
        positions = extras.get("positions")
        if positions is not None:
            positions = format_positions(positions, prompt, answer, causal)
        examples.append(Example(*format_example(prompt, answer, causal), n, positions, extras.get("depth")))
    return examples


def constant_accuracy(examples: list[Example], train_max_len: int) -> float | None:
    """The exact-match accuracy of the best model that ignores its input: per length up to train_max_len, the share
    of `examples` whose scored answer is that length's most frequent one, averaged over the lengths as val/acc is
    (a baseline that `cli.py compare --precondition baseline` asks a cell to beat); None without such a length."""
    answers = defaultdict(Counter)
    for e in examples:
        if e.length <= train_max_len:
            answers[e.length][tuple(t for t in e.targets if t != IGNORE_INDEX)] += 1
    shares = [max(counts.values()) / counts.total() for counts in answers.values()]
    return sum(shares) / len(shares) if shares else None


def task_sizes(task: str, lengths: tuple[int, int], num_symbols: int, train_max_len: int,
               options: dict | None) -> tuple[int, tuple[int, int]]:  # fmt: skip
    """The vocabulary size the task needs over its training and evaluation splits, whose longest lengths are
    `lengths`, and the rows of position ids each split needs: the shared vocabulary and 0 rows unless the task
    declares more in its limits."""
    vocab, rows = vocab_size(num_symbols, train_max_len), []
    for train, n in zip((True, False), lengths):
        bounds = limits(task, n, num_symbols, train_max_len, split_options(task, options, train))
        vocab = max(vocab, bounds.get("vocab", 0))
        rows.append(bounds.get("max_position", -1) + 1)
    return vocab, tuple(rows)


# ---------------------------------------------------------------------------------------------------------
# DataModule

TaskName = Literal[tuple(TASKS)]  # the registry's names: --help lists them, a wrong one is refused when parsed


@data_options_help(
    task="the synthetic task (datamodules/tasks)",
    task_options="the task's own options, e.g. {modulus: 5} (its generator's keyword arguments; datamodules/tasks)",
    causal="decoder-only formatting (true) or bidirectional encoder formatting with MASK slots (false); linked "
    "from --model.causal",
    min_len="shortest task length n trained on",
    train_max_len="longest task length n trained on; longer ones are evaluated as beyond-length (val/acc_ood)",
    eval_max_len="longest task length n evaluated; null: 4 * train_max_len",
    eval_length_stride="evaluate every stride-th length from min_len (train_max_len and eval_max_len always)",
    num_symbols="size of the task's alphabet of symbols",
    train_size="training examples, their lengths drawn uniformly from [min_len, train_max_len]",
    eval_per_length="validation (and test) examples per length beyond train_max_len",
    eval_per_train_length="validation (and test) examples per length up to train_max_len; null: eval_per_length",
)
class SyntheticDataModule(TaskDataModule):
    """A synthetic length-generalisation task, trained on lengths up to train_max_len and evaluated beyond.

    Training lengths n lie in [min_len, train_max_len]; validation and test lengths go up to eval_max_len.

    Splits are generated in `setup()` and fully determined by `seed` (by default the run's seed, see
    `data_seed`): train uses numpy default_rng([seed, 0]) with lengths uniform in [min_len, train_max_len];
    validation and test use default_rng([seed, 1]) and default_rng([seed, 2]) with `eval_per_length`
    examples for every length in `eval_lengths` beyond train_max_len and `eval_per_train_length` for the
    others (short, so cheap: more of them make `val/acc` precise), sorted by length.
    Batches: tokens/targets/padding_mask (B, L), length (B,), and positions (B, L) / depth (B,) for a task that
    supplies them; see `collate`.
    `vocab_size`, `max_seq_len` and `eval_lengths` are known after `__init__` (for argument linking).
    """

    collate_fn = staticmethod(collate)

    @staticmethod
    def check_options(task: str = "copy", task_options: dict | None = None, num_symbols: int = 10,
                   train_max_len: int = 16, **_) -> None:  # fmt: skip
        """Cheap check of registry names and task options (names and values: one short example), run by cli.py
        before anything is instantiated."""
        sequence_length(task, 3, num_symbols, train_max_len, True, task_options)

    def __init__(
        self,
        task: TaskName = "copy",
        task_options: dict | None = None,
        causal: bool = True,
        min_len: PositiveInt = 1,
        train_max_len: PositiveInt = 16,
        eval_max_len: PositiveInt | None = None,
        eval_length_stride: PositiveInt = 1,
        num_symbols: PositiveInt = 10,
        train_size: PositiveInt = 20000,
        eval_per_length: PositiveInt = 64,
        eval_per_train_length: PositiveInt | None = None,
        batch_size: BatchSize = 64,
        **kwargs,  # seed, num_workers (TaskDataModule)
    ):
        check_task(task, task_options)  # unknown names and options fail here, before any other check
        super().__init__(batch_size=batch_size, **kwargs)
        eval_max_len = 4 * train_max_len if eval_max_len is None else eval_max_len
        _check_lengths(min_len, train_max_len, eval_max_len)
        eval_per_train_length = eval_per_length if eval_per_train_length is None else eval_per_train_length
        self.task, self.task_options, self.causal = task, dict(task_options or {}), causal
        self.min_len, self.train_max_len, self.eval_max_len = min_len, train_max_len, eval_max_len
        self.num_symbols, self.train_size, self.eval_per_length = num_symbols, train_size, eval_per_length
        self.eval_per_train_length = eval_per_train_length
        strided = range(min_len, eval_max_len + 1, eval_length_stride)
        self.eval_lengths = sorted({*strided, train_max_len, eval_max_len})
        longest = (train_max_len, eval_max_len)
        self.vocab_size, position_rows = task_sizes(task, longest, num_symbols, train_max_len, task_options)
        # sequence lengths grow with n, so the longest input over all splits is at eval_max_len; a task's own
        # position ids (abacus, coupling: offsets beyond the sequence) may need more rows of a position table
        self.max_seq_len = sequence_length(task, eval_max_len, num_symbols, train_max_len, causal, task_options)
        self.max_seq_len = max(self.max_seq_len, *position_rows)
        self.depth = get_task(task).depth  # examples carry the answer's depth (logged in bins by the model)
        # the longest training input: positions past it are never trained (saved in checkpoints for the probe)
        self.train_seq_len = sequence_length(task, train_max_len, num_symbols, train_max_len, causal, task_options)
        self.train_seq_len = max(self.train_seq_len, position_rows[0])  # a task's own ids train their rows

    def _examples(self, lengths: list[int], rng: np.random.Generator, train: bool) -> ListDataset:
        args = (self.num_symbols, self.train_max_len, self.causal)
        options = split_options(self.task, self.task_options, train)
        return ListDataset(make_examples(self.task, lengths, rng, *args, options))

    def examples_per_length(self, n: int) -> int:
        """Validation (and test) examples of length n."""
        return self.eval_per_train_length if n <= self.train_max_len else self.eval_per_length

    def _eval_set(self, split: int) -> ListDataset:
        lengths = [n for n in self.eval_lengths for _ in range(self.examples_per_length(n))]  # sorted by length
        return self._examples(lengths, np.random.default_rng([self.seed, split]), train=False)

    def constant_accuracy(self, stage: str) -> float | None:
        """`constant_accuracy` of the validation ("val") or test set: logged as `<stage>/acc_constant`."""
        split = self.val_set if stage == "val" else self.test_set
        return None if split is None else constant_accuracy(split.examples, self.train_max_len)

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            rng = np.random.default_rng([self.seed, 0])
            lengths = rng.integers(self.min_len, self.train_max_len + 1, size=self.train_size).tolist()
            self.train_set = self._examples(lengths, rng, train=True)
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self._eval_set(1)
        if stage in (None, "test") and self.test_set is None:
            self.test_set = self._eval_set(2)


def _check_lengths(min_len: int, train_max_len: int, eval_max_len: int) -> None:
    if not min_len <= train_max_len <= eval_max_len:
        raise ConfigError(
            "lengths must satisfy 1 <= min_len <= train_max_len <= eval_max_len, got "
            f"min_len={min_len}, train_max_len={train_max_len}, eval_max_len={eval_max_len}"
        )
