"""State tracking: the S5 and A5 word problems (Merrill, Petty & Sabharwal 2024, "The Illusion of State in
State-Space Models"; the tasks of Liu et al. 2023, "Transformers Learn Shortcuts to Automata").

A word is n group elements; its answer is their running product. S5 is the 120 permutations of 5 items, A5 its 60
even ones; both word problems are NC1-complete, so a fixed-depth transformer (or diagonal SSM) is not expected to
solve them at every length, and PaTH-style encodings claim to help here.

Each element is one token after the shared vocabulary (element e of the group, in the lexicographic order of
`itertools.permutations(range(5))` restricted to the group, is token `vocab_size(...) + e`); the answer uses the same
tokens. Product convention: the state after g_1 .. g_i is p_i = p_(i-1) o g_i, as functions (p_i[x] =
p_(i-1)[g_i[x]]; p_0 the identity), so the final answer is g_1 o g_2 o ... o g_n.

Which answer: `prefixes: false` (default) scores the final product only (one token); `prefixes: true` scores every
prefix product p_1 .. p_n (n tokens), the tagging protocol of Liu et al. and Merrill et al. The default is the
final product because in this harness a decoder is teacher-forced on `prompt SEP answer`: with every prefix in the
answer, p_(i-1) is the decoder's input when it predicts p_i, so p_i = p_(i-1) o g_i is one lookup of g_i (n + 1
tokens back) and one table composition, no state to track. Use `prefixes: true` with `--model.causal=false` (an
encoder predicts all n MASK slots at once, nothing leaks), the common protocol. Deviation: the harness scores
exact match of the whole answer (and token accuracy), where the papers report per-position accuracy.
"""

from itertools import permutations

from datamodules.tasks.tokens import vocab_size


def _is_even(p: tuple[int, ...]) -> bool:
    """A permutation is even when its number of inversions is."""
    return sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p))) % 2 == 0


S5 = tuple(permutations(range(5)))  # the 120 elements, lexicographic; S5[0] is the identity
A5 = tuple(p for p in S5 if _is_even(p))  # the 60 even ones
GROUPS = {"S5": S5, "A5": A5}
_INDEX = {name: {p: i for i, p in enumerate(group)} for name, group in GROUPS.items()}


def compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """a o b: apply b first, then a (a[b[x]])."""
    return tuple(a[x] for x in b)


def _word_problem(group: str, rng, n: int, num_symbols: int, train_max_len: int, prefixes: bool):
    elements = GROUPS[group]
    base = vocab_size(num_symbols, train_max_len)
    word = rng.integers(0, len(elements), size=n).tolist()
    state, states = elements[0], []
    for e in word:
        state = compose(state, elements[e])
        states.append(_INDEX[group][state])
    answer = states if prefixes else states[-1:]
    return [base + e for e in word], [base + e for e in answer]


def _word_problem_reference(group: str, prompt, num_symbols: int, train_max_len: int, prefixes: bool):
    elements = GROUPS[group]
    base = vocab_size(num_symbols, train_max_len)
    state, states = tuple(range(5)), []
    for token in prompt:
        state = compose(state, elements[token - base])
        states.append(base + _INDEX[group][state])
    return states if prefixes else states[-1:]


def _word_problem_limits(group: str, num_symbols: int, train_max_len: int) -> dict:
    return {"vocab": vocab_size(num_symbols, train_max_len) + len(GROUPS[group])}


def word_problem_s5(rng, n, num_symbols, train_max_len, *, prefixes: bool = False):
    """prompt = n uniform elements of S5 (one token each), answer = their product (`prefixes`: every prefix
    product). Length n = elements. See the module docstring for the convention and the choice of answer."""
    return _word_problem("S5", rng, n, num_symbols, train_max_len, prefixes)


def word_problem_s5_reference(prompt, n, num_symbols, train_max_len, *, prefixes: bool = False):
    return _word_problem_reference("S5", prompt, num_symbols, train_max_len, prefixes)


def word_problem_s5_limits(n, num_symbols, train_max_len, *, prefixes: bool = False) -> dict:
    """The 120 element tokens after the shared vocabulary (the lengths are fixed by n)."""
    return _word_problem_limits("S5", num_symbols, train_max_len)


def word_problem_a5(rng, n, num_symbols, train_max_len, *, prefixes: bool = False):
    """prompt = n uniform elements of A5 (the even permutations of 5 items), answer = their product (`prefixes`:
    every prefix product). Length n = elements."""
    return _word_problem("A5", rng, n, num_symbols, train_max_len, prefixes)


def word_problem_a5_reference(prompt, n, num_symbols, train_max_len, *, prefixes: bool = False):
    return _word_problem_reference("A5", prompt, num_symbols, train_max_len, prefixes)


def word_problem_a5_limits(n, num_symbols, train_max_len, *, prefixes: bool = False) -> dict:
    """The 60 element tokens after the shared vocabulary (the lengths are fixed by n)."""
    return _word_problem_limits("A5", num_symbols, train_max_len)
