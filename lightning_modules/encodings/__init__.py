"""The encoding zoo: one file per family, one registry line per encoding.

`ENCODINGS` maps a registry name to its class; `PRESETS` names a registered encoding with other default
options (a variant a paper reports under its own name, so sweeps, run names and comparisons tell it apart)
and adds it to `ENCODINGS`. `build_encoding` builds either with a clear error for an unknown name or
option. The registry-wide tests (tests/test_encodings_contract.py and others) run over this registry.
"""

import inspect
import math

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
from lightning_modules.encodings.xpos import XPos
from pe_sweeps.errors import ConfigError, wrong_type

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    cls.name: cls
    for cls in (NoPE, LearnedAbsolute, Sinusoidal, T5Bias, ALiBi, RoPE, TupeA, TupeR)
    + (ScaledSinusoidal, SinusoidalLearnable, Shaw, DeBERTa, XPos, KerpleLog, KerplePower, FIRE, DynamicBias)
    + (BertR,)
    + (CoPE, Sandwich, Fox)
}

# name -> (registered encoding, its default options): a variant that changes defaults only
PRESETS: dict[str, tuple[str, dict]] = {
    "tupe_a_tied": ("tupe_a", {"untie_cls": False}),  # TUPE-A with [CLS] tied, TUPE's ablation (Ke et al. 2021)
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


# options that are sizes, scales or rates: a value <= 0 is a mistake (and `base` <= 1 has no frequencies)
POSITIVE = {"num_buckets", "max_distance", "max_relative", "rotary_dim", "interpolation_factor", "ntk_base_rescale",
            "scale_base", "mlp_width", "eps", "init_threshold"}  # fmt: skip


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
    problem = wrong_type(value, param.annotation)
    if problem:
        raise ConfigError(f"encoding {name!r} option {key!r} {problem}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"encoding {name!r} option {key!r} must be finite, got {value!r}")
    if key == "base" and value is not None and value <= 1:
        raise ConfigError(f"encoding {name!r} option 'base' must be > 1, got {value!r}")
    if key in POSITIVE and isinstance(value, (int, float)) and value <= 0:
        raise ConfigError(f"encoding {name!r} option {key!r} must be > 0, got {value!r}")


def check_encoding(name: str, options: dict) -> None:
    """Raise a one-line ConfigError for an unknown encoding name or option, or an option value of the
    wrong type or out of range."""
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
]
