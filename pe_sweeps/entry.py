"""The command line's front door (`pe-sweeps`, `python -m pe_sweeps`, `python cli.py`): `compare` and `sweep`
start without importing torch or Lightning, `probe` without Lightning (pe_sweeps/light_commands.py); every other
command goes to pe_sweeps/cli.py. `cli.py --help` imports neither, and a subcommand's --help is printed from a cache
once built (pe_sweeps/help_cache.py)."""

import signal
import sys


def main() -> None:
    """Returns None for every command: the `pe-sweeps` script passes main()'s value to sys.exit, which would print
    a returned study and exit 1. Ctrl-C before a command handles it itself (while it imports, builds its parser,
    creates its study) is one line and exit 130, not a KeyboardInterrupt traceback."""
    from pe_sweeps.exits import exit_at_once_on_ctrl_c

    exit_at_once_on_ctrl_c()  # until the command's imports are done (pe_sweeps/exits.py)
    try:
        run_command()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not interrupt the line
        command = " ".join(["cli.py", *sys.argv[1:2]])
        print(f"error: {command} stopped by SIGINT (Ctrl-C)", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None


def run_command() -> None:
    """Run the command `sys.argv` names."""
    from pe_sweeps.exits import exit_in_one_line
    from pe_sweeps.permissions import apply_umask
    from pe_sweeps.sweep.children import start_watchdog

    try:
        apply_umask()  # folders 0700, files 0600 unless $PE_UMASK says otherwise (pe_sweeps/permissions.py)
    except Exception as error:
        exit_in_one_line(error)
        raise
    start_watchdog()  # a sweep's trial (or a sweep a trial started) exits with its sweep: sweep/children.py
    if sys.argv[1:] in (["-h"], ["--help"]):
        from pe_sweeps.light_commands import overview

        print(overview())
        return
    from pe_sweeps.help_cache import cached_help, is_help, recorded_help

    if is_help(sys.argv[1:]):  # printed from the cache, or run as below and kept (help_cache.py)
        text = cached_help(sys.argv[1:])
        if text is not None:
            sys.stdout.write(text)
            return
        with recorded_help(sys.argv[1:]):
            return run_subcommand()
    run_subcommand()


def run_subcommand() -> None:
    """Run a subcommand: `compare`, `sweep` and `probe` without pe_sweeps/cli.py (Lightning), the rest in it."""
    from pe_sweeps.exits import ctrl_c_raises, exit_in_one_line

    if sys.argv[1:2] not in (["compare"], ["sweep"], ["probe"]):
        from pe_sweeps.cli import cli_main

        ctrl_c_raises()
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
