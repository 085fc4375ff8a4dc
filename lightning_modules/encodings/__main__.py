"""`python -m lightning_modules.encodings [NAME ...]`: each encoding's options with their types, choices or
ranges, and defaults, read from its constructor's signature (what `--model.arch.encoding_options` accepts)."""

import sys

from lightning_modules.encodings import ENCODINGS, check_encoding_name, option_help
from pe_core.errors import ConfigError


def main(names: list[str]) -> int:
    try:
        for name in names:
            check_encoding_name(name)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name in names or ENCODINGS:
        print(f"{name}:")
        for line in option_help(name):
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
