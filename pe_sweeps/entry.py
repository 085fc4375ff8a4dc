"""The command line's front door (`pe-sweeps`, `python -m pe_sweeps`, `python cli.py`): `compare` and `sweep`
start without importing torch or Lightning (pe_sweeps/light_commands.py); every other command goes to
pe_sweeps/cli.py."""

import sys


def main() -> None:
    """Returns None for every command: the `pe-sweeps` script passes main()'s value to sys.exit, which would print
    a returned study and exit 1."""
    from pe_sweeps.exits import exit_in_one_line
    from pe_sweeps.permissions import apply_umask
    from pe_sweeps.tracking.children import start_watchdog

    try:
        apply_umask()  # folders 0700, files 0600 unless $PE_UMASK says otherwise (pe_sweeps/permissions.py)
    except Exception as error:
        exit_in_one_line(error)
        raise
    start_watchdog()  # a sweep's trial (or a sweep a trial started) exits with its sweep: tracking/children.py
    if sys.argv[1:2] not in (["compare"], ["sweep"]):
        from pe_sweeps.cli import cli_main

        cli_main()
        return
    from pe_sweeps.layout import shipped_files
    from pe_sweeps.light_commands import LIGHT_COMMANDS

    argv = shipped_files(sys.argv[1:])  # sweeps/x.yaml from any folder, as cli.py does
    try:
        LIGHT_COMMANDS[argv[0]](argv[1:])
    except Exception as error:  # one line and exit 2 for a bad option or file, as every command
        exit_in_one_line(error)
        raise
