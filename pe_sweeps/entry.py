"""The command line's front door (`pe-sweeps`, `python -m pe_sweeps`, `python cli.py`): `compare` and `sweep`
start without importing torch or Lightning (a sweep process only schedules trials; each trial imports them);
every other command goes to pe_sweeps/cli.py."""

import sys


def light_command(name: str, argv: list[str]) -> None:
    """`compare ...` / `sweep ...` with the light imports only; errors end as every command's do
    (pe_sweeps/exits.py: one line and exit 2 for a bad option or file). Returns None: the `pe-sweeps` script
    passes main()'s value to sys.exit, which would print a returned study and exit 1."""
    from pe_sweeps.exits import exit_in_one_line
    from pe_sweeps.layout import shipped_path

    try:
        if name == "compare":
            from pe_sweeps.cli_options import dashes_to_underscores
            from pe_sweeps.tracking.compare import compare_main

            compare_main([dashes_to_underscores(a) for a in argv])
            return
        from pe_sweeps.sweep_command import sweep_main

        sweep_main([shipped_path(argv[0]), *argv[1:]] if argv else argv)  # sweeps/x.yaml from any folder
    except Exception as error:
        exit_in_one_line(error)
        raise


def main() -> None:
    from pe_sweeps.tracking.children import start_watchdog

    start_watchdog()  # a sweep's trial (or a sweep a trial started) exits with its sweep: tracking/children.py
    if sys.argv[1:2] in (["compare"], ["sweep"]):
        return light_command(sys.argv[1], sys.argv[2:])
    from pe_sweeps.cli import cli_main

    cli_main()
