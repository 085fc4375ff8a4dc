"""The encoding zoo: one file per family, one registry line per encoding.

`ENCODINGS` maps a registry name to its class; `PRESETS` names a registered encoding with other default
options (a variant a paper reports under its own name, so sweeps, run names and comparisons tell it apart)
and adds it to `ENCODINGS`. `build_encoding` builds either with a clear error for an unknown name or
option. An option's type, choices (`Literal`) and range (`Annotated`, pe_core/ranges.py) are declared on the
encoding's own constructor and checked from there (`check_encoding`); `python -m lightning_modules.encodings
NAME` lists them. The registry-wide tests (tests/models/test_encodings_contract.py and others) run over this registry.
"""

import inspect
import math
import typing

from lightning_modules.encodings.alibi import ALiBi
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.bert_r import BertR
from lightning_modules.encodings.cable import Cable
from lightning_modules.encodings.comrope import ComRoPE
from lightning_modules.encodings.cope import CoPE
from lightning_modules.encodings.dape import DapeALiBi, DapeKerple
from lightning_modules.encodings.dd_alibi_row import PerRowDataDependentAlibi
from lightning_modules.encodings.deberta import DeBERTa
from lightning_modules.encodings.dynamic_bias import DynamicBias
from lightning_modules.encodings.fire import FIRE
from lightning_modules.encodings.fope import FoPE
from lightning_modules.encodings.fox import Fox
from lightning_modules.encodings.grape_a import GrapeA
from lightning_modules.encodings.grape_ap import GrapeAP
from lightning_modules.encodings.grape_m import GrapeM
from lightning_modules.encodings.grape_m_ctx import GrapeMContextual
from lightning_modules.encodings.kerple import KerpleLog, KerplePower
from lightning_modules.encodings.learned import LearnedAbsolute
from lightning_modules.encodings.liere import LieRE
from lightning_modules.encodings.none import NoPE
from lightning_modules.encodings.nope_head_scale import NoPEHeadScale
from lightning_modules.encodings.path import PaTH
from lightning_modules.encodings.pope import PoPE
from lightning_modules.encodings.rope import RoPE
from lightning_modules.encodings.rope_clipped import ClippedRoPE
from lightning_modules.encodings.rope_decoupled import DecoupledRoPE
from lightning_modules.encodings.sandwich import Sandwich
from lightning_modules.encodings.scaled_sinusoidal import ScaledSinusoidal
from lightning_modules.encodings.shaw import Shaw
from lightning_modules.encodings.sinusoidal import Sinusoidal
from lightning_modules.encodings.sinusoidal_learnable import SinusoidalLearnable
from lightning_modules.encodings.stick_breaking import StickBreaking
from lightning_modules.encodings.t5_bias import T5Bias
from lightning_modules.encodings.tupe import TupeA, TupeR
from lightning_modules.encodings.xpos import XPos
from pe_core.errors import TYPE_WORDS, ConfigError, wrong_type
from pe_core.ranges import choices, describe, in_range, plain

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    cls.name: cls
    for cls in (NoPE, LearnedAbsolute, Sinusoidal, T5Bias, ALiBi, RoPE, TupeA, TupeR)
    + (ScaledSinusoidal, SinusoidalLearnable, Shaw, DeBERTa, XPos, KerpleLog, KerplePower, FIRE, DynamicBias)
    + (BertR,)
    + (CoPE, Sandwich, Fox)
    + (DapeALiBi, DapeKerple)
    + (PoPE, PerRowDataDependentAlibi)
    + (PaTH, StickBreaking)
    + (GrapeM, GrapeMContextual, GrapeA, GrapeAP)
    + (ClippedRoPE, FoPE)
    + (ComRoPE, LieRE)
    + (Cable, NoPEHeadScale)
    + (DecoupledRoPE,)
}

# name -> (registered encoding, its default options): a variant that changes defaults only
PRESETS: dict[str, tuple[str, dict]] = {
    "tupe_a_tied": ("tupe_a", {"untie_cls": False}),  # TUPE-A with [CLS] tied, TUPE's ablation (Ke et al. 2021)
    "rope_global": ("rope", {"base": 1_000_000.0}),  # Gemma 3's global layers: RoPE base 1M (Gemma Team 2025)
}
ENCODINGS |= {name: ENCODINGS[base] for name, (base, _) in PRESETS.items()}


def preset_options(name: str) -> dict:
    """The default options a preset sets ({} for an encoding that is not one)."""
    return dict(PRESETS[name][1]) if name in PRESETS else {}


def encoding_options(name: str) -> list[str]:
    """The keyword options of `name` (beyond dim, num_heads, max_length, causal): its own and its parents',
    up to the base class's (`randomize_positions`, shared by every encoding)."""
    common = {"self", "dim", "num_heads", "max_length", "causal", "cls_first"}
    names = set()
    mro = ENCODINGS[name].__mro__
    for cls in mro[: mro.index(PositionalEncoding) + 1]:
        params = inspect.signature(cls.__init__).parameters.values()
        names |= {p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name not in common}
    return sorted(names)


def check_encoding_name(name: str) -> None:
    if name not in ENCODINGS:
        raise ConfigError(f"unknown encoding {name!r}; choose one of: {', '.join(ENCODINGS)}")


def option_parameters(name: str) -> dict[str, inspect.Parameter]:
    """Each option of `name` with its declared type and default (the most derived declaration wins; a
    preset's own defaults replace its encoding's)."""
    found = {}
    mro = ENCODINGS[name].__mro__
    for cls in mro[: mro.index(PositionalEncoding) + 1]:
        for p in inspect.signature(cls.__init__).parameters.values():
            found.setdefault(p.name, p)
    found |= {k: found[k].replace(default=v) for k, v in preset_options(name).items()}
    return {k: found[k] for k in encoding_options(name)}


def check_option_value(name: str, key: str, value, param: inspect.Parameter) -> None:
    """The type, choices (`Literal`) and range (`Annotated`, pe_core/ranges.py) the option's own
    constructor parameter declares; the words of a declared range on the command line (cli_errors.range_error)."""
    where = f"encoding {name!r} option {key!r}"
    problem = wrong_type(value, plain(param.annotation))
    if problem:
        raise ConfigError(f"{where} {problem}, got {value!r}")
    allowed = choices(param.annotation)
    if allowed and value is not None and value not in allowed:
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if not in_range(value, param.annotation):
        raise ConfigError(f"{where} must be {describe(param.annotation)}, got {value!r}")


def option_help(name: str) -> list[str]:
    """One line per option of `name`: its type, choices or range, and default, read from its signature
    (`python -m lightning_modules.encodings NAME` prints them)."""
    lines = []
    for key, param in option_parameters(name).items():
        kinds = typing.get_args(plain(param.annotation)) or (plain(param.annotation),)
        allowed = choices(param.annotation)
        what = f"one of {', '.join(map(repr, allowed))}" if allowed else describe(param.annotation)
        what = what or " or ".join(TYPE_WORDS.get(k, k.__name__) for k in kinds if k is not type(None))
        lines.append(f"{key}: {what}{' or null' if type(None) in kinds else ''} (default {param.default!r})")
    return lines


def check_encoding(name: str, options: dict) -> None:
    """Raise a one-line ConfigError for an unknown encoding name or option, or an option value of the
    wrong type, not one of its choices or out of the range its constructor parameter declares."""
    check_encoding_name(name)
    if not isinstance(options, dict):
        raise ConfigError(f"encoding options must be a mapping such as {{base: 500}}, got {options!r}")
    unknown = sorted(set(options) - set(encoding_options(name)))
    if unknown:
        valid = ", ".join(encoding_options(name)) or "none"
        raise ConfigError(f"encoding {name!r} has no option {unknown[0]!r}; its options: {valid}")
    params = option_parameters(name)
    for key, value in options.items():
        check_option_value(name, key, value, params[key])


def build_encoding(
    name: str, *, dim: int, num_heads: int, max_length: int, causal: bool, cls_first: bool = False, **options
) -> PositionalEncoding:
    """Build the registered encoding `name`; unknown names and options are one-line errors. `cls_first`:
    position 0 always holds [CLS] (the masked-LM and classification models set it)."""
    check_encoding(name, options)
    options = preset_options(name) | options
    return ENCODINGS[name](dim=dim, num_heads=num_heads, max_length=max_length, causal=causal,
                           cls_first=cls_first, **options)  # fmt: skip


__all__ = [
    "ENCODINGS",
    "PRESETS",
    "PositionalEncoding",
    "build_encoding",
    "check_encoding",
    "check_encoding_name",
    "encoding_options",
    "option_help",
]
