"""jsonargparse's parse errors as one line.

jsonargparse reports a bad command-line value inside `--model` or `--data` as the nested report of a
Union of classes (20-30 lines, types written as `<class 'int'>`), after the whole usage text. `cli.py`
prints instead the full key, what it expects and what it got, e.g.
`error: --model.arch.dim: expected an integer, got 'abc' (options: cli.py fit --help)`.
"""

import os
import re
import sys

from jsonargparse import ArgumentParser

from pe_core.errors import TYPE_WORDS
from pe_sweeps.help_format import WrappedHelpFormatter

TYPE_NAMES = {kind.__name__: words for kind, words in TYPE_WORDS.items()} | {
    "dict": "a mapping such as {key: value}", "list": "a list such as [a, b]"}  # fmt: skip
NOISE = re.compile(
    r"^(Does not validate against any of the Union subtypes|Subtypes: |Errors:|Given value type: |"
    r"- Problem with given class_path |- Expected a <class 'NoneType'>$|Given value: NestedArg\()"
)
EXPECTED = re.compile(r"(?:- )?Expected a (?:<class '(\w+)'>|typing\.Literal\[(.*)\])")
GIVEN = re.compile(r"(?:Given value|Expected .*\. Got value): (.*)$")
# a range declared with the option (pe_core/ranges.py), as jsonargparse reports pydantic's check of it
RANGE = re.compile(
    r"validation error for constrained-(int|float)\s+Input should be (.*?) \[type=[^\]]*\]"
    r".*?(?:Got|Given) value: ([^\n]*)",
    re.S,
)
RANGE_WORDS = (("greater than or equal to ", ">= "), ("greater than ", "> "), ("less than or equal to ", "<= "),
               ("less than ", "< "))  # fmt: skip


def range_error(key: str, message: str, declared: str | None = None) -> str | None:
    """`--model.arch.dim must be an integer >= 1, got 0` from pydantic's report of a declared range, which names
    the one bound broken; `declared` (`an integer in [0, 4294967295]`, ranges.describe) names the whole range."""
    match = RANGE.search(message)
    if match is None:
        return None
    kind, should, given = match.groups()
    bound = next((should.replace(words, op) for words, op in RANGE_WORDS if should.startswith(words)), "")
    if kind == "float" and given.strip().lower().lstrip("+-.") in ("nan", "inf", "infinity"):  # YAML's .nan, .inf
        return f"--{key} must be a finite number, got {given.strip()}"
    if not bound:  # not a number at all: the same words as any other type error
        return f"--{key}: expected {'an integer' if kind == 'int' else 'a number'}, got {given.strip()!r}"
    if declared:
        return f"--{key} must be {declared}, got {given.strip()}"
    return f"--{key} must be {'an integer' if kind == 'int' else 'a finite number'} {bound}, got {given.strip()}"


def type_name(name: str) -> str:
    return TYPE_NAMES.get(name, name)


def one_line(message: str, ranges: dict[str, str] | None = None) -> str:
    """The parse error `message` as one line: `--KEY: reason` where the report names a key. `ranges`: {key: its
    whole declared range} where the parser knows it (`options_parser`)."""
    keys = re.findall(r'Parser key "([^"]+)":', message)
    key = ".".join(keys)
    if key and (ranged := range_error(key, message, (ranges or {}).get(key))):
        return ranged
    after = message.split(f'Parser key "{keys[-1]}":', 1)[-1] if keys else message
    lines = [line.strip() for line in after.splitlines() if line.strip() and not NOISE.match(line.strip())]
    expected = [m.group(1) or m.group(2) for line in lines if (m := EXPECTED.match(line))]
    given = next((m[1] for line in lines if (m := GIVEN.match(line))), None)
    if expected and given is not None:
        reason = f"expected {' or '.join(map(type_name, expected))}, got {given!r}"
    else:
        reason = " ".join(lines)
        reason = re.sub(r"<class '(\w+)'>", lambda m: type_name(m[1]), reason)
    if key and reason.startswith("unrecognized arguments: --"):  # inside a class: name the full key
        return reason.replace("--", f"--{key}.")
    return f"--{key}: {reason}" if key else reason


class OneLineErrors:
    """Mixin for a jsonargparse parser: a parse error is one line (`one_line`) and exit 2, without the usage
    text. Parsers that do not exit on error (jsonargparse's inner ones) and JSONARGPARSE_DEBUG keep the
    library's behaviour."""

    ranges: dict[str, str] = {}  # {key: its declared range in words}, for a range error's line (options_parser)

    def __init__(self, *args, formatter_class=WrappedHelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)  # headings within the help's width

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        prog = (getattr(ex, "subcommand_parser", None) or self).prog.replace(" [options]", "")
        sys.stderr.write(f"error: {one_line(message, self.ranges)} (options: {prog} --help)\n")
        self.exit(2)


class OneLineErrorParser(OneLineErrors, ArgumentParser):
    """jsonargparse's ArgumentParser with one-line parse errors (the sweep, compare and probe options)."""
