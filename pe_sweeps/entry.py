"""The command line's front door (`pe-sweeps`, `python -m pe_sweeps`, `python cli.py`): `compare` reads JSON
records and starts without importing torch or Lightning; every other command goes to pe_sweeps/cli.py."""

import sys


def compare_command(argv: list[str]) -> None:
    """`compare ...` with the light imports only; a ConfigError is one line and exit 2, as every command."""
    from pe_sweeps.cli_options import dashes_to_underscores
    from pe_sweeps.errors import ConfigError
    from pe_sweeps.tracking.compare import compare_main

    try:
        compare_main([dashes_to_underscores(a) for a in argv])
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def main() -> None:
    if sys.argv[1:2] == ["compare"]:
        return compare_command(sys.argv[2:])
    from pe_sweeps.cli import main as cli_main

    return cli_main()
