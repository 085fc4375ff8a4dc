"""Addition as the length-generalisation records of 2024 use it (Zhou et al. 2024, "Transformers Can Achieve Length
Generalization But Not Robustly"; McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings";
Cho et al. 2024, "Position Coupling").

`addition_zhou`: two operands of different lengths, the length n being the longer one's (which operand is the
longer is drawn, the other's length is uniform in [1, n]; a number of more than one digit has a non-zero leading
digit, as Cho et al.'s generator), written most-significant digit first (`reverse_operands: true`: least first, as
McLeish et al.), PLUS between them; the answer least-significant digit first (Zhou et al.'s reversed format), zero
padded to n + 1 digits (deviation: the records score the sum without padding; a fixed answer length keeps the
answer positions of one length comparable).
`index_hints: true` (Zhou et al.): every digit is preceded by a hint token naming its significance, hint start + i
for the digit of significance i in both operands and the answer (which the model writes, hints included); hints
come from an ordered set of `num_hints` tokens after the shared vocabulary, and at training time the start is
drawn uniformly so that every hint of the set is trained (at evaluation it is 0), as Cho et al.'s reimplementation
(`AdditionDatasetWithIndexHints`; theirs pads the operands to one length, so MSD-first hints and significance agree).
`positions: abacus | coupling`: the task's own position ids (positions.py); abacus counts digits from the left, so
it needs `reverse_operands: true` (McLeish et al.'s format), and hints are an alternative to both (not combined).
"""

from datamodules.tasks import positions as P
from datamodules.tasks.basic import addition_positions
from datamodules.tasks.tokens import PLUS, SEP, SYMBOL0, need_range, need_symbols, vocab_size
from pe_core.errors import ConfigError

NAME = "addition_zhou"


def _check(n, num_symbols, index_hints, num_hints, reverse_operands, positions, max_offset):
    need_symbols(NAME, 10, num_symbols, "digits 0-9")
    P.check_scheme(NAME, positions, max_offset)
    need_range(NAME, "num_hints", num_hints, 1)
    if index_hints and positions != "none":
        raise ConfigError(f"task {NAME!r}: index_hints and positions {positions!r} are alternatives; set one")
    if positions == "abacus" and not reverse_operands:
        raise ConfigError(f"task {NAME!r}: positions 'abacus' counts digits from the left; set reverse_operands: "
                          "true (McLeish et al.'s least-significant-first operands)")  # fmt: skip
    if index_hints and num_hints < n + 1:
        raise ConfigError(f"task {NAME!r}: index_hints at length {n} need num_hints >= {n + 1}, got {num_hints}")


def _write(digits: list[int], hints: list[int] | None, reverse: bool) -> list[int]:
    """LSD-first digits (and their hint tokens) -> the written tokens, LSD first if `reverse` else MSD first."""
    pairs = [([h] if hints else []) + [SYMBOL0 + d] for d, h in zip(digits, hints or digits)]
    return [t for pair in (pairs if reverse else pairs[::-1]) for t in pair]


def addition_zhou(rng, n, num_symbols, train_max_len, *, index_hints: bool = False, num_hints: int = 102,
                  reverse_operands: bool = False, positions: str = "none", max_offset: int = 100,
                  random_offset: bool = True):  # fmt: skip
    """prompt = a PLUS b (different lengths, the longer with n digits), answer = a + b least-significant digit
    first, n + 1 digits; see the module docstring for the options."""
    _check(n, num_symbols, index_hints, num_hints, reverse_operands, positions, max_offset)
    lengths = [n, int(rng.integers(1, n + 1))]
    if rng.integers(0, 2):
        lengths.reverse()
    operands = []
    for m in lengths:
        digits = rng.integers(0, 10, size=m).tolist()  # LSD first
        if m > 1:
            digits[-1] = int(rng.integers(1, 10))
        operands.append(digits)
    total = str(sum(int("".join(map(str, d[::-1]))) for d in operands)).zfill(n + 1)
    answer_digits = [int(c) for c in reversed(total)]
    hint = None
    if index_hints:
        start = int(rng.integers(0, num_hints - (n + 1) + 1)) if random_offset else 0
        hint = lambda m: [vocab_size(num_symbols, train_max_len) + start + i for i in range(m)]
    written = [_write(d, hint(len(d)) if hint else None, reverse_operands) for d in operands]
    prompt = written[0] + [PLUS] + written[1]
    answer = _write(answer_digits, hint(n + 1) if hint else None, reverse=True)
    if positions == "none":
        return prompt, answer
    ids = addition_positions(rng, prompt + [SEP] + answer, n, positions, max_offset, train_max_len, random_offset,
                             msd_first_operands=not reverse_operands)  # fmt: skip
    return prompt, answer, {"positions": ids}


def addition_zhou_reference(prompt, n, num_symbols, train_max_len, *, index_hints: bool = False, num_hints: int = 102,
                            reverse_operands: bool = False, **_):  # fmt: skip
    split = prompt.index(PLUS)
    numbers = []
    for written in (prompt[:split], prompt[split + 1 :]):
        digits = [t - SYMBOL0 for t in written if P.is_digit(t)]
        numbers.append(int("".join(map(str, digits[::-1] if reverse_operands else digits))))
    total = [int(c) for c in reversed(str(sum(numbers)).zfill(n + 1))]
    if not index_hints:
        return [SYMBOL0 + d for d in total]
    first = min(t for t in prompt if t != PLUS and not P.is_digit(t))  # the hint of significance 0
    return [t for i, d in enumerate(total) for t in (first + i, SYMBOL0 + d)]


def addition_zhou_limits(n, num_symbols, train_max_len, *, index_hints: bool = False, num_hints: int = 102,
                         reverse_operands: bool = False, positions: str = "none", max_offset: int = 100,
                         random_offset: bool = True) -> dict:  # fmt: skip
    """Longest prompt (both operands n digits), answer, vocabulary (the hints after the shared one), largest id."""
    per_digit = 2 if index_hints else 1
    vocab = vocab_size(num_symbols, train_max_len) + (num_hints if index_hints else 0)
    return {"prompt": per_digit * 2 * n + 1, "answer": per_digit * (n + 1), "vocab": vocab,
            "max_position": P.max_position(positions, n, max_offset, train_max_len, random_offset)}  # fmt: skip
