"""Option ranges declared with the option (pe_core/ranges.py) and the one list per kind of class.

- The Annotated range types: each accepts its bounds and refuses the value just outside them, through the
  command-line parser (jsonargparse + pydantic, which returns plain int / float) and through `check_ranges`
  (direct construction, e.g. a dataclass), in the same words.
- `cli_errors.range_error`: pydantic's report of a declared range as one line (integer, float, nan, fraction).
- Encoding options: every option of every registered encoding whose constructor declares a numeric bound
  refuses the value just outside it in one line naming the option, the bound and the value, and accepts an
  inclusive bound; every `Literal` option names its choices. The cases are derived from the signatures, so a
  new encoding (or option) is tested with no edit here.
- The registries (lightning_modules/registry.py, datamodules/registry.py): every entry imports and is the class
  that cli.py's short names and the sweep fork server's PRELOAD name.
"""

import importlib
import math
from dataclasses import dataclass
from typing import Literal

import pytest
from jsonargparse import ArgumentParser

from datamodules.base import TaskDataModule
from datamodules.registry import DATA_MODULES
from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, PRESETS, build_encoding, check_encoding, option_parameters
from lightning_modules.encodings.__main__ import main as list_encoding_options
from lightning_modules.registry import TASK_MODULE_PATHS
from lightning_modules.task_module import TaskModule
from pe_core.errors import ConfigError
from pe_core.ranges import (
    AboveOne,
    AtLeastOne,
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    OpenFraction,
    PositiveFloat,
    PositiveInt,
    bounds,
    check_ranges,
    choices,
    describe,
    in_range,
)
from pe_sweeps.cli_errors import one_line, range_error

below, above = (lambda x: math.nextafter(x, -math.inf)), (lambda x: math.nextafter(x, math.inf))

# type -> (values at or just inside its bounds, values just outside them)
TYPES = {
    "PositiveInt": (PositiveInt, [1, 7], [0, -3]),
    "NonNegativeInt": (NonNegativeInt, [0, 7], [-1]),
    "PositiveFloat": (PositiveFloat, [1e-300, 2.5], [0.0, -1e-300]),
    "NonNegativeFloat": (NonNegativeFloat, [0.0, 2.5], [-1e-300]),
    "Fraction": (Fraction, [0.0, below(1.0)], [-1e-300, 1.0]),
    "OpenFraction": (OpenFraction, [1e-300, below(1.0)], [0.0, 1.0]),
    "AtLeastOne": (AtLeastOne, [1.0, 3.0], [below(1.0)]),
    "AboveOne": (AboveOne, [above(1.0), 3.0], [1.0, 0.5]),
}


def parser_for(annotation) -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--x", type=annotation)
    return parser


def parse_error(annotation, text: str) -> str:
    with pytest.raises(Exception) as err:
        parser_for(annotation).parse_args([f"--x={text}"])
    return str(err.value)


@pytest.mark.parametrize("kind", TYPES)
def test_each_type_accepts_its_bounds_and_refuses_just_outside(kind):
    annotation, inside, outside = TYPES[kind]
    base = bounds(annotation)[0]
    for value in inside:
        parsed = parser_for(annotation).parse_args([f"--x={value!r}"]).x
        assert parsed == value and type(parsed) is base, (value, parsed)  # a plain int / float comes back
        assert in_range(value, annotation)
        check_ranges(lambda x: x, {"x": value})  # no annotation on a lambda: nothing to check
    for value in outside:
        assert not in_range(value, annotation), value
        message = one_line(parse_error(annotation, repr(value)))
        assert message.startswith(f"--x must be {'an integer' if base is int else 'a finite number'} "), message
        assert "\n" not in message and message.endswith(f", got {value!r}"), message


@pytest.mark.parametrize("kind", [k for k, (annotation, _, _) in TYPES.items() if bounds(annotation)[0] is float])
def test_float_types_refuse_nan_and_infinity(kind):
    annotation = TYPES[kind][0]
    for value in (math.nan, math.inf):
        assert not in_range(value, annotation)
        assert one_line(parse_error(annotation, ".nan" if math.isnan(value) else ".inf")).startswith(
            "--x must be a finite number, got ."
        )


def test_int_types_refuse_a_float_and_a_bool():
    assert not in_range(1.5, PositiveInt) and not in_range(True, PositiveInt)
    assert one_line(parse_error(PositiveInt, "abc")) == "--x: expected an integer, got 'abc'"


@dataclass
class Options:
    size: PositiveInt = 1
    share: Fraction = 0.0
    limit: NonNegativeInt | None = None
    name: str = "x"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"size": 0}, "opts.size must be an integer >= 1, got 0"),
        ({"size": True}, "opts.size must be an integer >= 1, got True"),
        ({"share": 1.0}, "opts.share must be a finite number in [0, 1), got 1.0"),
        ({"share": math.nan}, "opts.share must be a finite number in [0, 1), got nan"),
        ({"limit": -1}, "opts.limit must be an integer >= 0, got -1"),
    ],
)
def test_check_ranges_on_a_dataclass(values, message):
    with pytest.raises(ConfigError) as err:
        check_ranges(Options, values, "opts.")
    assert str(err.value) == message
    check_ranges(Options, {"size": 3, "share": 0.5, "limit": None, "name": "anything"}, "opts.")  # in range


@dataclass
class Seeded:
    seed: int | Literal["data_seed", "split_seed"] = "data_seed"


def test_a_literal_beside_a_plain_type_accepts_that_type():
    """`int | Literal[...]` (the classification module's val_seed): an integer is not refused as a choice."""
    for value in ("data_seed", "split_seed", 7, 0):
        check_ranges(Seeded, {"seed": value}, "--data.")
    for value in ("data-seed", True, 1.5):
        with pytest.raises(ConfigError, match="^--data.seed must be one of 'data_seed', 'split_seed', got "):
            check_ranges(Seeded, {"seed": value}, "--data.")


def test_a_dataclass_checks_its_ranges_when_built_directly():
    with pytest.raises(ConfigError, match=r"^arch\.dim must be an integer >= 1, got 0$"):
        ArchConfig(dim=0)
    with pytest.raises(ConfigError, match=r"^arch\.dropout must be a finite number in \[0, 1\), got 1\.0$"):
        ArchConfig(dropout=1.0)


@pytest.mark.parametrize(
    "annotation, text, expected",
    [
        (PositiveInt, "0", "--x must be an integer >= 1, got 0"),
        (PositiveInt | None, "-2", "--x must be an integer >= 1, got -2"),
        (NonNegativeInt, "-1", "--x must be an integer >= 0, got -1"),
        (PositiveFloat, "-0.5", "--x must be a finite number > 0, got -0.5"),
        (NonNegativeFloat, "-1e-9", "--x must be a finite number >= 0, got -1e-9"),
        (PositiveFloat, ".nan", "--x must be a finite number, got .nan"),
        (PositiveFloat, ".inf", "--x must be a finite number, got .inf"),
        (Fraction, "1.0", "--x must be a finite number < 1, got 1.0"),
        (Fraction, "-0.1", "--x must be a finite number >= 0, got -0.1"),
        (OpenFraction, "0", "--x must be a finite number > 0, got 0"),
        (PositiveInt, "abc", "--x: expected an integer, got 'abc'"),
    ],
)
def test_range_error_is_one_line(annotation, text, expected):
    message = parse_error(annotation, text)
    assert range_error("x", message) == expected
    assert one_line(message) == expected  # what cli.py prints after "error: "


def test_range_error_leaves_other_errors_alone():
    assert range_error("x", "Parser key \"x\":\n  Expected a <class 'int'>. Got value: abc") is None


def just_outside(annotation):
    """(operator, bound, value just outside it) for each numeric bound the annotation declares."""
    base, found = bounds(annotation)
    for op, bound in found:
        if base is int:
            yield op, bound, {">=": bound - 1, ">": bound, "<=": bound + 1, "<": bound}[op]
        else:
            yield op, bound, {">=": below(bound), ">": float(bound), "<=": above(bound), "<": float(bound)}[op]


RANGED = [
    pytest.param(name, key, op, bound, value, id=f"{name}-{key}{op}{bound}")
    for name in ENCODINGS
    for key, param in option_parameters(name).items()
    for op, bound, value in just_outside(param.annotation)
]
CHOICES = [(name, key) for name in ENCODINGS for key, p in option_parameters(name).items() if choices(p.annotation)]


def test_the_cases_come_from_the_signatures():
    """The derivation finds the ranges the encodings declare (a guard against an empty parametrisation)."""
    found = {(case.values[0], case.values[1]) for case in RANGED}
    assert {("rope", "base"), ("rope", "rope_fraction"), ("alibi", "heads"), ("t5_bias", "num_buckets"),
            ("fire", "eps"), ("kerple_log", "randomize_positions"), ("cope", "max_pos")} <= found  # fmt: skip
    assert {("tupe_a", "mode"), ("learned", "init_rows")} <= set(CHOICES)


@pytest.mark.parametrize("name, key, op, bound, value", RANGED)
def test_every_declared_encoding_bound_refuses_just_outside_in_one_line(name, key, op, bound, value):
    annotation = option_parameters(name)[key].annotation
    expected = f"encoding {name!r} option {key!r} must be {describe(annotation)}, got {value!r}"
    with pytest.raises(ConfigError) as err:
        check_encoding(name, {key: value})
    assert str(err.value) == expected and str(bound) in expected and "\n" not in expected
    with pytest.raises(ConfigError) as built:  # the path every model takes
        build_encoding(name, dim=16, num_heads=4, max_length=16, causal=True, **{key: value})
    assert str(built.value) == expected
    if op in (">=", "<="):
        check_encoding(name, {key: bound})  # an inclusive bound is accepted


@pytest.mark.parametrize("name, key", CHOICES)
def test_every_literal_option_names_its_choices(name, key):
    allowed = choices(option_parameters(name)[key].annotation)
    with pytest.raises(ConfigError) as err:
        check_encoding(name, {key: "not-a-choice"})
    assert str(err.value) == (
        f"encoding {name!r} option {key!r} must be one of {', '.join(map(repr, allowed))}, got 'not-a-choice'"
    )
    for value in allowed:
        check_encoding(name, {key: value})


@pytest.mark.parametrize("name", PRESETS)
def test_presets_pass_their_encodings_declared_checks(name):
    base, options = PRESETS[name]
    check_encoding(base, options)
    check_encoding(name, {})
    for key, value in options.items():
        assert option_parameters(name)[key].default == value


def test_the_option_listing_shows_ranges_choices_and_defaults(capsys):
    assert list_encoding_options(["rope", "tupe_a"]) == 0
    out = capsys.readouterr().out
    assert "  base: a finite number > 1 (default 10000.0)" in out
    assert "  rope_fraction: a finite number in (0, 1] (default 1.0)" in out
    assert "  mode: one of 'untied', 'bert_ad' (default 'untied')" in out
    assert list_encoding_options(["nope"]) == 2
    assert "unknown encoding 'nope'" in capsys.readouterr().err


REGISTRIES = [
    pytest.param("model", TASK_MODULE_PATHS, TaskModule, id="model"),
    pytest.param("data", DATA_MODULES, TaskDataModule, id="data"),
]


@pytest.mark.parametrize("group, registry, base", REGISTRIES)
def test_every_registry_entry_imports_and_is_the_class_the_cli_and_preload_name(group, registry, base):
    from pe_sweeps.cli import CLASSES, expand_class_names
    from pe_sweeps.sweep.warm_start import PRELOAD

    assert registry and CLASSES[group] == registry
    for short, path in registry.items():
        module_name, _, class_name = path.rpartition(".")
        cls = getattr(importlib.import_module(module_name), class_name)
        assert cls.__name__ == short and issubclass(cls, base), path
        assert module_name in PRELOAD, module_name
        assert expand_class_names([f"--{group}={short}"]) == [f"--{group}={path}"]


def test_task_modules_list_is_the_registry():
    from lightning_modules.task_modules import CLASS_PATHS

    assert {path: cls.__name__ for path, cls in CLASS_PATHS.items()} == {p: s for s, p in TASK_MODULE_PATHS.items()}


def test_check_ranges_refuses_a_value_outside_a_literal_s_choices():
    from typing import Literal

    def build(mode: Literal["a", "b"] = "a", other: Literal["x"] | None = None):
        pass

    check_ranges(build, {"mode": "b", "other": None})
    with pytest.raises(ConfigError, match=r"^mode must be one of 'a', 'b', got 'c'$"):
        check_ranges(build, {"mode": "c"})
    from lightning_modules.synthetic_model import SyntheticTaskModel

    with pytest.raises(ConfigError, match="lr_decay must be one of 'constant', 'linear', 'cosine', got 'exp'"):
        SyntheticTaskModel(lr_decay="exp")  # built directly, not parsed: the declared choices still hold
