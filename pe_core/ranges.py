"""Option ranges declared with the option: `Annotated` types that jsonargparse checks while parsing (through
pydantic), that `--help` prints next to the option (`type: Annotated[int, Ge(ge=1)]`), and that `check_ranges`
checks for code that builds a class directly (tests, notebooks), in the same words.

    def __init__(self, batch_size: PositiveInt = 32, dropout: Fraction = 0.0, ...)

A new option gets its range from its own type, never from a table keyed by its name.
"""

import functools
import inspect
import math
import operator
import types
import typing
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import AllowInfNan

from pe_core.errors import ConfigError

PositiveInt = Annotated[int, Ge(1)]  # sizes and counts
NonNegativeInt = Annotated[int, Ge(0)]
PositiveFloat = Annotated[float, Gt(0), AllowInfNan(False)]  # rates, scales
NonNegativeFloat = Annotated[float, Ge(0), AllowInfNan(False)]
Fraction = Annotated[float, Ge(0), Lt(1), AllowInfNan(False)]  # [0, 1): dropout, smoothing, warm-up share
OpenFraction = Annotated[float, Gt(0), Lt(1), AllowInfNan(False)]  # (0, 1): a held-out share, a mask rate
AtLeastOne = Annotated[float, Ge(1), AllowInfNan(False)]  # a stretch factor (1: unchanged)
AboveOne = Annotated[float, Gt(1), AllowInfNan(False)]  # a frequency base, a factor that must change something

BOUNDS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))


def bounds(annotation) -> tuple[type | None, list[tuple[str, float]]]:
    """(base type, [(operator, bound)]) of an `Annotated` range, also inside `X | None`; (None, []) otherwise."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # `PositiveInt | None`
        found = [bounds(arg) for arg in typing.get_args(annotation)]
        return next((b for b in found if b[1]), (None, []))
    if typing.get_origin(annotation) is not Annotated:
        return None, []
    base, *metadata = typing.get_args(annotation)
    found = [(op, getattr(m, attr)) for m in metadata for kind, attr, op in BOUNDS if isinstance(m, kind)]
    return base, found


def plain(annotation):
    """The annotation without its range: `PositiveInt | None` -> `int | None`, `Literal["a", "b"]` -> `str`
    (what `errors.wrong_type` checks the value's type against)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (plain(arg) for arg in typing.get_args(annotation)))
    if typing.get_origin(annotation) is Annotated:
        return plain(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is Literal:
        return functools.reduce(operator.or_, {type(choice) for choice in typing.get_args(annotation)})
    return annotation


def choices(annotation) -> tuple:
    """The values a `Literal` (also inside `X | None`) allows; () for any other annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return sum((choices(arg) for arg in typing.get_args(annotation)), ())
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else ()


def describe(annotation) -> str | None:
    """`an integer >= 1`, `a finite number in [0, 1)`; None for an annotation without a range."""
    base, found = bounds(annotation)
    if not found:
        return None
    kind = "an integer" if base is int else "a finite number"
    ops = dict(found)
    low = (">=", ops[">="]) if ">=" in ops else (">", ops[">"]) if ">" in ops else None
    high = ("<=", ops["<="]) if "<=" in ops else ("<", ops["<"]) if "<" in ops else None
    if low and high:
        return f"{kind} in {'[' if low[0] == '>=' else '('}{low[1]}, {high[1]}{']' if high[0] == '<=' else ')'}"
    op, bound = low or high
    return f"{kind} {op} {bound}"


def in_range(value, annotation) -> bool:
    base, found = bounds(annotation)
    if value is None or not found:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (base is int and not isinstance(value, int)):
        return False
    compare = {">=": value.__ge__, ">": value.__gt__, "<=": value.__le__, "<": value.__lt__}
    return math.isfinite(value) and all(compare[op](bound) is True for op, bound in found)


def plain_member_takes(value, annotation) -> bool:
    """Whether a plain-type member of a union (None in `Literal[...] | None`, int in `int | Literal["auto"]`)
    takes `value`, which its Literal members do not list."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    return any(
        isinstance(member, type) and isinstance(value, member) and not (member is int and isinstance(value, bool))
        for member in members
    )


def check_ranges(function, values: dict, prefix: str = "") -> None:
    """A one-line ConfigError for the first of `values` outside the range its parameter of `function` (a
    class's `__init__`, a dataclass) declares, e.g. `batch_size must be an integer >= 1, got 0`."""
    hints = typing.get_type_hints(function, include_extras=True)
    for name in inspect.signature(function).parameters:
        if name not in values or name not in hints:
            continue
        value, allowed = values[name], choices(hints[name])
        if allowed and value not in allowed and not plain_member_takes(value, hints[name]):
            raise ConfigError(f"{prefix}{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        if not in_range(value, hints[name]):
            raise ConfigError(f"{prefix}{name} must be {describe(hints[name])}, got {value!r}")
