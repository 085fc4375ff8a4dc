"""The CLRS-Text subset (Markeeva et al. 2024): clrs_insertion_sort, clrs_bubble_sort, clrs_bfs, clrs_dfs. Each
trace against the algorithm's defining property, checked without the module's code (scipy's BFS distances, networkx's
DFS events, one comparison at a time), CLRS-Text's own examples, the bounds and the bad options, and that a tiny model
learns each (the registry-wide checks of tests/data/test_tasks.py and test_synthetic.py run for them too).

Claims of the docs paragraph (docs/tasks.md) covered here:
- "the answer is the states h_1 .. h_(K-1), BAR, the output; `hints: false` the output alone":
  test_clrs_text_examples, test_without_hints_the_answer_is_the_output
- "insertion sort: the array after each insertion": test_insertion_sort_inserts_one_key_a_state
- "bubble sort: after each pass, `every_compare: true` after each comparison": test_bubble_sort_compares_adjacent_pairs
- "bfs: pi after each round of the parallel BFS, padded": test_bfs_rounds_are_the_distance_layers
- "dfs: pi at each of the 3n hint points": test_dfs_follows_depth_first_events
- "node labels after the shared vocabulary; n above `nodes` is a one-line error": test_vocabulary_and_labels,
  test_bad_lengths_and_options_are_one_line
- "the answer is determined by the input": test_the_answer_is_a_function_of_the_prompt
"""

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.sparse.csgraph import shortest_path

from datamodules.synthetic import SyntheticDataModule
from datamodules.tasks import TASKS
from datamodules.tasks.tokens import IGNORE_INDEX, PLUS, SYMBOL0, vocab_size
from pe_core.errors import ConfigError

S, T = 12, 8  # num_symbols, train_max_len
BAR = vocab_size(S, T)  # the first token after the shared vocabulary, then the node labels
LABEL0 = BAR + 1
CLRS = ["clrs_insertion_sort", "clrs_bubble_sort", "clrs_bfs", "clrs_dfs"]


def draw(task, n, seed, **options):
    return TASKS[task].generate(np.random.default_rng(seed), n, S, T, **options)


def split(answer, n):
    """(trace states, output) of `h_1 .. h_(K-1) BAR h_K` + padding, states of n tokens."""
    answer = [t for t in answer if t != IGNORE_INDEX]
    cut = len(answer) - n - 1
    assert answer[cut] == BAR and BAR not in answer[:cut] + answer[cut + 1 :] and cut % n == 0
    return [answer[i : i + n] for i in range(0, cut, n)], answer[cut + 1 :]


def graph(prompt, n):
    """(adjacency matrix, labels) of a graph prompt: `... bits PLUS labels`."""
    labels = prompt[-n:]
    assert prompt[-n - 1] == PLUS and all(t >= LABEL0 for t in labels) and len(set(labels)) == n
    bits = np.array(prompt[-n - 1 - n * n : -n - 1]) - SYMBOL0
    assert set(bits.tolist()) <= {0, 1}
    return bits.reshape(n, n), labels


def test_clrs_text_examples():
    """CLRS-Text's docstring example (clrs_utils.sample_to_str): insertion sort of key [0.549 0.715 0.603] answers
    '[0.549 0.715 0.603] | [0.549 0.603 0.715]'; here the keys 1 3 2. And BFS by hand on the path 0 - 1 - 2 - 3
    from 1 with CLRS's indices as labels: pi_1 = [1 1 1 3], pi_2 = [1 1 1 2] (then a round reaches nothing)."""
    key = [SYMBOL0 + k for k in (1, 3, 2)]
    assert TASKS["clrs_insertion_sort"].reference(key, 3, S, T) == key + [BAR] + [SYMBOL0 + k for k in (1, 2, 3)]
    path = [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]]
    label = lambda ks: [LABEL0 + k for k in ks]
    prompt = label([1]) + [PLUS] + [SYMBOL0 + b for row in path for b in row] + [PLUS] + label(range(4))
    answer = TASKS["clrs_bfs"].reference(prompt, 4, S, T, random_labels=False)
    assert answer == label([1, 1, 1, 3]) + [BAR] + label([1, 1, 1, 2]) + [IGNORE_INDEX] * 4  # padded to 3 states
    # DFS on 0 -> 1, 0 -> 2, 2 -> 0: start 0, discover 0, edge 0->1, discover 1, finish 1, edge 0->2, discover 2,
    # finish 2, finish 0 (9 = 3n hint points; pi changes at the two tree edges)
    dfs = [[0, 1, 1], [0, 0, 0], [1, 0, 0]]
    prompt = [SYMBOL0 + b for row in dfs for b in row] + [PLUS] + label(range(3))
    states = [[0, 1, 2]] * 2 + [[0, 0, 2]] * 3 + [[0, 0, 0]] * 4
    expected = [t for s in states[1:-1] for t in label(s)] + [BAR] + label(states[-1])
    assert TASKS["clrs_dfs"].reference(prompt, 3, S, T, random_labels=False) == expected


def test_insertion_sort_inserts_one_key_a_state():
    for n in (1, 2, 3, 9, 20):
        for seed in range(6):
            prompt, answer = draw("clrs_insertion_sort", n, seed)
            trace, output = split(answer, n)
            assert output == sorted(prompt)
            states = trace + [output] if n > 1 else [output]
            assert len(states) == max(n - 1, 1) and len(answer) == max(n - 2, 0) * n + n + 1
            for j, state in enumerate(states[: n - 1], start=1):  # after inserting A[j]: A[0..j] sorted, rest as given
                assert state == sorted(prompt[: j + 1]) + prompt[j + 1 :]


def test_bubble_sort_compares_adjacent_pairs():
    """CLRS's bubble sort: pass i compares j = n - 1 down to i + 1 and swaps A[j - 1], A[j] iff A[j] < A[j - 1].
    Every comparison's state is checked against that rule; the per-pass trace is the state at each pass's end."""
    for n in (2, 3, 7, 12):
        for seed in range(6):
            prompt, answer = draw("clrs_bubble_sort", n, seed, every_compare=True)
            trace, output = split(answer, n)
            steps = [(i, j) for i in range(n - 1) for j in range(n - 1, i, -1)]
            states = [prompt] + trace + [output]
            assert len(states) == len(steps) + 1 and output == sorted(prompt)
            for (_, j), before, after in zip(steps, states[:-1], states[1:], strict=True):
                swapped = list(before)
                if before[j] < before[j - 1]:
                    swapped[j - 1], swapped[j] = before[j], before[j - 1]
                assert after == swapped
            ends = [k + 1 for k, (i, j) in enumerate(steps) if j == i + 1]  # the state after each pass
            passes, last = split(draw("clrs_bubble_sort", n, seed)[1], n)
            assert passes + [last] == [states[k] for k in ends]
            assert all(state[: i + 1] == sorted(prompt)[: i + 1] for i, state in enumerate(passes))


def test_bfs_rounds_are_the_distance_layers():
    """Round k reaches exactly the nodes at distance k from the source (scipy's BFS distances), each with a
    predecessor at distance k - 1 (the first in node order, CLRS's rule); the trace stops at the eccentricity."""
    rounds = set()
    for n in (1, 2, 5, 10, 16):
        for seed in range(10):
            prompt, answer = draw("clrs_bfs", n, seed)
            adj, labels = graph(prompt, n)
            assert (adj == adj.T).all() and prompt[1] == PLUS
            source = labels.index(prompt[0])
            dist = shortest_path(adj, directed=False, unweighted=True, indices=source)
            depth = int(dist[np.isfinite(dist)].max())
            trace, output = split(answer, n)
            states = trace + [output] if depth else [output]
            assert len(states) == max(depth, 1) and len(answer) == max(n - 2, 0) * n + n + 1
            rounds.add(depth)
            for k, state in enumerate(states, start=1):
                pi = [labels.index(t) for t in state]
                for v in range(n):
                    if v == source or not dist[v] <= min(k, depth):
                        assert pi[v] == v
                    else:
                        parents = [u for u in range(n) if adj[u, v] and dist[u] == dist[v] - 1]
                        assert pi[v] == parents[0]
    assert {0, 1, 2} <= rounds  # isolated sources, one and several rounds


def dfs_snapshots(adj):
    """pi at CLRS's DFS hint points from networkx's depth-first events (roots and neighbours in node order)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(len(adj)))
    g.add_edges_from((u, v) for u in range(len(adj)) for v in range(len(adj)) if adj[u, v])
    pi, snapshots = list(range(len(adj))), []
    for u, v, kind in nx.dfs_labeled_edges(g):
        if kind == "forward":
            pi[v] = u  # a root is its own
            snapshots += [list(pi)] * 2  # the tree edge (a root's start), the discovery
        elif kind == "reverse":
            snapshots.append(list(pi))  # v finishes
    return snapshots


def test_dfs_follows_depth_first_events():
    for n in (1, 2, 4, 9, 14):
        for seed in range(8):
            prompt, answer = draw("clrs_dfs", n, seed)
            adj, labels = graph(prompt, n)
            expected = dfs_snapshots(adj)
            assert len(expected) == 3 * n and len(answer) == (3 * n - 1) * n + 1
            trace, output = split(answer, n)
            assert [[labels.index(t) for t in s] for s in trace + [output]] == expected[1:]


@pytest.mark.parametrize("task", CLRS)
def test_without_hints_the_answer_is_the_output(task):
    for n in (1, 4, 11):
        for seed in range(3):
            prompt, answer = draw(task, n, seed, hints=False)
            with_trace = draw(task, n, seed)
            assert prompt == with_trace[0] and len(answer) == n
            assert answer == split(with_trace[1], n)[1] and BAR not in answer


@pytest.mark.parametrize("task", CLRS)
def test_the_answer_is_a_function_of_the_prompt(task):
    """Small lengths and alphabets, so prompts repeat: one answer a prompt (the reference's check in test_tasks.py
    recomputes it; this one needs none)."""
    options = {"nodes": 3} if task in ("clrs_bfs", "clrs_dfs") else {}
    seen = {}
    for seed in range(300):
        prompt, answer = TASKS[task].generate(np.random.default_rng(seed), 2, 3, T, **options)
        assert seen.setdefault(tuple(prompt), answer) == answer
    assert len(seen) < 300  # prompts did repeat


def test_vocabulary_and_labels():
    """Labels: n distinct among `nodes` tokens after BAR, fresh each draw (every one seen), or CLRS's indices."""
    used = {t for seed in range(40) for t in draw("clrs_bfs", 5, seed, nodes=20)[0][-5:]}
    assert used == set(range(LABEL0, LABEL0 + 20))
    assert draw("clrs_dfs", 6, 0, random_labels=False)[0][-6:] == list(range(LABEL0, LABEL0 + 6))
    base = vocab_size(S, 4)
    cases = [(task, extra, hints) for task, extra in (("clrs_insertion_sort", {}), ("clrs_bfs", {"nodes": 10}))
             for hints in (True, False)]  # fmt: skip
    sizes = {(task, hints): SyntheticDataModule(task=task, task_options={"hints": hints, **extra}, num_symbols=S,
                                                train_max_len=4, eval_max_len=6).vocab_size
             for task, extra, hints in cases}  # fmt: skip
    assert sizes == {("clrs_insertion_sort", True): base + 1, ("clrs_insertion_sort", False): base,
                     ("clrs_bfs", True): base + 11, ("clrs_bfs", False): base + 11}  # fmt: skip


@pytest.mark.parametrize(
    "task, options, kwargs, message",
    [
        ("clrs_bfs", {"nodes": 10}, {"eval_max_len": 12}, "task 'clrs_bfs' at length 12 needs nodes >= 12"),
        (
            "clrs_dfs",
            {"nodes": 10},
            {"train_max_len": 11, "eval_max_len": 11},
            "task 'clrs_dfs' at length 11 needs nodes >= 11",
        ),
        ("clrs_dfs", {"p": 1.5}, {}, r"task 'clrs_dfs' needs p in \[0.0, 1.0\], got 1.5"),
        ("clrs_bfs", {"nodes": 0}, {}, "needs nodes >= 1"),
        ("clrs_bfs", {}, {"num_symbols": 1}, "needs num_symbols >= 2"),
        ("clrs_bubble_sort", {"every_pass": True}, {}, "has no option 'every_pass'; its options: hints, every_compare"),
        ("clrs_insertion_sort", {"hints": "yes"}, {}, "option 'hints'"),
    ],
)
def test_bad_lengths_and_options_are_one_line(task, options, kwargs, message):
    args = {"num_symbols": S, "train_max_len": 4, "eval_max_len": 8} | kwargs
    with pytest.raises(ConfigError, match=message) as err:
        SyntheticDataModule(task=task, task_options=options, **args)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("task", CLRS)
def test_a_tiny_model_learns_each_task(task):
    """40 Adam steps of a one-layer model: the training loss on the answers falls below 0.6 of its start (the
    answers' repeated states are learnable from the prompt and the trace so far)."""
    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel

    options = {"nodes": 8} if task in ("clrs_bfs", "clrs_dfs") else {}
    dm = SyntheticDataModule(task=task, task_options=options, num_symbols=6, min_len=2, train_max_len=4,
                             eval_max_len=4, train_size=320, batch_size=32, seed=0)  # fmt: skip
    dm.setup("fit")
    torch.manual_seed(0)
    arch = ArchConfig(encoding="rope", dim=32, depth=1, num_heads=2, vocab_size=dm.vocab_size,
                      max_length=dm.max_seq_len)  # fmt: skip
    model = SyntheticTaskModel(arch)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        for batch in dm.train_dataloader():
            loss = model.loss(model(batch), batch["targets"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:2]), losses  # measured 0.27-0.43
