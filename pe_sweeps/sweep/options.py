"""The options of `cli.py sweep` (`SweepOptions`), apart from the sweep's code so that every module of the
sweep can name them without importing the runner (sweep/run.py checks them: `check_options`)."""

import sys
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Le

from pe_core.errors import ConfigError
from pe_core.ranges import check_ranges
from pe_sweeps.sweep.slurm_options import SlurmOptions

SamplerSeed = Annotated[int, Ge(0), Le(2**32 - 1)]  # Optuna's samplers seed numpy, which takes [0, 2^32 - 1]
# beyond an hour, a dead trial would be found after hours; far beyond, the heartbeat thread's wait overflows
HeartbeatSeconds = Annotated[int, Ge(1), Le(3600)]
ProgressSeconds = Annotated[int, Ge(1), Le(86400)]


@dataclass
class SweepOptions:
    """Options of `cli.py sweep`."""

    file: str  # a W&B sweep file (sweeps/*.yaml)
    study_name: str | None = None  # default: the file's `name:`, else its file name (plus the --set values)
    storage: str | None = None  # default: $PE_SWEEP_STORAGE, else sqlite:///<out_dir>/sweeps/<name>/optuna.db,
    # one per sweep file (its `name:` or file name), shared by the studies --set and --reseed make; per
    # --study_name when given
    workers: int | Literal["auto"] = 1  # trials run in parallel by this process; auto: one per core on CPU
    # (cores // --threads_per_trial), (GPUs // --devices_per_trial) x --trials_per_gpu on GPUs
    devices_per_trial: int | None = None  # GPUs given to each trial (of this sweep's CUDA_VISIBLE_DEVICES);
    # default 1 when GPUs are visible (trials side by side, never DDP over all of them), or the number the
    # sweep's own trainer.devices sets; 0: not pinned (every visible GPU; the CPU without GPUs)
    threads_per_trial: int = 0  # each trial's OMP_NUM_THREADS; 0 = the cores split evenly among the running trials
    trials_per_gpu: int = 1  # with --devices-per-trial: trials that share each group of GPUs (small models), each
    # capped at (1 - 10 %) / K of a GPU's memory (trial_devices.py); every trial runs on its own share of the cores
    trials_per_device: int | None = None  # deprecated name of --trials_per_gpu (one warning line)
    ensemble_seeds: int = 1  # grid: run up to this many seeds of one grid point (its `seed_everything` values) as
    # one seed ensemble, one child training them as one batched model, each still its own trial (CPU only)
    cold_start: bool = False  # start every trial as a new interpreter, never from the fork server
    warm_any: bool = False  # fork any Python program the sweep's interpreter runs, not only cli.py (tests)
    out_dir: str = "out"  # studies, trial folders and their runs go under <out_dir>/sweeps/
    seed: SamplerSeed = 0  # sampler seed
    heartbeat: HeartbeatSeconds = 10  # seconds between heartbeats; a trial silent for 3x this (+ 20 s) is dead
    max_retries: int = 2  # times a trial whose child was killed or crashed is re-queued
    retry_failed: bool = False  # grid: queue again every point failed for good (a child that crashed more than
    # --max_retries times, or a failure that is not retried), each with a fresh --max_retries
    storage_outage: int = 300  # seconds a storage outage (a database restarting) is ridden out, retrying with
    # backoff; longer, the sweep stops its trials and exits 1 in one line, and the same command resumes them
    progress_every: ProgressSeconds = 60  # when the output is a file or pipe (nohup, sbatch, CI): seconds between
    # progress lines (counts, best, elapsed, ETA); a line per trial started or ended is written as it happens
    max_failures_in_a_row: int = 10  # stop the sweep after this many trials failed with the same reason; 0: never
    set: str | None = None  # KEY=VALUE[,KEY=VALUE]: fix parameters (one study per value, e.g. per encoding)
    reseed: int = 0  # with --per: tune per group, then run each group's best config x N fresh seeds (reseed.py)
    per: str | None = None  # KEY[,KEY]: the parameters whose values are tuned separately (with --reseed)
    reseed_data: bool = True  # with --reseed: stage 2's data seed follows each fresh seed; --no-reseed-data: stage 1's
    launcher: Literal["local", "slurm"] = "local"  # slurm: --jobs SLURM tasks run this sweep (launchers/slurm.py)
    jobs: int = 1  # with --launcher slurm: the tasks of the job array, each one sweep process of the same study
    dry_run: bool = False  # print the plan and exit, running no trial and opening no study: the trials and an
    # estimate of the time from a short calibration (sweep/plan.py); with --launcher slurm: the sbatch script
    parts: int = 1  # with --dry-run: split the grid into this many resumable parts (by one parameter's values)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)  # with --launcher slurm: each task's sbatch options

    def __post_init__(self) -> None:
        """The options that nothing later checks before they are used, also when built in code (--reseed's
        stages, tests): one line naming the option and its range. The deprecated --trials_per_device sets
        --trials_per_gpu, with one warning line."""
        if self.trials_per_device is not None:
            print("warning: --trials_per_device is deprecated, it is now --trials_per_gpu", file=sys.stderr)
            self.trials_per_gpu, self.trials_per_device = self.trials_per_device, None
        check_ranges(
            SweepOptions,
            {"seed": self.seed, "heartbeat": self.heartbeat, "progress_every": self.progress_every},
            prefix="--",
        )
        if not isinstance(self.out_dir, str) or not self.out_dir.strip():  # '' would be the working folder
            raise ConfigError(f"--out_dir must name a folder, got {self.out_dir!r}")
