"""Regular tasks of the Chomsky-hierarchy suite (Delétang et al., ICLR 2023, "Neural Networks and the Chomsky
Hierarchy"; used by Ruoss et al. 2023), as in google-deepmind/neural_networks_chomsky_hierarchy tasks/regular.

Symbols are the paper's integer inputs and output classes (symbol k = token SYMBOL0 + k); the answer is one
class token. Each generator has a reference that recomputes the answer another way.
"""

from datamodules.tasks.tokens import need_range, need_symbols, symbols, tokens


def _bits(rng, n: int) -> list[int]:
    return rng.integers(0, 2, size=n).tolist()


def even_pairs(rng, n, num_symbols, train_max_len):
    """Binary string; class 1 when the number of unequal neighbouring pairs (01 and 10) is odd."""
    s = _bits(rng, n)
    return tokens(s), tokens([sum(a != b for a, b in zip(s, s[1:])) % 2])


def even_pairs_reference(prompt, n, num_symbols, train_max_len):
    s = symbols(prompt)
    return tokens([int(s[0] != s[-1])])  # the number of switches is odd iff the ends differ


OPS = {0: "+", 1: "-", 2: "*"}  # the paper's OP_BY_CHARACTER, offset by the modulus


def modular_arithmetic(rng, n, num_symbols, train_max_len, *, modulus: int = 5):
    """Numbers in [0, modulus) alternating with +, -, * (uniform), evaluated with the usual precedence
    (products first), result mod `modulus`. The input has odd length: n, or n - 1 when n is even (as the
    paper's code). Input symbols: numbers 0..m-1, then +, -, * as m, m+1, m+2."""
    need_range("modular_arithmetic", "modulus", modulus, 2)
    need_symbols("modular_arithmetic", modulus + 3, num_symbols, f"{modulus} numbers and 3 operators")
    length = n if n % 2 else n - 1
    numbers = rng.integers(0, modulus, size=length // 2 + 1).tolist()
    ops = rng.integers(0, 3, size=length // 2).tolist()
    total, product, sign = 0, numbers[0], 1
    for op, x in zip(ops, numbers[1:]):
        if op == 2:
            product *= x
        else:
            total, product, sign = total + sign * product, x, 1 if op == 0 else -1
    result = (total + sign * product) % modulus
    expression = [numbers[0]] + [s for op, x in zip(ops, numbers[1:]) for s in (modulus + op, x)]
    return tokens(expression), tokens([result])


def modular_arithmetic_reference(prompt, n, num_symbols, train_max_len, *, modulus: int = 5):
    text = "".join(OPS[s - modulus] if s >= modulus else str(s) for s in symbols(prompt))
    return tokens([eval(text) % modulus])  # noqa: S307 (digits and + - * only)


def parity_check(rng, n, num_symbols, train_max_len):
    """Binary string; class = number of ones mod 2."""
    s = _bits(rng, n)
    return tokens(s), tokens([sum(s) % 2])


def parity_check_reference(prompt, n, num_symbols, train_max_len):
    return tokens([int("".join(map(str, symbols(prompt))).count("1") % 2 == 1)])


CYCLE = 5  # the paper's fixed cycle length


def cycle_navigation(rng, n, num_symbols, train_max_len):
    """Actions 0, 1, 2 move -1, 0, +1 on a cycle of 5 states starting at 0; class = final state."""
    need_symbols("cycle_navigation", CYCLE, num_symbols, "5 cycle states")
    actions = rng.integers(0, 3, size=n).tolist()
    return tokens(actions), tokens([sum(a - 1 for a in actions) % CYCLE])


def cycle_navigation_reference(prompt, n, num_symbols, train_max_len):
    state = 0
    for a in symbols(prompt):
        state = {0: (state + CYCLE - 1) % CYCLE, 1: state, 2: (state + 1) % CYCLE}[a]
    return tokens([state])
