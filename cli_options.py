"""Command-line helpers shared by the extra subcommands (sweep, compare, probe); imported by cli.py and probes."""

from jsonargparse import CLI


def dashes_to_underscores(arg: str) -> str:
    """`--study-name=x` -> `--study_name=x`: both spellings work for dataclass options."""
    if not arg.startswith("--"):
        return arg
    key, sep, value = arg[2:].partition("=")
    return "--" + key.replace("-", "_") + sep + value


def parse_options(options_class: type, args: list[str]):
    """Parse `args` into an instance of the options dataclass (jsonargparse: --help, --config work)."""
    return CLI(options_class, args=[dashes_to_underscores(a) for a in args])
