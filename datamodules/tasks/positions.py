"""Position ids a task supplies for its own tokens: Abacus (McLeish et al. 2024) and position coupling (Cho et
al. 2024), for the addition tasks (`positions: abacus | coupling`).

A task returns them per example for the whole sequence `prompt SEP answer` (see datamodules/tasks/__init__.py);
the collate pads them and the synthetic model gives them to the Transformer, whose encoding embeds them as any
positions (e.g. `learned`: the Abacus table; `sinusoidal`; `rope` rotates by them).
Random offsets are drawn at training time only (`random_offset`, which the registry sets false in the evaluation
splits), after the task's own draws, so an example's tokens do not depend on the scheme.
"""

from datamodules.tasks.tokens import PLUS, SEP, SYMBOL0, need_range
from pe_core.errors import ConfigError

SCHEMES = ("none", "abacus", "coupling")


def is_digit(t: int) -> bool:
    return SYMBOL0 <= t < SYMBOL0 + 10


def check_scheme(task: str, positions: str, max_offset: int) -> None:
    """One-line errors for an unknown scheme or a bad offset range."""
    if positions not in SCHEMES:
        raise ConfigError(f"task {task!r} option 'positions' must be one of: {', '.join(SCHEMES)}; got {positions!r}")
    need_range(task, "max_offset", max_offset, 1)


def abacus(tokens: list[int], offset: int = 0) -> list[int]:
    """Abacus ids (McLeish et al. 2024, mcleish7/arithmetic `abacus.py` `Abacus.helper` + `forward`): each digit's
    1-based index within its run of consecutive digits, plus `offset` (the training shift k); 0 for non-digits."""
    out, run = [], 0
    for t in tokens:
        run = run + 1 if is_digit(t) else 0
        out.append(run + offset if run else 0)
    return out


def abacus_offset(rng, max_offset: int, random_offset: bool) -> int:
    """k uniform in [0, max_offset) at training time (the reference's `random.randint(0, max_k)` with
    max_k = max_offset - 1, default 99 as theirs), 0 at evaluation."""
    return int(rng.integers(0, max_offset)) if random_offset else 0


def coupling_start(rng, n: int, max_offset: int, train_max_len: int, random_offset: bool) -> int:
    """Cho et al.'s starting id (HanseulJo/position-coupling `AdditionDatasetWithCoupledPositions`): uniform in
    [1, max_position - (n + 1)] at training time, 1 at evaluation, with the reference's `max_position` set to
    max_offset + train_max_len + 1 (so at the longest training length the start is 1 + U[0, max_offset)); a
    longer example (never in the training split) starts at 1."""
    max_position = max_offset + train_max_len + 1
    return int(rng.integers(1, max(1, max_position - (n + 1)) + 1)) if random_offset else 1


def coupling(tokens: list[int], start: int, msd_first_operands: bool = False) -> list[int]:
    """Coupled ids for `a PLUS b SEP answer` (Cho et al. 2024): the digit of significance i gets start + 1 + i in
    both operands and the answer (least-significant digit first), PLUS and SEP (the paper's `+` and `=`) get
    `start`. `msd_first_operands`: the operands are written most-significant digit first (their ids descend)."""
    out, segment, operand = [], [], True
    for t in [*tokens, None]:
        if t in (PLUS, SEP, None):
            ids = [start + 1 + i for i in range(len(segment))]
            out += ids[::-1] if operand and msd_first_operands else ids
            out += [start] if t is not None else []
            operand, segment = operand and t != SEP, []
        else:
            segment.append(t)
    return out


def max_position(positions: str, n: int, max_offset: int, train_max_len: int, random_offset: bool) -> int:
    """The largest id of an addition example whose longest number (the answer) has n + 1 digits."""
    if positions == "abacus":
        return (max_offset - 1 if random_offset else 0) + n + 1
    if positions == "coupling":
        return max(max_offset + train_max_len + 1, n + 2) if random_offset else n + 2
    return 0
