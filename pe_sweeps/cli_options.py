"""Command-line helpers shared by the extra subcommands (sweep, compare, probe); imported by cli.py and probes.
A jsonargparse parser of an options dataclass whose `--help` shows each field's comment as its help text and,
where the class declares them (`CHOICES`), the valid values."""

import dataclasses
import inspect
import re
import typing

from jsonargparse import ActionConfigFile, ArgumentParser

from pe_core.ranges import describe
from pe_sweeps import internals
from pe_sweeps.cli_errors import OneLineErrorParser

FIELD = re.compile(r"^\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$")  # `name: type = default  # help`
COMMENT = re.compile(r"^\s+#\s?(.*)$")  # a comment line: continues a field's help, or precedes its field


def dashes_to_underscores(arg: str) -> str:
    """`--study-name=x` -> `--study_name=x`: both spellings work for dataclass options."""
    if not arg.startswith("--"):
        return arg
    key, sep, value = arg[2:].partition("=")
    return "--" + key.replace("-", "_") + sep + value


def field_help(options_class: type) -> dict[str, str]:
    """{field: its comment} from the class source. A comment line after a field's own comment continues
    it; comment lines before a field without one are its help."""
    names = {f.name for f in dataclasses.fields(options_class)}
    helps: dict[str, str] = {}
    last, pending = None, []
    for line in inspect.getsource(options_class).splitlines()[1:]:
        if (comment := COMMENT.match(line)) is not None:
            if last is not None and helps.get(last):
                helps[last] += " " + comment[1].strip()
            else:
                pending.append(comment[1].strip())
            continue
        field = FIELD.match(line)
        if field is None or field[1] not in names:
            last, pending = None, []
            continue
        last = field[1]
        helps[last] = " ".join([*pending, (field[2] or "").strip()]).strip()
        pending = []
        if not helps[last]:
            del helps[last]
    return helps


def options_parser(options_class: type, prog: str | None = None) -> ArgumentParser:
    """A parser of `options_class` (required fields positional) with help texts and choices."""
    doc = inspect.getdoc(options_class) or ""
    prog = prog or next(iter(re.findall(r"`(cli\.py \w+)`", doc)), None)  # "Options of `cli.py sweep`"
    parser = OneLineErrorParser(prog=prog, description=doc)
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of these options")
    parser.add_class_arguments(options_class, as_positional=True, sub_configs=True)
    helps = field_help(options_class)
    for f in dataclasses.fields(options_class):  # a nested options dataclass: `--slurm.partition`
        if dataclasses.is_dataclass(f.type):
            helps |= {f"{f.name}.{key}": text for key, text in field_help(f.type).items()}
    hints = typing.get_type_hints(options_class, include_extras=True)
    parser.ranges = {f.name: text for f in dataclasses.fields(options_class) if (text := describe(hints[f.name]))}
    choices = getattr(options_class, "CHOICES", {})
    for action in internals.parser_actions(parser):
        text = helps.get(action.dest, "")
        if action.dest in choices:
            text = f"{text}; choices: {', '.join(map(str, choices[action.dest]))}".lstrip("; ")
        if text:
            action.help = text
    return parser


def parse_options(options_class: type, args: list[str], prog: str | None = None):
    """Parse `args` into an instance of the options dataclass (--help, --config work)."""
    parser = options_parser(options_class, prog)
    config = parser.parse_args(bare_flags(options_class, [dashes_to_underscores(a) for a in args]))
    values = {f.name: config[f.name] for f in dataclasses.fields(options_class) if f.init}
    for f in dataclasses.fields(options_class):  # a nested options dataclass arrives as a Namespace
        if dataclasses.is_dataclass(f.type) and f.init and not isinstance(values[f.name], f.type):
            values[f.name] = f.type(**vars(values[f.name]))
    return options_class(**values)


def bare_flags(options_class: type, args: list[str]) -> list[str]:
    """`--cold_start` alone -> `--cold_start=true`, `--no_cold_start` -> `--cold_start=false`, for the
    dataclass's bool options (jsonargparse wants a value)."""
    flags = {f"--{f.name}" for f in dataclasses.fields(options_class) if f.type in (bool, "bool")}
    following = [*args[1:], ""]
    out = []
    for a, b in zip(args, following):
        if a in flags and b.lower() not in ("true", "false"):
            a = f"{a}=true"
        elif a.startswith("--no_") and f"--{a[len('--no_') :]}" in flags:
            a = f"--{a[len('--no_') :]}=false"
        out.append(a)
    return out
