"""The environment variables this project reads and the folders it writes, named in one place.

Output layout under a run's `--run.out_dir` (default `out`):

    runs/<name>-<YYYYmmdd-HHMMSS>-<pid>/    one `cli.py fit`: record.json, config, checkpoints/, wandb/; made by
                                             global rank 0 only, and continued by a fit that resumes from
                                             one of its checkpoints (`checkpoint_run_dir`)
    sweeps/<study>/optuna.db                 a local Optuna study (`cli.py sweep`), and its .lock
    sweeps/<study>/trial-<n>/                a trial's own out_dir (its runs/ below it)
    sweeps/<study>/wandb/                    links to every trial's offline W&B run (`offline_runs_view`): one
                                             folder `wandb leet` browses, made when the sweep ends

A sweep passes a trial its places through the environment of the child it starts, never its own:
`PE_OUT_DIR` (the trial's out_dir), `PE_OUT_ROOT` (the sweep's out_dir, searched by `init_from=run:NAME`)
and `PE_SWEEP` (the study); they are the defaults of `--run.out_dir`, `--run.out_root` and `--run.sweep`.
The rest of a trial's environment is the sweep's, less its storage URL and the launcher's process-placement
variables (`LAUNCHER_ENV`, `LAUNCHER_ENV_PREFIXES`): a sweep started as task 1 of `srun -n 2` or as a
torchrun rank is one process of a job, and its trials are jobs of their own, never rank 1 of that job.
"""

import errno
import os
import time
from pathlib import Path

from pe_core.data_paths import DATA_ROOT_ENV, TOKENIZER_CACHE_ENV, data_root  # noqa: F401 (named here too)
from pe_core.errors import ConfigError

OUT_DIR_ENV = "PE_OUT_DIR"  # default of --run.out_dir
OUT_ROOT_ENV = "PE_OUT_ROOT"  # default of --run.out_root
SWEEP_ENV = "PE_SWEEP"  # default of --run.sweep
PARENT_ENV = "PE_PARENT_PID"  # a trial's supervising sweep process (sweep/children.py)
STORAGE_ENV = "PE_SWEEP_STORAGE"  # default of `cli.py sweep --storage`: a URL with a password stays out of `ps`
TRIAL_GPUS_ENV = "PE_TRIAL_GPUS"  # the GPUs a sweep gave its trial (--devices_per_trial): fewer visible is an error
TRIAL_GPU_MEMORY_ENV = "PE_TRIAL_GPU_MEMORY_FRACTION"  # --trials_per_gpu K: each trial's cap on its GPU's memory
TRIAL_CPUS_ENV = "PE_TRIAL_CPUS"  # the cores (e.g. "4,5") a sweep gave its trial's worker slot: the trial pins itself
ENSEMBLE_OUT_DIRS_ENV = "PE_ENSEMBLE_OUT_DIRS"  # a sweep's seed ensemble child: {seed: that member's trial folder}
PRUNE_FILE = "prune_requested"  # in a member's run folder: its sweep pruned its trial; the ensemble freezes it
FAULT_ENV = "PE_FAULT_AT"  # tests only: the sweep kills itself at this named step (failpoints.py)
SWEEP_PARAMS_ENV = "PE_SWEEP_PARAMS"  # a sweep's trial: the parameters its sweep varied (run names, W&B config)
UMASK_ENV = "PE_UMASK"  # the umask of every command and trial, default 077 (pe_sweeps/permissions.py)
CACHE_ENV = "PE_CACHE_DIR"  # where help texts are kept (pe_sweeps/help_cache.py); empty: none kept

# What a launcher (SLURM's srun / sbatch, torchrun, Lightning's own DDP launcher, LSF's jsrun, mpirun) sets to
# place a process in its job, and Lightning reads to find its rank: SLURMEnvironment (SLURM_NTASKS,
# SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_JOB_NAME, ...), TorchElasticEnvironment (RANK, GROUP_RANK,
# LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, TORCHELASTIC_RUN_ID), LightningEnvironment (LOCAL_RANK, NODE_RANK,
# GROUP_RANK, MASTER_ADDR, MASTER_PORT), LSFEnvironment (JSM_NAMESPACE_*, LSB_DJOB_RANKFILE), rank_zero_only
# (RANK, LOCAL_RANK, SLURM_PROCID, JSM_NAMESPACE_RANK) and seed_everything (PL_GLOBAL_SEED, PL_SEED_WORKERS,
# which Lightning's launcher hands its DDP ranks). None of them reaches a trial (sweep/trial_child.py `child_env`).
LAUNCHER_ENV = (
    "RANK", "LOCAL_RANK", "GLOBAL_RANK", "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "LSB_DJOB_RANKFILE",
    "PL_GLOBAL_SEED", "PL_SEED_WORKERS",
)  # fmt: skip
LAUNCHER_ENV_PREFIXES = ("SLURM_", "TORCHELASTIC_", "JSM_NAMESPACE_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_")

PACKAGE = Path(__file__).resolve().parent
# What a sweep file's `program: cli.py` runs: the checkout's cli.py, else the installed package's __main__.py
PROGRAMS = (PACKAGE.parent / "cli.py", PACKAGE / "__main__.py")
SHIPPED = ("configs", "sweeps")  # folders of YAML files shipped with the project (package data of the wheel)

DEFAULT_OUT_DIR = "out"
MAX_NAME_BYTES = 200  # a run directory adds -<date>-<time>-<pid> (< 40 bytes); file systems allow 255
RUNS, SWEEPS, STUDY_DB = "runs", "sweeps", "optuna.db"
TRIAL_OFFLINE_RUNS = "trial-*/runs/*/wandb/offline-run-*"  # a study's trials' offline W&B run folders
CHECKPOINTS, RECORD_FILE = "checkpoints", "record.json"  # in a run folder


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


def launch_rank(environ=os.environ) -> int:
    """This process's global rank as its launcher placed it, before any trainer exists: torchrun's RANK,
    srun's SLURM_PROCID, jsrun's JSM_NAMESPACE_RANK, else Lightning's own launcher (NODE_RANK, LOCAL_RANK:
    a rank other than 0 in either is not rank 0). 0 for a process no launcher placed."""
    for name in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if environ.get(name, "").isdigit():
            return int(environ[name])
    local, node = environ.get("LOCAL_RANK", "0"), environ.get("NODE_RANK", environ.get("GROUP_RANK", "0"))
    return int(local.isdigit() and int(local) > 0 or node.isdigit() and int(node) > 0)


def checkpoint_run_dir(checkpoint: str | Path) -> Path | None:
    """The run folder a checkpoint was written in, `<run>/checkpoints/<file>.ckpt` with `<run>/record.json`;
    None for a checkpoint elsewhere."""
    path = Path(checkpoint)
    run = path.parent.parent
    return run if path.parent.name == CHECKPOINTS and (run / RECORD_FILE).is_file() else None


def make_dir(path: Path, option: str) -> Path:
    """`mkdir -p path`; a folder that cannot be made (a file in the way, read-only, no permission, a name too
    long) is a one-line ConfigError naming `option`. A full disk keeps its OSError (cli.py: `disk full`)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise
        reason = "a file is in the way" if error.errno in (errno.EEXIST, errno.ENOTDIR) else error.strerror
        raise ConfigError(f"{option}: cannot create the folder {path} ({reason}); choose a writable folder") from None
    return path


def study_dir(out_dir: str | Path, study: str) -> Path:
    return Path(out_dir) / SWEEPS / study


def study_db(out_dir: str | Path, study: str) -> Path:
    return study_dir(out_dir, study) / STUDY_DB


def trial_dir(out_dir: str | Path, study: str, number: int) -> Path:
    return study_dir(Path(out_dir).resolve(), study) / f"trial-{number}"


def offline_runs_view(study: Path) -> Path | None:
    """`<study>/wandb/`, a folder with a link to each trial's offline W&B run folder (relative, so the study folder
    can move), made or brought up to date; None when the study has no offline run. `wandb leet DIR` browses the
    runs of one folder, and a sweep's lie in one folder per trial run."""
    runs = sorted(Path(study).glob(TRIAL_OFFLINE_RUNS))
    if not runs:
        return None
    view = Path(study) / "wandb"
    view.mkdir(exist_ok=True)
    for run in runs:
        link = view / run.name  # offline-run-<time>-<id>: unique per start of a run
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(run, view), target_is_directory=True)
    return view


def launcher_variable(name: str) -> bool:
    """Whether `name` places a process in its launcher's job (LAUNCHER_ENV, LAUNCHER_ENV_PREFIXES)."""
    return name in LAUNCHER_ENV or name.startswith(LAUNCHER_ENV_PREFIXES)


def trial_base_env(environ: dict[str, str]) -> dict[str, str]:
    """A trial's environment before the sweep adds its own variables: `environ` (the sweep's) without the
    launcher's placement variables and without the study's storage URL (a trial never needs it)."""
    return {k: v for k, v in environ.items() if not launcher_variable(k) and k != STORAGE_ENV}


def trial_env(trial_out_dir: str | Path, out_root: str | Path, study: str) -> dict[str, str]:
    """The variables a sweep adds to its trial child's environment."""
    return {OUT_DIR_ENV: str(trial_out_dir), OUT_ROOT_ENV: str(out_root), SWEEP_ENV: study}


def program_path(program: str, cwd: str | Path) -> str:
    """A sweep file's `program` as a trial runs it: as given when it exists in the sweep's working folder;
    `cli.py` is otherwise this project's command line, wherever it is installed."""
    if (Path(cwd) / program).exists() or Path(program).name != "cli.py":
        return program
    return str(next(path for path in PROGRAMS if path.exists()))


def is_project_program(path: str | Path) -> bool:
    """Whether `path` is this project's command line (the checkout's cli.py or the package's __main__.py)."""
    return Path(path).resolve() in PROGRAMS


def shipped_path(path: str) -> str:
    """`path` as given when it exists; else, when it names a file the project ships (`configs/x.yaml`,
    `sweeps/x.yaml`), that file in the checkout or the installed package, so the documented commands run from
    any working folder."""
    relative = Path(path)
    if relative.exists() or relative.is_absolute() or relative.parts[:1] not in [(name,) for name in SHIPPED]:
        return path
    found = [base / relative for base in (PACKAGE, PACKAGE.parent) if (base / relative).is_file()]
    return str(found[0]) if found else path


def shipped_files(argv: list[str]) -> list[str]:
    """`--config configs/x.yaml` and `sweep sweeps/x.yaml` find the project's own files from any folder
    (`shipped_path`); any other argument, and a file that exists where it is given, are left alone."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith("--config="):
            out[i] = "--config=" + shipped_path(arg.split("=", 1)[1])
        elif i and out[i - 1] == "--config" or i == 1 and out[0] == "sweep":
            out[i] = shipped_path(arg)
    return out
