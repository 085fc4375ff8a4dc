"""The commands that import no Lightning (pe_sweeps/cli.py): `cli.py probe ...` (torch only) and, importing
neither torch nor Lightning, `cli.py sweep ...` (a sweep process only schedules
trials; each trial, or the warm-start server, imports them itself) and `cli.py compare ...` (it reads JSON
records). pe_sweeps/entry.py runs them without loading pe_sweeps/cli.py; cli.py dispatches to the same functions.
Also `cli.py --help` (`overview`), which needs none of them either."""

import dataclasses
import textwrap

from pe_sweeps.cli_options import dashes_to_underscores, parse_options
from pe_sweeps.exits import ctrl_c_raises

SUMMARY = "Train, sweep and compare Transformers parameterised by their positional encoding."
SUBCOMMANDS = {
    "fit": "train a model (LightningCLI: --config FILE, --model.*, --data.*, --trainer.*, --run.*)",
    "validate": "evaluate a checkpoint on the validation set (--ckpt_path)",
    "test": "evaluate a checkpoint on the test set (--ckpt_path)",
    "predict": "run a checkpoint's predictions (--ckpt_path)",
    "sweep": "run a W&B sweep file with Optuna, offline, resumable, in parallel (--reseed: tune, then reseed)",
    "compare": "compare runs (local records or a W&B project): tables, ranks, tests, an HTML report",
    "probe": "probe what an encoding learned: absolute and relative position probes, heatmaps",
}


def sweep_main(args: list[str]):
    """`cli.py sweep FILE [--workers N] [--storage URL] [--study-name NAME] [--reseed N --per KEY] ...`"""
    from pe_sweeps.sweep.options import SweepOptions

    opts = parse_options(SweepOptions, args)  # --help ends here, before the engine (Optuna, W&B) is imported
    from pe_sweeps.launchers.slurm import check_launcher_options, launch
    from pe_sweeps.sweep.run import run_sweep

    ctrl_c_raises()  # the sweep stops its trials and keeps its results from here (pe_sweeps/exits.py)
    if opts.launcher == "slurm":  # the tasks of a SLURM job array run this sweep
        return launch(opts)
    from pe_sweeps.sweep.plan import check_plan_options, plan_sweep

    check_plan_options(opts)
    if opts.dry_run:  # on this machine: the trials and an estimate of their time, nothing run or opened
        check_launcher_options(dataclasses.replace(opts, dry_run=False))
        return plan_sweep(opts)
    check_launcher_options(opts)  # --jobs or --slurm.* without --launcher slurm: one line
    if opts.reseed or opts.per:  # the tune-then-reseed protocol drives the same sweep runner twice
        from pe_sweeps.sweep.reseed import run_reseed

        return run_reseed(opts)
    return run_sweep(opts, args)


def compare_main(args: list[str]):
    """`cli.py compare [--sweep NAME] [--metric M] [--format csv|json|markdown] [--report DIR]`"""
    from pe_sweeps.compare.command import compare_main as main

    ctrl_c_raises()
    return main([dashes_to_underscores(a) for a in args])


def probe_main(args: list[str]):
    """`cli.py probe (--encoding NAME | --ckpt PATH | --hf-model NAME_OR_DIR | --table FILE) ...`: the probes
    need torch and scikit-learn, never Lightning; --help and a bad option only the encoding registry."""
    from pe_sweeps.probe_options import ProbeOptions

    opts = parse_options(ProbeOptions, args)
    from pe_sweeps.probes import show_probe

    ctrl_c_raises()
    return show_probe(opts)


LIGHT_COMMANDS = {"sweep": sweep_main, "compare": compare_main, "probe": probe_main}


def overview(columns: int = 80) -> str:
    """`cli.py --help`: every subcommand and what it does, LightningCLI's and ours, within `columns` (wrapped
    between words, never inside an option)."""
    width = max(map(len, SUBCOMMANDS))
    indent = " " * (width + 4)
    lines = []
    for name, text in SUBCOMMANDS.items():
        wrapped = textwrap.wrap(text, columns - len(indent), break_long_words=False, break_on_hyphens=False)
        lines += [f"  {name:<{width}}  {wrapped[0]}", *(indent + line for line in wrapped[1:])]
    return "\n".join([
        "usage: cli.py SUBCOMMAND [options]   (cli.py SUBCOMMAND --help: its options)", "",
        *textwrap.wrap(SUMMARY, columns), "", "subcommands:", *lines,
    ])  # fmt: skip
