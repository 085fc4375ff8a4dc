"""`cli.py sweep ...`: parses the sweep's options and hands them to the runner (tracking/sweep.py), the SLURM
launcher (tracking/slurm.py) or the tune-then-reseed protocol (tracking/reseed.py). Imports neither torch nor
Lightning: a sweep process only schedules trials, each trial (or the warm-start server) imports them itself."""

from pe_sweeps.cli_options import parse_options


def sweep_main(args: list[str]):
    """`cli.py sweep FILE [--workers N] [--storage URL] [--study-name NAME] [--reseed N --per KEY] ...`"""
    from pe_sweeps.tracking.slurm import check_launcher_options, launch
    from pe_sweeps.tracking.sweep import SweepOptions, run_sweep

    opts = parse_options(SweepOptions, args)
    if opts.launcher == "slurm":  # the tasks of a SLURM job array run this sweep
        return launch(opts)
    check_launcher_options(opts)  # --jobs, --dry_run or --slurm.* without --launcher slurm: one line
    if opts.reseed or opts.per:  # the tune-then-reseed protocol drives the same sweep runner twice
        from pe_sweeps.tracking.reseed import run_reseed

        return run_reseed(opts)
    return run_sweep(opts)
