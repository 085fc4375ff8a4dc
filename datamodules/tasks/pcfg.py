"""PCFG SET (Hupkes et al. 2020, "Compositionality Decomposed: How do Neural Networks Generalise?"), its
productivity split's notion of length, as Kazemnejad et al. 2023 use it (McGill-NLP/length-generalization,
make_pcfg_dataset.py: i-machine-think/am-i-compositional's productivity split, length = the number of functions;
train <= 8, test 9-35), generated procedurally.

The functions (MathijsMul/pcfg-set, tasks/default.py): unary copy, reverse, shift (first to the end), echo (repeat
the last), swap_first_last, repeat (the whole sequence twice); binary append, prepend, remove_first (keep the
second), remove_second (keep the first). An input is a function call in prefix notation without brackets, binary
arguments split by a comma, e.g. `append swap_first_last F G H , repeat A B` -> `H G F A B A B`.

The trees come from their PCFG (generate.py: a function is unary with p 0.75; an argument is a nested function with
p 0.25, else a string of 2-5 letters drawn uniformly), conditioned on exactly n functions (deviations: theirs
draws unconditioned trees, re-weights the productions to English-like depths and lengths with EM, and never repeats
a string argument). Outputs are capped at `max_output` letters (default 32; theirs are not capped, 7 at the
median, 200 at most in training): a node's function is drawn uniformly among the unary (binary) functions whose
output stays within the cap, so `repeat`, `echo`, `append` and `prepend` thin out where outputs would be longer.
The answer is the output, a terminator and unscored padding to max_output + 1. Letters are symbols 0 to
`alphabet` - 1 (default 8; theirs 520), the terminator the next symbol; function words and the comma are 11 tokens
after the shared vocabulary.
"""

from functools import cache

import numpy as np

from datamodules.tasks.tokens import IGNORE_INDEX, SYMBOL0, need_range, need_symbols, tokens, vocab_size

UNARY = {
    "copy": lambda s: s,
    "reverse": lambda s: s[::-1],
    "shift": lambda s: s[1:] + s[:1],
    "echo": lambda s: s + s[-1:],
    "swap_first_last": lambda s: s[-1:] + s[1:-1] + s[:1],
    "repeat": lambda s: s + s,
}
BINARY = {
    "append": lambda a, b: a + b,
    "prepend": lambda a, b: b + a,
    "remove_first": lambda a, b: b,
    "remove_second": lambda a, b: a,
}
WORDS = (*UNARY, *BINARY, ",")  # the token after the shared vocabulary + i is WORDS[i]
STRING_LENGTHS = (2, 3, 4, 5)


@cache
def root_probabilities(k: int) -> np.ndarray:
    """Cumulative probabilities of a k-function tree's root: [unary, binary with j functions left, j = 0..k-1].

    Their PCFG in integer weights: with a(0) = 3 (a string argument) and a(j) = g(j) (a j-function argument),
    g(k) = 12 a(k - 1) + sum_j a(j) a(k - 1 - j) is 4^(3k) times the probability of a k-function tree (a node is
    unary 3/4, binary 1/4; an argument a string 3/4, a function 1/4), exact in Python's integers."""
    a = [3] + [_weight(j) for j in range(1, k)]
    weights = [12 * a[k - 1]] + [a[j] * a[k - 1 - j] for j in range(k)]
    total = sum(weights)
    return np.cumsum([w / total for w in weights])


@cache
def _weight(k: int) -> int:
    a = [3] + [_weight(j) for j in range(1, k)]
    return 12 * a[k - 1] + sum(a[j] * a[k - 1 - j] for j in range(k))


def _tree(rng, k: int, alphabet: int, cap: int) -> tuple[list, list[int]]:
    """(written prefix words and letters, output letters) of a random tree of exactly k functions (k = 0: a
    string argument)."""
    if k == 0:
        letters = rng.integers(0, alphabet, size=int(rng.choice(STRING_LENGTHS))).tolist()
        return letters, letters
    table = root_probabilities(k)
    choice = min(int(np.searchsorted(table, rng.random(), side="right")), len(table) - 1)
    if choice == 0:
        written, value = _tree(rng, k - 1, alphabet, cap)
        allowed = [name for name, f in UNARY.items() if len(f(value)) <= cap]
        name = allowed[int(rng.integers(0, len(allowed)))]
        return [name, *written], UNARY[name](value)
    (w1, v1), (w2, v2) = _tree(rng, choice - 1, alphabet, cap), _tree(rng, k - choice, alphabet, cap)
    allowed = [name for name, f in BINARY.items() if len(f(v1, v2)) <= cap]
    name = allowed[int(rng.integers(0, len(allowed)))]
    return [name, *w1, ",", *w2], BINARY[name](v1, v2)


def _check(num_symbols: int, alphabet: int, max_output: int) -> None:
    need_range("pcfg", "alphabet", alphabet, 2)
    need_symbols("pcfg", alphabet + 1, num_symbols, f"alphabet={alphabet} letters and a terminator")
    need_range("pcfg", "max_output", max_output, max(STRING_LENGTHS))


def _answer(output: list[int], alphabet: int, max_output: int) -> list[int]:
    return tokens(output) + [SYMBOL0 + alphabet] + [IGNORE_INDEX] * (max_output - len(output))


def pcfg_task(rng, n, num_symbols, train_max_len, *, alphabet: int = 8, max_output: int = 32):
    """prompt = a PCFG SET input of n functions, answer = its output, the terminator, unscored padding (see the
    module docstring)."""
    _check(num_symbols, alphabet, max_output)
    written, output = _tree(rng, n, alphabet, max_output)
    first = vocab_size(num_symbols, train_max_len)
    prompt = [first + WORDS.index(w) if isinstance(w, str) else SYMBOL0 + w for w in written]
    return prompt, _answer(output, alphabet, max_output)


def pcfg_reference(prompt, n, num_symbols, train_max_len, *, alphabet: int = 8, max_output: int = 32):
    first = vocab_size(num_symbols, train_max_len)
    items = [WORDS[t - first] if t >= first else t - SYMBOL0 for t in prompt]
    pos = 0

    def argument() -> list[int]:  # recursive descent: a function and its arguments, or letters up to a comma
        nonlocal pos
        item = items[pos]
        if isinstance(item, int):
            end = next((i for i in range(pos, len(items)) if items[i] == ","), len(items))
            letters, pos = items[pos:end], end
            return letters
        pos += 1
        a = argument()
        if item in ("append", "prepend", "remove_first", "remove_second"):
            assert items[pos] == ","
            pos += 1
            b = argument()
            return {"append": a + b, "prepend": b + a, "remove_first": b, "remove_second": a}[item]
        return {"copy": a, "reverse": list(reversed(a)), "shift": a[1:] + [a[0]], "echo": a + [a[-1]],
                "swap_first_last": [a[-1], *a[1:-1], a[0]], "repeat": a * 2}[item]  # fmt: skip

    output = argument()
    assert pos == len(items)
    return _answer(output, alphabet, max_output)


def pcfg_limits(n, num_symbols, train_max_len, *, alphabet: int = 8, max_output: int = 32) -> dict:
    """Longest prompt (n binary functions: n words, n commas, n + 1 strings of 5 letters), the answer (max_output
    + 1) and the words' tokens after the shared vocabulary."""
    return {"prompt": 7 * n + 5, "answer": max_output + 1, "vocab": vocab_size(num_symbols, train_max_len) + len(WORDS)}
