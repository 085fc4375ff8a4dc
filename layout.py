"""The environment variables this project reads and the folders it writes, named in one place.

Output layout under a run's `--run.out_dir` (default `out`):

    runs/<name>-<YYYYmmdd-HHMMSS>-<pid>/    one `cli.py fit`: record.json, config, checkpoints/, wandb/
    sweeps/<study>/optuna.db                 a local Optuna study (`cli.py sweep`), and its .lock
    sweeps/<study>/trial-<n>/                a trial's own out_dir (its runs/ below it)

A sweep passes a trial its places through the environment of the child it starts, never its own:
`PE_OUT_DIR` (the trial's out_dir), `PE_OUT_ROOT` (the sweep's out_dir, searched by `init_from=run:NAME`)
and `PE_SWEEP` (the study); they are the defaults of `--run.out_dir`, `--run.out_root` and `--run.sweep`.
"""

import os
import time
from pathlib import Path

OUT_DIR_ENV = "PE_OUT_DIR"  # default of --run.out_dir
OUT_ROOT_ENV = "PE_OUT_ROOT"  # default of --run.out_root
SWEEP_ENV = "PE_SWEEP"  # default of --run.sweep
PARENT_ENV = "PE_PARENT_PID"  # a trial's supervising sweep process (tracking/children.py)
STORAGE_ENV = "PE_SWEEP_STORAGE"  # default of `cli.py sweep --storage`: a URL with a password stays out of `ps`
FAULT_ENV = "PE_FAULT_AT"  # tests only: the sweep kills itself at this named step (tracking/failpoints.py)
TOKENIZER_CACHE_ENV = "PE_TOKENIZER_CACHE"  # overrides the tokenizer cache folder (datamodules/text.py)

DEFAULT_OUT_DIR = "out"
RUNS, SWEEPS, STUDY_DB = "runs", "sweeps", "optuna.db"


def runs_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / RUNS


def new_run_dir(out_dir: str | Path, name: str) -> Path:
    """A fresh run folder, unique by time and process id."""
    return runs_dir(out_dir) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def parent_run_dir(out_dir: str | Path, name: str) -> Path | None:
    """In a DDP rank that Lightning started from rank 0's process: rank 0's run folder (named with its pid,
    our parent's), the newest if several; None when there is none (e.g. ranks started by torchrun)."""
    found = sorted(runs_dir(out_dir).glob(f"{name}-*-{os.getppid()}"))
    return found[-1] if found else None


def study_dir(out_dir: str | Path, study: str) -> Path:
    return Path(out_dir) / SWEEPS / study


def study_db(out_dir: str | Path, study: str) -> Path:
    return study_dir(out_dir, study) / STUDY_DB


def trial_dir(out_dir: str | Path, study: str, number: int) -> Path:
    return study_dir(Path(out_dir).resolve(), study) / f"trial-{number}"


def trial_env(trial_out_dir: str | Path, out_root: str | Path, study: str) -> dict[str, str]:
    """The variables a sweep adds to its trial child's environment."""
    return {OUT_DIR_ENV: str(trial_out_dir), OUT_ROOT_ENV: str(out_root), SWEEP_ENV: study}
