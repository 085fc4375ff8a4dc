"""The sbatch options of `cli.py sweep --launcher slurm` (launchers/slurm.py), apart so that the sweep's own
options (sweep/options.py `SweepOptions`) can hold them without importing the launcher."""

from dataclasses import dataclass


@dataclass
class SlurmOptions:
    """The sbatch options of each task of `cli.py sweep --launcher slurm --jobs N` (one sweep worker each)."""

    partition: str | None = None  # default: the cluster's default partition
    time: str = "4:00:00"  # each task's time limit: MINUTES, H:MM:SS or D-HH:MM:SS; near it, the task stops its
    # sweep (its trials are re-queued) and is requeued, to run the same sweep again
    gpus_per_job: int = 0  # GPUs of each task (--gpus-per-node); its sweep hands them out with --devices_per_trial
    cpus_per_job: int | None = None  # CPUs of each task (--cpus-per-task); default: the cluster's
    mem: str | None = None  # memory of each task (--mem), e.g. 32G; default: the cluster's
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    constraint: str | None = None  # --constraint, e.g. a100
    job_name: str | None = None  # default: sweep-<study>
    setup: list[str] | None = None  # shell lines each task runs before its sweep, e.g. ["module load cuda"]
    signal_delay_s: int = 120  # seconds before the time limit at which a task is told to stop
    additional: dict[str, str] | None = None  # other sbatch options, e.g. {exclude: node3, mail-type: END}
