"""The encoding zoo: one file per family, one registry line per encoding.

`ENCODINGS` maps a registry name to its class; `build_encoding` builds one with a clear error for an
unknown name or option. Every test in tests/test_encodings.py runs over this registry.
"""

import inspect

from lightning_modules.encodings.alibi import ALiBi
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.bert_r import BertR
from lightning_modules.encodings.cope import CoPE
from lightning_modules.encodings.deberta import DeBERTa
from lightning_modules.encodings.dynamic_bias import DynamicBias
from lightning_modules.encodings.fire import FIRE
from lightning_modules.encodings.fox import Fox
from lightning_modules.encodings.kerple import KerpleLog, KerplePower
from lightning_modules.encodings.learned import LearnedAbsolute
from lightning_modules.encodings.none import NoPE
from lightning_modules.encodings.rope import RoPE
from lightning_modules.encodings.sandwich import Sandwich
from lightning_modules.encodings.scaled_sinusoidal import ScaledSinusoidal
from lightning_modules.encodings.shaw import Shaw
from lightning_modules.encodings.sinusoidal import Sinusoidal
from lightning_modules.encodings.sinusoidal_learnable import SinusoidalLearnable
from lightning_modules.encodings.t5_bias import T5Bias
from lightning_modules.encodings.tupe import TupeA, TupeR
from lightning_modules.encodings.tupe_tied import TupeATiedCLS
from lightning_modules.encodings.xpos import XPos
from lightning_modules.errors import ConfigError

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    cls.name: cls
    for cls in (NoPE, LearnedAbsolute, Sinusoidal, T5Bias, ALiBi, RoPE, TupeA, TupeR)
    + (ScaledSinusoidal, SinusoidalLearnable, Shaw, DeBERTa, XPos, KerpleLog, KerplePower, FIRE, DynamicBias)
    + (BertR, TupeATiedCLS)
    + (CoPE, Sandwich, Fox)
}


def encoding_options(name: str) -> list[str]:
    """The keyword options of `name` (beyond dim, num_heads, max_length, causal): its own and its parents',
    up to the base class's (`randomize_positions`, shared by every encoding)."""
    common = {"self", "dim", "num_heads", "max_length", "causal"}
    names = set()
    mro = ENCODINGS[name].__mro__
    for cls in mro[: mro.index(PositionalEncoding) + 1]:
        params = inspect.signature(cls.__init__).parameters.values()
        names |= {p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name not in common}
    return sorted(names)


def check_encoding_name(name: str) -> None:
    if name not in ENCODINGS:
        raise ConfigError(f"unknown encoding {name!r}; choose one of: {', '.join(ENCODINGS)}")


def check_encoding(name: str, options: dict) -> None:
    """Raise a one-line ConfigError for an unknown encoding name or option."""
    check_encoding_name(name)
    unknown = sorted(set(options) - set(encoding_options(name)))
    if unknown:
        valid = ", ".join(encoding_options(name)) or "none"
        raise ConfigError(f"encoding {name!r} has no option {unknown[0]!r}; its options: {valid}")


def build_encoding(
    name: str, *, dim: int, num_heads: int, max_length: int, causal: bool, **options
) -> PositionalEncoding:
    """Build the registered encoding `name`; unknown names and options are one-line errors."""
    check_encoding(name, options)
    return ENCODINGS[name](dim=dim, num_heads=num_heads, max_length=max_length, causal=causal, **options)


__all__ = [
    "ENCODINGS",
    "PositionalEncoding",
    "build_encoding",
    "check_encoding",
    "check_encoding_name",
    "encoding_options",
]
