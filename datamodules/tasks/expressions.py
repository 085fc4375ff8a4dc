"""Bracketed modular expressions shared by modular_arithmetic_brackets and solve_equation (Delétang et al.
2023, tasks/dcf/modular_arithmetic_brackets.py): a random expression of an exact length, and an evaluator."""

PLUS, MINUS, TIMES, OPEN, CLOSE = "+", "-", "*", "(", ")"


def random_expression(rng, length: int, modulus: int, mult: bool) -> tuple[list, int]:
    """(items, value mod modulus): items are ints (numbers) and the characters above, exactly `length` of them.

    As the paper's generate_one_expression_and_result: lengths 1-4 give d, -d, (d), (-d); longer ones
    (L op R) with len(L) uniform in [1, length - 4] and op uniform in {+, -} (or {+, -, *} with mult)."""
    if length <= 4:
        d = int(rng.integers(0, modulus))
        items = {1: [d], 2: [MINUS, d], 3: [OPEN, d, CLOSE], 4: [OPEN, MINUS, d, CLOSE]}[length]
        return items, (-d if length in (2, 4) else d) % modulus
    left_length = int(rng.integers(1, length - 3))
    left, a = random_expression(rng, left_length, modulus, mult)
    right, b = random_expression(rng, length - left_length - 3, modulus, mult)
    op = [PLUS, MINUS, TIMES][int(rng.integers(0, 3 if mult else 2))]
    value = {PLUS: a + b, MINUS: a - b, TIMES: a * b}[op] % modulus
    return [OPEN, *left, op, *right, CLOSE], value


def evaluate(items: list, modulus: int) -> int:
    """Value mod modulus of an expression (recursive descent: sums of products of signed factors)."""
    pos = 0

    def factor() -> int:
        nonlocal pos
        item = items[pos]
        pos += 1
        if item == MINUS:
            return -factor()
        if item == OPEN:
            value = expr()
            assert items[pos] == CLOSE
            pos += 1
            return value
        return item

    def term() -> int:
        nonlocal pos
        value = factor()
        while pos < len(items) and items[pos] == TIMES:
            pos += 1
            value = value * factor() % modulus
        return value

    def expr() -> int:
        nonlocal pos
        value = term()
        while pos < len(items) and items[pos] in (PLUS, MINUS):
            op = items[pos]
            pos += 1
            value = value + term() if op == PLUS else value - term()
        return value % modulus

    value = expr()
    assert pos == len(items)
    return value
