"""Deterministic context-free tasks of the Chomsky-hierarchy suite (Delétang et al. 2023), as in
google-deepmind/neural_networks_chomsky_hierarchy tasks/dcf. Symbols are the paper's integer inputs and outputs
(symbol k = token SYMBOL0 + k); each generator has a reference that recomputes the answer another way.
"""

from datamodules.tasks import expressions as E
from datamodules.tasks.tokens import IGNORE_INDEX, need_range, need_symbols, symbols, tokens

POP, PUSH0, PUSH1, END = 2, 3, 4, 2  # stack actions (inputs) and the termination class (output)


def stack_manipulation(rng, n, num_symbols, train_max_len):
    """A bottom-to-top binary stack (length uniform in [1, n - 1]) then POP / PUSH 0 / PUSH 1 actions (2, 3, 4,
    uniform); answer = the final stack top-to-bottom, then the termination class 2. POP on an empty stack is
    ignored. The paper pads the output with zeros to n + 1 and masks them out of the accuracy; here the padding
    is unscored (IGNORE_INDEX): an encoder still gets n + 1 answer slots, a decoder stops at the terminator."""
    need_symbols("stack_manipulation", 5, num_symbols, "2 stack values and 3 actions")
    if n == 1:
        value = int(rng.integers(0, 2))
        return tokens([value]), tokens([value, END])
    stack_length = int(rng.integers(1, n))
    stack = rng.integers(0, 2, size=stack_length).tolist()
    actions = rng.integers(2, 5, size=n - stack_length).tolist()
    final = list(stack)
    for a in actions:
        if a == POP:
            final = final[:-1]
        else:
            final.append(a - PUSH0)
    answer = final[::-1] + [END]
    return tokens(stack + actions), tokens(answer + [IGNORE_INDEX] * (n + 1 - len(answer)))


def stack_manipulation_reference(prompt, n, num_symbols, train_max_len):
    s = symbols(prompt)
    if n == 1:
        return tokens([s[0], END])
    split = next(i for i, x in enumerate(s) if x >= 2) if any(x >= 2 for x in s) else n
    text = "".join(map(str, s[:split]))
    for a in s[split:]:
        text = text[:-1] if a == POP else text + str(a - PUSH0)
    answer = [int(c) for c in reversed(text)] + [END]
    return tokens(answer + [IGNORE_INDEX] * (n + 1 - len(answer)))


def reverse_string(rng, n, num_symbols, train_max_len, *, alphabet: int = 2):
    """A string over `alphabet` symbols (2 in the paper); answer = the string reversed."""
    need_range("reverse_string", "alphabet", alphabet, 2)
    need_symbols("reverse_string", alphabet, num_symbols, f"alphabet={alphabet}")
    s = rng.integers(0, alphabet, size=n).tolist()
    return tokens(s), tokens(s[::-1])


def reverse_string_reference(prompt, n, num_symbols, train_max_len, *, alphabet: int = 2):
    return [prompt[-1 - i] for i in range(n)]


def _brackets_alphabet(modulus: int) -> dict:
    # the paper's alphabet_to_int: numbers 0..m-1, then + - * ( ) (x = m+5 and '=' m+6 are not used here)
    return {E.PLUS: modulus, E.MINUS: modulus + 1, E.TIMES: modulus + 2, E.OPEN: modulus + 3, E.CLOSE: modulus + 4}


def modular_arithmetic_brackets(rng, n, num_symbols, train_max_len, *, modulus: int = 5, mult: bool = False):
    """A random bracketed expression of exactly n symbols over numbers in [0, modulus) with + and - (and *
    with mult=True; the paper uses mult=False), answer = its value mod modulus."""
    need_range("modular_arithmetic_brackets", "modulus", modulus, 2)
    need_symbols("modular_arithmetic_brackets", modulus + 5, num_symbols, f"{modulus} numbers, + - * ( )")
    items, value = E.random_expression(rng, n, modulus, mult)
    alphabet = _brackets_alphabet(modulus)
    return tokens(alphabet.get(x, x) for x in items), tokens([value])


def modular_arithmetic_brackets_reference(prompt, n, num_symbols, train_max_len, *, modulus=5, mult=False):
    decode = {v: k for k, v in _brackets_alphabet(modulus).items()}
    return tokens([E.evaluate([decode.get(s, s) for s in symbols(prompt)], modulus)])


X, EQUALS = "x", "="


def _equation_alphabet(modulus: int) -> dict:
    # solve_equation's own alphabet_to_int in the paper: numbers, then + - ( ) x =
    return {E.PLUS: modulus, E.MINUS: modulus + 1, E.OPEN: modulus + 2, E.CLOSE: modulus + 3,
            X: modulus + 4, EQUALS: modulus + 5}  # fmt: skip


def solve_equation(rng, n, num_symbols, train_max_len, *, modulus: int = 5):
    """`expression = value` with one number of an n - 2 symbol bracketed +/- expression replaced by x;
    answer = that number (unique: no multiplication). As the paper, n < 3 gives n zeros and answer 0; the
    replaced number is the first one at or after a uniform index (cyclically)."""
    need_range("solve_equation", "modulus", modulus, 2)
    need_symbols("solve_equation", modulus + 6, num_symbols, f"{modulus} numbers, + - ( ) x =")
    if n < 3:
        return tokens([0] * n), tokens([0])
    items, value = E.random_expression(rng, n - 2, modulus, mult=False)
    idx = int(rng.integers(0, n - 2))
    while not isinstance(items[idx], int):
        idx = (idx + 1) % (n - 2)
    solution, items[idx] = items[idx], X
    alphabet = _equation_alphabet(modulus)
    return tokens(alphabet.get(x, x) for x in [*items, EQUALS, value]), tokens([solution])


def solve_equation_reference(prompt, n, num_symbols, train_max_len, *, modulus: int = 5):
    if n < 3:
        return tokens([0])
    decode = {v: k for k, v in _equation_alphabet(modulus).items()}
    items = [decode.get(s, s) for s in symbols(prompt)]
    left, right = items[:-2], items[-1]
    solutions = [v for v in range(modulus) if E.evaluate([v if x == X else x for x in left], modulus) == right]
    assert len(solutions) == 1, solutions
    return tokens(solutions)
