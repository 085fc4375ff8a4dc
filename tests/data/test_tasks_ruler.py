"""RULER-style retrieval (Hsieh et al. 2024): niah_multikey, variable_tracking, common_words. Each answer against
a computation independent of the module's reference, the recorded depths against where the needle lies, the length
bounds, the bad options, and the depth bins the model logs (the registry-wide checks of tests/data/test_tasks.py and
test_synthetic.py run for them too).

Claims of docs/tasks.md covered here:
- "`niah_multikey` (`num_needles` needles `key value` in the haystack, `num_queries` of them asked; depth = the
  queried needle's, the smallest of several)": test_niah_answers_and_depths
- "`variable_tracking` (`num_chains` chains of `num_hops` + 1 assignments; answer every variable equal to the asked
  value, in assignment order; depth = the chain's first assignment)": test_variable_tracking_answers_and_depths
- "`common_words` (the `num_common` words that appear `ratio` times as often as any other, in increasing order)":
  test_common_words_answers_and_counts
- "logs exact match by depth for the tasks with a needle": test_depth_bins_for_the_needle_tasks
- "a bad option is one line": test_bad_options_are_one_line
"""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from datamodules.synthetic import SyntheticDataModule
from datamodules.tasks import TASKS
from datamodules.tasks.ruler import common_word_counts
from datamodules.tasks.tokens import PLUS, QUERY, SYMBOL0
from pe_core.errors import ConfigError

S, T = 12, 8  # num_symbols, train_max_len


def draw(task, n, seed, **options):
    return TASKS[task].generate(np.random.default_rng(seed), n, S, T, **options)


def statements(prompt, width_lhs, width_rhs):
    """[(haystack tokens before it, lhs, rhs)] of every `PLUS lhs rhs` in the prompt, and the part after QUERY."""
    out, i, hay = [], 0, 0
    while prompt[i] != QUERY:
        if prompt[i] == PLUS:
            lhs = tuple(prompt[i + 1 : i + 1 + width_lhs])
            out.append((hay, lhs, tuple(prompt[i + 1 + width_lhs : i + 1 + width_lhs + width_rhs])))
            i += 1 + width_lhs + width_rhs
        else:
            hay, i = hay + 1, i + 1
    return out, prompt[i + 1 :]


@pytest.mark.parametrize("options", [{}, {"num_needles": 6, "num_queries": 3, "key_length": 3, "value_length": 1}])
def test_niah_answers_and_depths(options):
    o = {"num_needles": 4, "num_queries": 1, "key_length": 2, "value_length": 3} | options
    depth_seen = []
    for n in (1, 5, 40, 200):
        for seed in range(10):
            prompt, answer, extras = draw("niah_multikey", n, seed, **options)
            needles, asked = statements(prompt, o["key_length"], o["value_length"])
            assert len(prompt) == n + o["num_needles"] * (1 + o["key_length"] + o["value_length"]) + 1 + len(asked)
            assert (
                len(asked) == o["num_queries"] * o["key_length"] and len(answer) == o["num_queries"] * o["value_length"]
            )
            assert len({lhs for _, lhs, _ in needles}) == o["num_needles"]  # distinct keys
            keys = [tuple(asked[j : j + o["key_length"]]) for j in range(0, len(asked), o["key_length"])]
            found = {lhs: (hay, rhs) for hay, lhs, rhs in needles}
            assert answer == [t for k in keys for t in found[k][1]]
            assert extras["depth"] == min(found[k][0] for k in keys) / n
            depth_seen.append(extras["depth"])
    if o["num_queries"] == 1:
        assert min(depth_seen) == 0.0 and max(depth_seen) > 0.9  # depths span the haystack


@pytest.mark.parametrize("options", [{}, {"num_chains": 3, "num_hops": 2, "name_length": 3}])
def test_variable_tracking_answers_and_depths(options):
    o = {"num_chains": 1, "num_hops": 4, "name_length": 2} | options
    w = o["name_length"]
    for n in (1, 6, 40, 150):
        for seed in range(10):
            prompt, answer, extras = draw("variable_tracking", n, seed, **options)
            stmts, value = statements(prompt, w, w)
            assert len(stmts) == o["num_chains"] * (o["num_hops"] + 1) and len(value) == w
            assert len(prompt) == n + len(stmts) * (1 + 2 * w) + 1 + w
            known, changed = {tuple(value)}, True  # a fixed point: every name assigned a known name or the value
            while changed:
                changed = False
                for _, lhs, rhs in stmts:
                    if rhs in known and lhs not in known:
                        known.add(lhs)
                        changed = True
            names = [lhs for _, lhs, _ in stmts if lhs in known]
            assert answer == [t for name in names for t in name] and len(names) == o["num_hops"] + 1
            first = next(hay for hay, _, rhs in stmts if rhs == tuple(value))  # `X1 = v`
            assert extras["depth"] == first / n


def test_common_words_answers_and_counts():
    for n in [*range(1, 30), 97, 500]:
        for seed in range(4):
            prompt, answer = draw("common_words", n, seed)
            assert len(prompt) == n + 1 and prompt[-1] == QUERY
            counts = Counter(prompt[:-1]).most_common()
            k, c, u = common_word_counts(n, S, 3, 3)
            top = [w for w, m in counts if m == counts[0][1]]
            assert answer == sorted(top) and len(answer) == k
            assert all(m == c for w, m in counts if w in answer)
            assert all(3 * m <= c for w, m in counts if w not in answer)  # `ratio` times as often at least
            assert all(SYMBOL0 <= t < SYMBOL0 + S for t in answer)
    assert common_word_counts(500, S, 3, 3)[0] == 3 and common_word_counts(1, S, 3, 3) == (1, 1, 0)
    prompt, answer = draw("common_words", 260, 0, num_common=5, ratio=10)  # 5 words 50 times, 10 others
    counts = Counter(prompt[:-1])
    rest = [m for w, m in counts.items() if w not in answer]
    assert len(answer) == 5 and rest and min(counts[w] for w in answer) >= 10 * max(rest)


@pytest.mark.parametrize(
    "task, options, message",
    [
        ("niah_multikey", {"num_queries": 5}, r"needs num_queries in \[1, 4\], got 5"),
        ("niah_multikey", {"num_needles": 20, "key_length": 1}, r"needs num_symbols \*\* 1 >= 20"),
        ("variable_tracking", {"num_hops": -1}, "needs num_hops >= 0"),
        ("variable_tracking", {"num_chains": 30, "name_length": 1}, r"needs num_symbols \*\* 1 >= 180"),
        ("common_words", {"ratio": 1}, "needs ratio >= 2, got 1"),
        ("common_words", {"num_common": 12}, "needs num_symbols >= 13"),
    ],
)
def test_bad_options_are_one_line(task, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        SyntheticDataModule(task=task, task_options=options, num_symbols=S, train_max_len=4)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("task, depth", [("niah_multikey", True), ("variable_tracking", True), ("common_words", False)])
def test_depth_bins_for_the_needle_tasks(task, depth):
    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel

    sizes = dict(train_max_len=4, eval_max_len=12, num_symbols=S, train_size=16, eval_per_length=6)
    dm = SyntheticDataModule(task=task, batch_size=32, seed=1, **sizes)
    dm.setup()
    assert dm.depth is depth
    torch.manual_seed(0)
    arch = ArchConfig(
        encoding="rope", dim=16, depth=1, num_heads=2, vocab_size=dm.vocab_size, max_length=dm.max_seq_len
    )
    model = SyntheticTaskModel(arch).eval()
    model._trainer = SimpleNamespace(datamodule=dm)
    with torch.no_grad():
        for batch in dm.val_dataloader():
            assert ("depth" in batch) is depth
            model._eval_step(batch, "val")
    values = model._depth_values("val")
    assert (len(values) >= 3) is depth and all(0.0 <= v <= 1.0 for v in values.values())
