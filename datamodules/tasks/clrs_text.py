"""A CLRS-Text subset (Markeeva et al. 2024, "The CLRS-Text Algorithmic Reasoning Language Benchmark";
google-deepmind/clrs, `clrs/_src/clrs_text/`): insertion sort, bubble sort, BFS and DFS with their traces, in tokens.

CLRS-Text writes a CLRS sample as text: the algorithm's inputs, with `use_hints` its initial hint
(`initial_trace: ...`), then the answer `h_1, ..., h_(K-1) | output`, where h_0 .. h_K are the algorithm's hint
states of the output's field (`pred_h` of the sorts, `pi_h` of BFS / DFS) and h_K, identical to the output, is written
once as the output. Here, with `hints: true` (default), the answer is the same content: the states h_1 .. h_(K-1),
each n tokens, then BAR (its " | "), then the output, n tokens (h_0 alone at n = 1, as CLRS-Text's " | h_0");
`hints: false` is CLRS-Text without hints, the output alone. Length n = the array size (sorts) or the number of nodes
(graphs), CLRS's `length`.

- `clrs_insertion_sort`: prompt = the keys; each state is the array after inserting A[j], j = 1 .. n - 1 (CLRS's
  `pred_h` written, as CLRS-Text writes it, as the keys in that order); answer length (n - 1) * n + 1 (2 at n = 1).
- `clrs_bubble_sort`: CLRS's bubble sort (pass i bubbles the smallest of A[i ..] down to i, comparing j = n - 1 .. i
  + 1); each state is the array after a pass, n - 1 of them (`every_compare: true`: after every comparison, as CLRS,
  n (n - 1) / 2 of them: about n^3 / 2 tokens).
- `clrs_bfs`: prompt = source PLUS adjacency matrix (n rows of n bits, row-major) PLUS the node list; the states are
  CLRS's `pi_h` (each node's predecessor, a node its own before it is reached and for the source) after each round
  of its parallel BFS (a round reaches every unreached neighbour of the reached nodes, pi[j] = the first such
  neighbour in node order) until a round reaches nothing; so K = the source's eccentricity in its component, and the
  answer is padded with unscored entries to its longest, (n - 1) * n + 1 (2 at n = 1). Graph: CLRS's sampler,
  Erdos-Renyi with `p` (default 0.5) then symmetrised by A * A^T (edges with probability p^2, self-loops p), source
  uniform.
- `clrs_dfs`: prompt = adjacency matrix PLUS the node list; CLRS's DFS (roots in node order, neighbours scanned in
  node order, directed Erdos-Renyi graph with `p`, self-loops kept); a state is `pi_h` at each of CLRS's hint
  points: a root's start, every discovery, every tree edge, every finish, 3n in all, so (3n - 1) * n + 1 answer
  tokens (the states between tree edges repeat, as in CLRS-Text).

Tokens: keys are symbols 0 .. num_symbols - 1 and adjacency bits symbols 0 / 1; BAR and the node labels are tokens
after the shared vocabulary (BAR first, then `nodes` labels, default 128; n above `nodes` is a one-line error).
Node k (row k of the matrix) is named by the k-th entry of the prompt's node list, which is also CLRS-Text's
initial trace of BFS / DFS (pi_0 = every node its own predecessor); a node in a state is written by its label.

Deviations from CLRS-Text, where the tokenised format does not allow its text:
- keys are `num_symbols` integer symbols (ties possible), not U[0, 1) floats written with 3 decimals; sorted
  stably, as CLRS's comparisons are.
- node names: `random_labels: true` (default) names the nodes by n distinct labels drawn among `nodes`, a fresh
  draw per example, so every label token is trained even when evaluation lengths exceed training ones (CLRS-Text's
  node indices 0 .. n-1 in decimal would give the longer graphs label tokens never seen in training);
  `random_labels: false` uses CLRS's indices, node k = label k.
- no punctuation but PLUS between prompt fields and BAR before the output: no brackets, no ", " between rows or
  states (every row and state is n tokens), no field names or algorithm name (one task per registry entry).
- the prompt of the sorts omits CLRS-Text's `initial_trace`, a copy of the keys; the graphs' prompts keep it (the
  node list) also with `hints: false`, where CLRS-Text has none (the labels must be listed).
- CLRS-Text samples lengths 4 .. 31 (BFS) / 4 .. 23 (DFS) / 4 .. 10 (bubble sort) for training; here any n >= 1.
"""

import numpy as np

from datamodules.tasks.tokens import IGNORE_INDEX, PLUS, SYMBOL0, need_range, need_symbols, vocab_size
from pe_core.errors import ConfigError


def bar_token(num_symbols: int, train_max_len: int) -> int:
    """The token between the trace and the output (CLRS-Text's " | "): the first after the shared vocabulary."""
    return vocab_size(num_symbols, train_max_len)


def label_token(k: int, num_symbols: int, train_max_len: int) -> int:
    """The token of node label k (after BAR)."""
    return bar_token(num_symbols, train_max_len) + 1 + k


def _answer(states: list[list[int]], hints: bool, bar: int, longest: int | None = None) -> list[int]:
    """CLRS-Text's answer from the hint states h_0 .. h_K (tokens): h_1 .. h_(K-1) BAR h_K, or h_K alone without
    hints; padded with unscored entries to `longest` tokens."""
    if not hints:
        return list(states[-1])
    answer = [t for state in states[1:-1] for t in state] + [bar] + list(states[-1])
    return answer + [IGNORE_INDEX] * ((longest or len(answer)) - len(answer))


def _trace_length(n: int, states: int) -> int:
    """Answer tokens of a trace with `states` hint states of n tokens (h_1 .. h_(K-1), BAR, h_K)."""
    return max(states - 2, 0) * n + 1 + n


# ---------------------------------------------------------------------------------------------------------
# Sorting


def _keys(rng, n: int, num_symbols: int) -> list[int]:
    return rng.integers(0, num_symbols, size=n).tolist()


def insertion_sort_states(keys: list[int]) -> list[list[int]]:
    """The array before and after each insertion of A[j], j = 1 .. n - 1 (CLRS's `pred_h` probes, as values)."""
    a, states = list(keys), [list(keys)]
    for j in range(1, len(a)):
        key, i = a[j], j - 1
        while i >= 0 and a[i] > key:
            a[i + 1] = a[i]
            i -= 1
        a[i + 1] = key
        states.append(list(a))
    return states


def bubble_sort_states(keys: list[int], every_compare: bool) -> list[list[int]]:
    """CLRS's bubble sort: the array before, then after each pass i (`every_compare`: after each comparison)."""
    a, states = list(keys), [list(keys)]
    for i in range(len(a) - 1):
        for j in range(len(a) - 1, i, -1):
            if a[j] < a[j - 1]:
                a[j], a[j - 1] = a[j - 1], a[j]
            if every_compare:
                states.append(list(a))
        if not every_compare:
            states.append(list(a))
    return states


def _sort_example(states_fn, rng, n, num_symbols, train_max_len, hints):
    keys = _keys(rng, n, num_symbols)
    return [SYMBOL0 + k for k in keys], _sort_answer(states_fn(keys), num_symbols, train_max_len, hints)


def _sort_answer(states, num_symbols, train_max_len, hints):
    tokens = [[SYMBOL0 + k for k in state] for state in states]
    return _answer(tokens, hints, bar_token(num_symbols, train_max_len))


def _sort_limits(num_symbols, train_max_len, hints) -> dict:
    return {"vocab": bar_token(num_symbols, train_max_len) + 1} if hints else {}


def clrs_insertion_sort(rng, n, num_symbols, train_max_len, *, hints: bool = True):
    """prompt = n uniform keys; answer = the array after each insertion, BAR, the sorted array (`hints: false`: the
    sorted array). See the module docstring."""
    return _sort_example(insertion_sort_states, rng, n, num_symbols, train_max_len, hints)


def clrs_insertion_sort_reference(prompt, n, num_symbols, train_max_len, *, hints: bool = True):
    keys = [t - SYMBOL0 for t in prompt]
    return _sort_answer(insertion_sort_states(keys), num_symbols, train_max_len, hints)


def clrs_insertion_sort_limits(n, num_symbols, train_max_len, *, hints: bool = True) -> dict:
    """BAR after the shared vocabulary (the lengths are fixed by n)."""
    return _sort_limits(num_symbols, train_max_len, hints)


def clrs_bubble_sort(rng, n, num_symbols, train_max_len, *, hints: bool = True, every_compare: bool = False):
    """prompt = n uniform keys; answer = the array after each pass (`every_compare`: each comparison, CLRS's
    probes), BAR, the sorted array (`hints: false`: the sorted array). See the module docstring."""
    return _sort_example(lambda k: bubble_sort_states(k, every_compare), rng, n, num_symbols, train_max_len, hints)


def clrs_bubble_sort_reference(prompt, n, num_symbols, train_max_len, *, hints: bool = True,
                               every_compare: bool = False):  # fmt: skip
    keys = [t - SYMBOL0 for t in prompt]
    return _sort_answer(bubble_sort_states(keys, every_compare), num_symbols, train_max_len, hints)


def clrs_bubble_sort_limits(n, num_symbols, train_max_len, *, hints: bool = True, every_compare: bool = False) -> dict:
    """BAR after the shared vocabulary (the lengths are fixed by n)."""
    return _sort_limits(num_symbols, train_max_len, hints)


# ---------------------------------------------------------------------------------------------------------
# Graphs


def _check_graph(task: str, n: int, num_symbols: int, p: float, nodes: int) -> None:
    need_range(task, "p", p, 0.0, 1.0)
    need_range(task, "nodes", nodes, 1)
    need_symbols(task, 2, num_symbols, "adjacency bits 0 and 1")
    if n > nodes:
        raise ConfigError(f"task {task!r} at length {n} needs nodes >= {n} (distinct node labels), got {nodes}")


def _graph(rng, n: int, p: float, directed: bool, nodes: int, random_labels: bool):
    """(adjacency matrix as a list of rows, node labels): CLRS's `_random_er_graph` (undirected: A * A^T)."""
    a = rng.binomial(1, p, size=(n, n))
    if not directed:
        a = a * a.T
    labels = rng.choice(nodes, size=n, replace=False) if random_labels else np.arange(n)
    return a.tolist(), labels.tolist()


def bfs_states(adj: list[list[int]], source: int) -> list[list[int]]:
    """CLRS's BFS `pi_h` probes: pi before each round of its parallel BFS, until a round reaches nothing (pi[j] =
    j for the source and unreached nodes; a newly reached j gets the first reached neighbour in node order)."""
    n = len(adj)
    pi, reached = list(range(n)), {source}
    states = [list(pi)]
    while True:
        new = [j for j in range(n) if j not in reached and any(adj[i][j] for i in reached)]
        if not new:
            return states
        for j in new:
            pi[j] = min(i for i in reached if adj[i][j])
        reached |= set(new)
        states.append(list(pi))


def dfs_states(adj: list[list[int]]) -> list[list[int]]:
    """CLRS's DFS `pi_h` probes: pi at a root's start, at each discovery, tree edge and finish (3n in all); roots
    and neighbours in node order."""
    n = len(adj)
    pi, seen, states = list(range(n)), [False] * n, []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        states += [list(pi), list(pi)]  # the root's start, its discovery
        stack = [root]
        while stack:
            u = stack[-1]
            v = next((v for v in range(n) if adj[u][v] and not seen[v]), None)
            if v is None:
                stack.pop()
                states.append(list(pi))  # u finishes
                continue
            pi[v], seen[v] = u, True
            states += [list(pi), list(pi)]  # the tree edge u -> v, v's discovery
            stack.append(v)
    return states


def _graph_answer(states, labels, num_symbols, train_max_len, hints, most_states):
    """The answer from pi states (node indices) written by label, padded to the longest of `most_states`."""
    tokens = [[label_token(labels[k], num_symbols, train_max_len) for k in state] for state in states]
    longest = _trace_length(len(labels), most_states)
    return _answer(tokens, hints, bar_token(num_symbols, train_max_len), longest)


def _read_graph(prompt: list[int], n: int, num_symbols: int, train_max_len: int):
    """(adjacency rows, labels) from `... adjacency bits PLUS node labels` (the last n * n + 1 + n tokens)."""
    bits = prompt[-(n * n + 1 + n) : -(n + 1)]
    labels = [t - label_token(0, num_symbols, train_max_len) for t in prompt[-n:]]
    return [[t - SYMBOL0 for t in bits[i * n : (i + 1) * n]] for i in range(n)], labels


def _bits(adj: list[list[int]]) -> list[int]:
    return [SYMBOL0 + b for row in adj for b in row]


def _graph_limits(num_symbols, train_max_len, nodes) -> dict:
    return {"vocab": label_token(nodes, num_symbols, train_max_len)}


def clrs_bfs(rng, n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5, nodes: int = 128,
             random_labels: bool = True):  # fmt: skip
    """prompt = source PLUS adjacency matrix PLUS node list; answer = pi after each BFS round, BAR, the BFS tree's
    pi, then unscored padding (`hints: false`: pi alone). See the module docstring."""
    _check_graph("clrs_bfs", n, num_symbols, p, nodes)
    adj, labels = _graph(rng, n, p, False, nodes, random_labels)
    source = int(rng.integers(0, n))
    lab = [label_token(k, num_symbols, train_max_len) for k in labels]
    prompt = [lab[source], PLUS] + _bits(adj) + [PLUS] + lab
    return prompt, _graph_answer(bfs_states(adj, source), labels, num_symbols, train_max_len, hints, n)


def clrs_bfs_reference(prompt, n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5,
                       nodes: int = 128, random_labels: bool = True):  # fmt: skip
    adj, labels = _read_graph(prompt, n, num_symbols, train_max_len)
    source = labels.index(prompt[0] - label_token(0, num_symbols, train_max_len))
    return _graph_answer(bfs_states(adj, source), labels, num_symbols, train_max_len, hints, n)


def clrs_bfs_limits(n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5, nodes: int = 128,
                    random_labels: bool = True) -> dict:  # fmt: skip
    """BAR and the `nodes` labels after the shared vocabulary (the lengths are fixed by n)."""
    return _graph_limits(num_symbols, train_max_len, nodes)


def clrs_dfs(rng, n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5, nodes: int = 128,
             random_labels: bool = True):  # fmt: skip
    """prompt = adjacency matrix PLUS node list; answer = pi at each of DFS's 3n hint points but the last, BAR, the
    DFS forest's pi (`hints: false`: pi alone). See the module docstring."""
    _check_graph("clrs_dfs", n, num_symbols, p, nodes)
    adj, labels = _graph(rng, n, p, True, nodes, random_labels)
    prompt = _bits(adj) + [PLUS] + [label_token(k, num_symbols, train_max_len) for k in labels]
    return prompt, _graph_answer(dfs_states(adj), labels, num_symbols, train_max_len, hints, 3 * n)


def clrs_dfs_reference(prompt, n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5,
                       nodes: int = 128, random_labels: bool = True):  # fmt: skip
    adj, labels = _read_graph(prompt, n, num_symbols, train_max_len)
    return _graph_answer(dfs_states(adj), labels, num_symbols, train_max_len, hints, 3 * n)


def clrs_dfs_limits(n, num_symbols, train_max_len, *, hints: bool = True, p: float = 0.5, nodes: int = 128,
                    random_labels: bool = True) -> dict:  # fmt: skip
    """BAR and the `nodes` labels after the shared vocabulary (the lengths are fixed by n)."""
    return _graph_limits(num_symbols, train_max_len, nodes)
