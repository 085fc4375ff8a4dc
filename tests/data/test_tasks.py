"""The task registry's shared semantics test: every entry's answer equals its independent reference, its
lengths depend on n only, its output is deterministic given the seed, and its tokens fit the vocabulary. A new
task needs no edit here (only its generator, its reference and its registry line).

Claims of docs/tasks.md covered here:
- the task list "copy, reverse, sort, addition, lookup; the Chomsky-hierarchy suite (regular: 4 ...; context-free:
  4 ...; context-sensitive: 7 ...); and flip-flop language modelling (flip_flop, flip_flop_sparse, flip_flop_dense)":
  test_families_cover_the_paper_suites
- "addition (operands and sum least-significant digit first), lookup (...; queried indices stay in the training
  range)": test_addition_is_least_significant_digit_first_and_lookup_queries_the_training_range
- "defined as in the paper's code ...; deviations in the docstrings: outputs after a termination token unscored ...,
  odds_first as the code": test_paper_examples, test_lengths_depend_on_n_only_and_tokens_fit
- "flip_flop on FFL(0.8), flip_flop_sparse and flip_flop_dense trained on FFL(0.8) and evaluated on FFL(0.98) /
  FFL(0.1); ... accuracy on the read positions": test_flip_flop_reads_repeat_the_last_write,
  test_flip_flop_languages_by_split
- "Task options with --data.task_options ...; a missing or out-of-range one is a one-line error":
  test_bad_task_options_are_one_line, test_task_options_come_from_the_generator
- "A new task is one generator, one reference (...; tests/data/test_tasks.py checks every entry against it, plus lengths
  and seeding)": test_answer_matches_the_reference, test_lengths_depend_on_n_only_and_tokens_fit,
  test_deterministic_given_the_seed
"""

import numpy as np
import pytest

from datamodules.synthetic import SyntheticDataModule, format_example
from datamodules.tasks import CHOMSKY_FAMILIES, TASKS, check_task, limits, split_options, task_options, unpack
from datamodules.tasks.chomsky_context_sensitive import _isqrt
from datamodules.tasks.tokens import IGNORE_INDEX, SLOT, SYMBOL0, symbols, tokens, vocab_size
from pe_core.errors import ConfigError

NUM_SYMBOLS, TRAIN_MAX_LEN = 12, 8
LENGTHS = [1, 2, 3, 4, 5, 8, 13, 40, 97]
TASK = pytest.mark.parametrize("task", list(TASKS))


def sample(task: str, n: int, seed: int, train: bool = True):
    rng = np.random.default_rng(seed)
    options = split_options(task, {}, train)
    return unpack(TASKS[task].generate(rng, n, NUM_SYMBOLS, TRAIN_MAX_LEN, **options))[:2], options


@TASK
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_answer_matches_the_reference(task, train):
    for n in LENGTHS:
        for seed in range(12):
            (prompt, answer), options = sample(task, n, seed, train)
            assert TASKS[task].reference(prompt, n, NUM_SYMBOLS, TRAIN_MAX_LEN, **options) == answer, (n, seed)


@TASK
def test_lengths_depend_on_n_only_and_tokens_fit(task):
    """... or, for a task that declares limits, stay within them (addition_zhou: operands of different lengths)."""
    for n in LENGTHS:
        shapes = set()
        bounds = limits(task, n, NUM_SYMBOLS, TRAIN_MAX_LEN, {})
        vocab = max(vocab_size(NUM_SYMBOLS, TRAIN_MAX_LEN), bounds.get("vocab", 0))
        for seed in range(8):
            (prompt, answer), _ = sample(task, n, seed)
            shape = (len(prompt), len(answer) if SLOT not in prompt else "in place")  # slots: as many as reads
            if "prompt" in bounds:
                assert len(prompt) <= bounds["prompt"] and len(answer) == bounds["answer"]
                shape = ("at most", bounds["prompt"], len(answer))
            shapes.add(shape)
            assert all(0 <= t < vocab or t == SLOT for t in prompt)
            scored = [t for t in answer if t != IGNORE_INDEX]
            own = range(vocab_size(NUM_SYMBOLS, TRAIN_MAX_LEN), vocab)  # the task's tokens (the word problems')
            assert scored and all(SYMBOL0 <= t < SYMBOL0 + NUM_SYMBOLS or t in own for t in scored)
            if IGNORE_INDEX in answer:  # unscored entries only at the end (after a terminator)
                first = answer.index(IGNORE_INDEX)
                assert answer[first:] == [IGNORE_INDEX] * (len(answer) - first)
            for causal in (True, False):
                tokens_, targets = format_example(prompt, answer, causal)
                assert len(tokens_) == len(targets) and all(0 <= t < vocab for t in tokens_)
                assert [t for t in targets if t != IGNORE_INDEX] == scored
        assert len(shapes) == 1, (n, shapes)


@TASK
def test_deterministic_given_the_seed(task):
    for n in (5, 40):
        assert sample(task, n, 3) == sample(task, n, 3)
        assert len({str(sample(task, n, seed)[0]) for seed in range(10)}) > 1


def test_families_cover_the_paper_suites():
    families = {}
    for name, task in TASKS.items():
        families.setdefault(task.family, []).append(name)
    assert len(families["regular"]) == 4 and len(families["context_free"]) == 4
    assert len(families["context_sensitive"]) == 7 and set(CHOMSKY_FAMILIES) < set(families)
    assert set(families["flip_flop"]) == {"flip_flop", "flip_flop_sparse", "flip_flop_dense"}


# Hand-worked examples of the paper's definitions (symbols, not token ids)


def test_paper_examples():
    from datamodules.tasks import chomsky_context_free as CF
    from datamodules.tasks import chomsky_context_sensitive as CS
    from datamodules.tasks import chomsky_regular as R

    ref = lambda module, name, s, **o: symbols(getattr(module, f"{name}_reference")(tokens(s), len(s), 12, 8, **o))
    assert ref(R, "even_pairs", [0, 0, 1, 1, 1, 0]) == [0] and ref(R, "even_pairs", [0, 1, 0, 1, 0, 0, 1]) == [1]
    assert ref(R, "parity_check", [1, 0, 1, 0, 1, 0, 0]) == [1] and ref(R, "parity_check", [0, 1, 1, 1, 1]) == [0]
    assert ref(R, "cycle_navigation", [2, 0, 1, 0, 0]) == [3]  # 1 -1 0 -1 -1 -> -2 = class 3
    plus, minus, times = 5, 6, 7
    assert ref(R, "modular_arithmetic", [1, plus, 2, times, 3]) == [2]
    assert ref(R, "modular_arithmetic", [0, times, 1, plus, 4, times, 3, minus, 2]) == [0]
    # stack 0 1 1 0, PUSH 1, POP, POP -> 1 1 0 then the terminator
    assert ref(CF, "stack_manipulation", [0, 1, 1, 0, 4, 2, 2]) == [1, 1, 0, 2] + [IGNORE_INDEX] * 4
    assert ref(CS, "odds_first", [0, 0, 1, 1, 0, 1, 0, 1]) == [0, 1, 1, 1, 0, 1, 0, 0]
    assert ref(CS, "missing_duplicate_string", [0, 1, 1, 0, 0, 2, 1, 0]) == [1]
    # 001 + 01101 (little-endian: 4 + 22 = 26) -> 01011 then the terminator
    assert ref(CS, "binary_addition", [0, 0, 1, 2, 0, 1, 1, 0, 1]) == [0, 1, 0, 1, 1, 2] + [IGNORE_INDEX] * 4
    assert ref(CS, "binary_multiplication", [0, 0, 1, 2, 0, 1, 1, 0, 1]) == [0, 0, 0, 1, 1, 0, 1, 2, IGNORE_INDEX]
    assert ref(CS, "compute_sqrt", [1, 0, 0, 1, 0, 1]) == [1, 1, 0]  # 37 -> 6
    assert all(_isqrt(v) ** 2 <= v < (_isqrt(v) + 1) ** 2 for v in [1, 2, 3, 4, 15, 16, 17, 10**40 + 7])


def test_flip_flop_reads_repeat_the_last_write():
    from datamodules.tasks.flip_flop import flip_flop_reference

    w, r, i = 2, 3, 4
    prompt = tokens([w, 1, i, 0, r, SLOT, w, 0, i, 1, r, SLOT])
    assert symbols(flip_flop_reference(prompt, 5, 12, 8)) == [1, 0]
    (prompt, answer), _ = sample("flip_flop_sparse", 400, 0, train=False)
    assert symbols(prompt)[0::2].count(i) > 360  # p_ignore 0.98 at evaluation
    (prompt, answer), _ = sample("flip_flop_sparse", 400, 0, train=True)
    assert symbols(prompt)[0::2].count(i) < 360  # 0.8 in training


def test_addition_is_least_significant_digit_first_and_lookup_queries_the_training_range():
    from datamodules.tasks.basic import addition_reference, addition_task
    from datamodules.tasks.tokens import PLUS, QUERY, index_token

    # 99 + 1 written LSD first: 9 9 + 1 0 -> 0 0 1 (= 100), n + 1 digits
    assert symbols(addition_reference(tokens([9, 9]) + [PLUS] + tokens([1, 0]), 2, 12, 8)) == [0, 0, 1]
    prompt, answer = addition_task(np.random.default_rng(0), 6, 12, 8)
    a, b = symbols(prompt[:6]), symbols(prompt[7:])
    as_int = lambda digits: sum(d * 10**i for i, d in enumerate(digits))  # digit i has weight 10^i
    assert as_int(symbols(answer)) == as_int(a) + as_int(b) and len(answer) == 7
    queried = set()
    for seed in range(200):  # at length 40 > train_max_len 8, the queried index still lies in 0..7
        (prompt, answer), _ = sample("lookup", 40, seed)
        assert prompt[-2] == QUERY
        queried.add(prompt[-1] - index_token(0, NUM_SYMBOLS))
    assert queried == set(range(TRAIN_MAX_LEN))


def test_flip_flop_languages_by_split():
    """flip_flop: FFL(0.8) in training and evaluation; flip_flop_dense: FFL(0.8) in training, FFL(0.1) in
    evaluation (flip_flop_sparse: FFL(0.98), test_flip_flop_reads_repeat_the_last_write)."""
    ignore = 4
    share = lambda task, train: symbols(sample(task, 2000, 0, train)[0][0])[2::2].count(ignore) / 2000
    assert 0.77 < share("flip_flop", True) < 0.83 and 0.77 < share("flip_flop", False) < 0.83
    assert 0.77 < share("flip_flop_dense", True) < 0.83 and 0.07 < share("flip_flop_dense", False) < 0.13


@pytest.mark.parametrize(
    "task, options, message",
    [
        ("modular_arithmetic", {"modulus": 1}, "needs modulus >= 2, got 1"),
        ("solve_equation", {"modulus": 0}, "needs modulus >= 2"),
        ("bucket_sort", {"alphabet": 1}, "needs alphabet >= 2"),
        ("flip_flop", {"p_ignore": -0.1}, r"needs p_ignore in \[0.0, 1.0\]"),
        ("modular_arithmetic_brackets", {"modulus": 9}, "needs num_symbols >= 14"),
        ("parity_check", {"modulus": 3}, "task 'parity_check' has no option 'modulus'; its options: none"),
        ("even_pairs", {"alphabet": 3}, "has no option 'alphabet'"),
    ],
)
def test_bad_task_options_are_one_line(task, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        SyntheticDataModule(task=task, task_options=options, num_symbols=NUM_SYMBOLS, train_max_len=4)
    assert "\n" not in str(err.value)


def test_task_options_come_from_the_generator():
    assert task_options("modular_arithmetic_brackets") == ["modulus", "mult"]
    assert task_options("copy") == []
    check_task("bucket_sort", {"alphabet": 3})
