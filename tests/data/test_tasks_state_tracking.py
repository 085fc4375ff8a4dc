"""The S5 / A5 word problems (Merrill et al. 2024): products against sympy's independent composition of
permutations, A5's elements are even, the length bounds and the vocabulary (the registry-wide checks of
tests/data/test_tasks.py and test_synthetic.py run for them too).

Claims of docs/tasks.md covered here:
- "`word_problem_s5` / `word_problem_a5` (n uniform elements of S5, the 120 permutations of 5 items / of A5, its 60
  even ones; the answer their product, `prefixes: true` every prefix product)": test_products_match_sympy,
  test_a5_is_the_even_half_of_s5
- "one token per element after the shared vocabulary; answer length 1, or n with prefixes":
  test_lengths_and_vocabulary
- "with `prefixes: true`, train an encoder (`--model.causal=false`)": test_lengths_and_vocabulary
"""

from functools import reduce

import numpy as np
import pytest
from sympy.combinatorics import Permutation

from datamodules.synthetic import SyntheticDataModule
from datamodules.tasks import TASKS, limits
from datamodules.tasks.state_tracking import A5, S5, compose
from datamodules.tasks.tokens import IGNORE_INDEX, MASK, vocab_size

S, T = 12, 8  # num_symbols, train_max_len
BASE = vocab_size(S, T)  # element e is token BASE + e
GROUP = {"word_problem_s5": S5, "word_problem_a5": A5}
WORD_PROBLEMS = pytest.mark.parametrize("task", list(GROUP))


def draw(task, n, seed, **options):
    return TASKS[task].generate(np.random.default_rng(seed), n, S, T, **options)


@WORD_PROBLEMS
@pytest.mark.parametrize("prefixes", [False, True])
def test_products_match_sympy(task, prefixes):
    """p_i = p_(i-1) o g_i (apply g_i first); sympy's `a * b` applies a first, so p_i = G_i * P_(i-1)."""
    group = GROUP[task]
    for n in (1, 2, 7, 40):
        for seed in range(5):
            prompt, answer = draw(task, n, seed, prefixes=prefixes)
            word = [Permutation(list(group[t - BASE])) for t in prompt]
            expected = [reduce(lambda p, g: g * p, word[: i + 1]) for i in range(n)]
            got = [Permutation(list(group[t - BASE])) for t in answer]
            assert got == (expected if prefixes else expected[-1:]), (n, seed)
    # by hand: the transposition (0 1) then the 3-cycle 0->1->2->0, composed as functions
    assert compose((1, 0, 2, 3, 4), (1, 2, 0, 3, 4)) == (0, 2, 1, 3, 4)


def test_a5_is_the_even_half_of_s5():
    assert len(set(S5)) == 120 and all(sorted(p) == list(range(5)) for p in S5)
    assert len(A5) == 60 and all(Permutation(list(p)).is_even for p in A5)
    assert {p for p in S5 if Permutation(list(p)).is_even} == set(A5)
    seen = set()
    for seed in range(20):
        prompt, answer = draw("word_problem_a5", 30, seed, prefixes=True)
        assert all(Permutation(list(A5[t - BASE])).is_even for t in prompt + answer)
        seen |= set(prompt)
    assert len(seen) == 60  # uniform over the group: every element shows up
    odd = [t for t in draw("word_problem_s5", 30, 0)[0] if not Permutation(list(S5[t - BASE])).is_even]
    assert odd  # S5 words use odd elements too


@WORD_PROBLEMS
def test_lengths_and_vocabulary(task):
    size = len(GROUP[task])
    assert limits(task, 5, S, T, {}) == {"vocab": BASE + size}
    for n in (1, 3, 50):
        for prefixes in (False, True):
            prompt, answer = draw(task, n, 1, prefixes=prefixes)
            assert len(prompt) == n and len(answer) == (n if prefixes else 1)
            assert all(BASE <= t < BASE + size for t in prompt + answer)
    dm = SyntheticDataModule(task=task, num_symbols=S, train_max_len=4, eval_max_len=8)
    assert dm.vocab_size == BASE - T + 4 + size  # the shared vocabulary (train_max_len 4) + the elements
    # the tagging protocol: an encoder predicts every prefix product at its MASK slot
    dm = SyntheticDataModule(task=task, task_options={"prefixes": True}, causal=False, num_symbols=S, train_max_len=4,
                             eval_max_len=8, train_size=8, eval_per_length=2, batch_size=64)  # fmt: skip
    dm.setup()
    batch = next(iter(dm.val_dataloader()))
    assert ((batch["tokens"] == MASK).sum(1) == batch["length"]).all()
    assert ((batch["targets"] != IGNORE_INDEX).sum(1) == batch["length"]).all() and dm.max_seq_len == 2 * 8 + 1
