"""Errors that mean "the user asked for something invalid", reported as one line by `cli.py`."""

import types
import typing


class ConfigError(ValueError):
    """A bad name, size or option in a config; the message names the problem and the valid choices."""


class DivergedError(RuntimeError):
    """Training produced a non-finite loss; the message says at which step and what to try."""


TYPE_WORDS = {
    type(None): "null",
    float: "a number",
    int: "an integer",
    bool: "true or false",
    str: "a string",
    list: "a list",
}


def wrong_type(value, annotation) -> str | None:
    """`must be <type>` when `value` does not fit the option's annotation (`int`, `float | None`, ...), else None.
    An integer is a fine float; true / false is not a number."""
    kinds = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    kinds = tuple(typing.get_origin(k) or k for k in kinds)  # list[float] -> list (items checked by the option)
    kinds = tuple(k for k in kinds if isinstance(k, type))
    kinds += (int,) if float in kinds else ()
    fits = type(None) in kinds if value is None else isinstance(value, kinds)
    if not kinds or fits and (bool in kinds or not isinstance(value, bool)):
        return None
    wanted = dict.fromkeys(TYPE_WORDS.get(k, k.__name__) for k in kinds if not (k is int and float in kinds))
    return f"must be {' or '.join(wanted)}"
