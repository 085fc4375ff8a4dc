"""Command-line helpers shared by the extra subcommands (sweep, compare, probe)."""

import dataclasses

from jsonargparse import CLI


def dashes_to_underscores(arg: str) -> str:
    """`--study-name=x` -> `--study_name=x`: both spellings work for dataclass options."""
    if not arg.startswith("--"):
        return arg
    key, sep, value = arg[2:].partition("=")
    return "--" + key.replace("-", "_") + sep + value


def bare_flags(options_class: type, args: list[str]) -> list[str]:
    """`--cold_start` alone -> `--cold_start=true` for the dataclass's bool options (jsonargparse wants a value)."""
    flags = {f"--{f.name}" for f in dataclasses.fields(options_class) if f.type in (bool, "bool")}
    following = [*args[1:], ""]
    return [f"{a}=true" if a in flags and b.lower() not in ("true", "false") else a for a, b in zip(args, following)]


def parse_options(options_class: type, args: list[str]):
    """Parse `args` into an instance of the options dataclass (jsonargparse: --help, --config work)."""
    return CLI(options_class, args=bare_flags(options_class, [dashes_to_underscores(a) for a in args]))
