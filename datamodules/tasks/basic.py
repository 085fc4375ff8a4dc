"""The first synthetic tasks (Kazemnejad et al. 2023's protocol): copy, reverse, sort, addition, lookup.

Each task: generate(rng, n, num_symbols, train_max_len) -> (prompt, answer) token lists, and a reference
that recomputes the answer from the prompt alone (the shared semantics test compares the two).
"""

from datamodules.tasks import positions as P
from datamodules.tasks.tokens import PLUS, QUERY, SEP, SYMBOL0, index_token, need_symbols


def _symbols(rng, n: int, num_symbols: int) -> list[int]:
    return (SYMBOL0 + rng.integers(0, num_symbols, size=n)).tolist()


def copy_task(rng, n, num_symbols, train_max_len):
    """prompt = x (n random symbols), answer = x."""
    x = _symbols(rng, n, num_symbols)
    return x, list(x)


def copy_reference(prompt, n, num_symbols, train_max_len):
    return list(prompt)


def reverse_task(rng, n, num_symbols, train_max_len):
    """prompt = x, answer = x reversed."""
    x = _symbols(rng, n, num_symbols)
    return x, x[::-1]


def reverse_reference(prompt, n, num_symbols, train_max_len):
    return [prompt[n - 1 - i] for i in range(n)]


def sort_task(rng, n, num_symbols, train_max_len):
    """prompt = x, answer = sorted(x) (symbol ids are ordered like the symbols)."""
    x = _symbols(rng, n, num_symbols)
    return x, sorted(x)


def sort_reference(prompt, n, num_symbols, train_max_len):
    return [t for t in range(SYMBOL0, SYMBOL0 + num_symbols) for _ in range(prompt.count(t))]


def addition_task(rng, n, num_symbols, train_max_len, *, positions: str = "none", max_offset: int = 100,
                  random_offset: bool = True):  # fmt: skip
    """prompt = a PLUS b, answer = a + b; digits are symbols 0..9, written least-significant digit first.

    LSB-first (Lee et al. 2023, "Teaching Arithmetic to Small Transformers") lets a left-to-right model
    emit each answer digit after seeing the carry it depends on: carries flow left to right. a and b have n
    uniformly random digits each (leading zeros allowed); the answer always has n + 1 digits, zero padded.
    `positions`: none (the model's own 0..L-1), abacus or coupling ids (datamodules/tasks/positions.py) with
    a training offset below `max_offset`; `random_offset` is set false by the evaluation splits.
    """
    need_symbols("addition", 10, num_symbols, "digits 0-9")
    P.check_scheme("addition", positions, max_offset)
    a = rng.integers(0, 10, size=n).tolist()  # LSB first
    b = rng.integers(0, 10, size=n).tolist()
    total, carry = [], 0
    for da, db in zip(a, b, strict=True):
        carry, digit = divmod(da + db + carry, 10)
        total.append(digit)
    total.append(carry)  # n + 1 digits
    to_tokens = lambda digits: [SYMBOL0 + d for d in digits]
    prompt, answer = to_tokens(a) + [PLUS] + to_tokens(b), to_tokens(total)
    if positions == "none":
        return prompt, answer
    return prompt, answer, {"positions": addition_positions(rng, prompt + [SEP] + answer, n, positions, max_offset,
                                                            train_max_len, random_offset)}  # fmt: skip


def addition_positions(rng, full: list[int], n: int, positions: str, max_offset: int, train_max_len: int,
                       random_offset: bool, msd_first_operands: bool = False) -> list[int]:  # fmt: skip
    """Abacus or coupled ids of `full` = a PLUS b SEP answer whose longest operand has n digits."""
    if positions == "abacus":
        return P.abacus(full, P.abacus_offset(rng, max_offset, random_offset))
    start = P.coupling_start(rng, n, max_offset, train_max_len, random_offset)
    return P.coupling(full, start, msd_first_operands)


def addition_limits(n, num_symbols, train_max_len, *, positions: str = "none", max_offset: int = 100,
                    random_offset: bool = True) -> dict:  # fmt: skip
    """The largest position id (the lengths are fixed by n)."""
    return {"max_position": P.max_position(positions, n, max_offset, train_max_len, random_offset)}


def addition_reference(prompt, n, num_symbols, train_max_len, **_):
    value = lambda digits: int("".join(str(t - SYMBOL0) for t in reversed(digits)))
    total = value(prompt[:n]) + value(prompt[n + 1 :])
    return [SYMBOL0 + int(d) for d in reversed(str(total).zfill(n + 1))]


def lookup_task(rng, n, num_symbols, train_max_len):
    """prompt = x QUERY q, answer = [x[q]], with q an index token for a uniform index < min(n, train_max_len).

    Queried indices stay within the training range, so beyond-training lengths test locating an index the
    model has seen among more (unseen) positions, not reading out an index token it has never trained on.
    """
    x = _symbols(rng, n, num_symbols)
    q = int(rng.integers(0, min(n, train_max_len)))
    return x + [QUERY, index_token(q, num_symbols)], [x[q]]


def lookup_reference(prompt, n, num_symbols, train_max_len):
    assert prompt[-2] == QUERY
    return [prompt[prompt[-1] - index_token(0, num_symbols)]]
