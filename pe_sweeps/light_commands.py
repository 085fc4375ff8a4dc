"""The commands that import neither torch nor Lightning: `cli.py sweep ...` (a sweep process only schedules
trials; each trial, or the warm-start server, imports them itself) and `cli.py compare ...` (it reads JSON
records). pe_sweeps/entry.py runs them without loading pe_sweeps/cli.py; cli.py dispatches to the same functions."""

from pe_sweeps.cli_options import dashes_to_underscores, parse_options


def sweep_main(args: list[str]):
    """`cli.py sweep FILE [--workers N] [--storage URL] [--study-name NAME] [--reseed N --per KEY] ...`"""
    from pe_sweeps.launchers.slurm import check_launcher_options, launch
    from pe_sweeps.sweep.run import SweepOptions, run_sweep

    opts = parse_options(SweepOptions, args)
    if opts.launcher == "slurm":  # the tasks of a SLURM job array run this sweep
        return launch(opts)
    check_launcher_options(opts)  # --jobs, --dry_run or --slurm.* without --launcher slurm: one line
    if opts.reseed or opts.per:  # the tune-then-reseed protocol drives the same sweep runner twice
        from pe_sweeps.sweep.reseed import run_reseed

        return run_reseed(opts)
    return run_sweep(opts, args)


def compare_main(args: list[str]):
    """`cli.py compare [--sweep NAME] [--metric M] [--format csv|json|markdown] [--report DIR]`"""
    from pe_sweeps.compare.command import compare_main as main

    return main([dashes_to_underscores(a) for a in args])


LIGHT_COMMANDS = {"sweep": sweep_main, "compare": compare_main}
