"""`cli.py sweep FILE --launcher slurm --jobs N`: the same sweep, run by N SLURM jobs (one job array).

Each array task runs one ordinary `cli.py sweep FILE ...` process, with the same file and options less the
launcher's, so the tasks are workers of one study: exactly-once grid points, dead-trial recovery and resume
are the sweep's own (sweep/run.py), whatever SLURM does to a task. The array is submitted through
submitit (`SlurmExecutor`): a task nearing its time limit or pre-empted gets SIGUSR2, its wrapper
(launchers/slurm_task.py `SweepTask.checkpoint`) stops the sweep with SIGTERM (its running trials are
re-queued in the study) and submitit requeues the task, which runs the same sweep command again. A task
cancelled or killed outright leaves RUNNING trials that the other tasks (or the next run of the command)
recover. `--dry_run` prints the equivalent sbatch script instead of submitting.

The tasks must share the study: the default SQLite database under --out_dir works when every node mounts that
folder (one node, or a shared filesystem), a journal file on a shared filesystem or a PostgreSQL / Redis
server otherwise. The trials of a task never see its SLURM_* variables (layout.trial_base_env).

A storage URL with a password reaches the tasks in $PE_SWEEP_STORAGE (sbatch passes the environment on), never
on their command line, and the job folder (submitit's pickles, the tasks' logs) is the user's only: 0700, files
0600 (the submitting process's umask, which sbatch hands to the tasks as SLURM_UMASK, is 077 meanwhile).
"""

import copy
import dataclasses
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

from pe_core.errors import ConfigError
from pe_sweeps import internals, layout
from pe_sweeps.storages import storage
from pe_sweeps.storages.storage_url import redact_url, url_password
from pe_sweeps.sweep.slurm_options import SlurmOptions

LAUNCHER_FIELDS = ("launcher", "jobs", "dry_run", "slurm")  # SweepOptions fields a task's own sweep never gets
TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")  # sbatch --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S


def time_minutes(value: str) -> int:
    """An sbatch time limit in minutes (rounded up), or a one-line error naming the accepted forms."""
    match = TIME.match(str(value).strip())
    if not match:
        raise ConfigError(
            f"--slurm.time {value!r}: expected MINUTES, MINUTES:SECONDS, H:MM:SS, D-H, D-H:MM or D-H:MM:SS"
        )
    days, first, second, third = match.groups()
    if days is not None:  # D-H[:M[:S]]
        seconds = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # H:M:S
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    else:  # M[:S]
        seconds = int(first) * 60 + int(second or 0)
    if seconds <= 0:
        raise ConfigError(f"--slurm.time {value!r} must be more than 0")
    return -(-seconds // 60)


def check_launcher_options(opts) -> None:
    """One line per launcher option that is wrong or given without `--launcher slurm`."""
    slurm: SlurmOptions = opts.slurm
    if opts.launcher != "slurm":
        changed = [f"--slurm.{f.name}" for f in dataclasses.fields(SlurmOptions)
                   if getattr(slurm, f.name) != f.default]  # fmt: skip
        given = (["--jobs"] if opts.jobs != 1 else []) + (["--dry_run"] if opts.dry_run else []) + changed
        if given:
            raise ConfigError(
                f"{', '.join(given)}: only with --launcher slurm (the sweep runs on this machine otherwise)"
            )
        return
    if not isinstance(opts.jobs, int) or isinstance(opts.jobs, bool) or opts.jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1 (the SLURM tasks that run the sweep), got {opts.jobs!r}")
    if opts.reseed or opts.per:
        raise ConfigError("--launcher slurm runs one study; --reseed / --per are not supported with it yet")
    time_minutes(slurm.time)
    for option, minimum in (("gpus_per_job", 0), ("cpus_per_job", 1), ("signal_delay_s", 0)):
        value = getattr(slurm, option)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
            raise ConfigError(f"--slurm.{option} must be an integer >= {minimum}, got {value!r}")
    if (opts.devices_per_trial or 0) > slurm.gpus_per_job:
        raise ConfigError(
            f"--devices_per_trial {opts.devices_per_trial} is more than the --slurm.gpus_per_job {slurm.gpus_per_job} "
            f"of each task; pass --slurm.gpus_per_job {opts.devices_per_trial} or more"
        )


def check_shared_storage(url: str, heartbeat: int, connect: bool = True) -> None:
    """Refuse a storage the tasks cannot share (in memory) or, with `connect`, that cannot be opened from here,
    in one line; warn when a server URL names this host, which other nodes cannot reach."""
    if url in ("sqlite://", "sqlite:///:memory:") or url.startswith("sqlite:///:memory:?"):
        raise ConfigError(
            f"--launcher slurm: the storage {url} is in memory, which the jobs cannot share; use the default SQLite "
            "file under --out_dir (on a filesystem every node mounts), a journal file or a postgresql:// / redis:// URL"
        )
    if not connect:
        return
    path = storage.sqlite_file(url) or (Path(url) if storage.journal.is_journal_file(url) else None)
    if path is not None:
        if not path.parent.is_dir():
            raise ConfigError(f"--launcher slurm: the storage's folder {path.parent} does not exist")
        return
    host = urlsplit(url).hostname or ""
    if host in ("localhost", "127.0.0.1", "::1"):
        print(f"warning: --storage names this host ({host}): only jobs that run on this machine can reach it",
              file=sys.stderr)  # fmt: skip
    storage.open_storage(url, heartbeat)  # a one-line ConfigError when it cannot be opened


def task_command(opts) -> list[str]:
    """The sweep command each task runs: this interpreter, this cli.py, the same file and options less the
    launcher's; paths absolute (a task may start in another folder), only options that differ from their
    defaults. A storage URL with a password, or taken from $PE_SWEEP_STORAGE, is not on it (`storage_env`)."""
    from pe_sweeps.sweep.run import SweepOptions

    command = [sys.executable, "-m", "pe_sweeps", "sweep", str(Path(opts.file).resolve())]
    for f in dataclasses.fields(SweepOptions):
        value = getattr(opts, f.name)
        if f.name in ("file", *LAUNCHER_FIELDS) or (f.default is not dataclasses.MISSING and value == f.default):
            continue
        if f.name == "storage" and url_password(value):
            continue
        if f.name == "out_dir":
            value = Path(value).resolve()
        elif f.name == "storage" and storage.journal.is_journal_file(value):
            value = Path(value).expanduser().resolve()
        command.append(f"--{f.name}={str(value).lower() if isinstance(value, bool) else value}")
    if opts.out_dir == "out":  # the default, relative to where the command was typed
        command.append(f"--out_dir={Path(opts.out_dir).resolve()}")
    return command


def storage_env(opts) -> dict[str, str]:
    """The variables the tasks need besides their command: $PE_SWEEP_STORAGE (the default of their --storage) for
    a --storage URL with a password, which argv (`ps`, submitit's pickled command) would show."""
    return {layout.STORAGE_ENV: opts.storage} if opts.storage is not None and url_password(opts.storage) else {}


def storage_from_env(opts) -> bool:
    """Whether the tasks take their storage URL from $PE_SWEEP_STORAGE (one with a password, or one given there)."""
    return bool(storage_env(opts)) or (opts.storage is None and bool(os.environ.get(layout.STORAGE_ENV)))


def env_guard(storage: str) -> list[str]:
    """The script's lines that stop a task at once, in one line, when $PE_SWEEP_STORAGE is not set (a script
    submitted by hand without it would run the study in the default SQLite file instead)."""
    return [
        f"# the storage {redact_url(storage)} reaches the sweep in ${layout.STORAGE_ENV}, not on its command line "
        "(a password there is visible in `ps`): export it before sbatch",
        f': "${{{layout.STORAGE_ENV}:?must hold the --storage URL: export it before sbatch}}"',
    ]


def private_folder(folder: Path) -> None:
    """The job folder, this user's only (0700; files already there from an earlier submission 0600)."""
    layout.make_dir(folder.parent, "--out_dir")
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(0o600)


def sbatch_parameters(opts, study: str) -> dict:
    """submitit's SlurmExecutor parameters for one task of the array."""
    slurm: SlurmOptions = opts.slurm
    params = {
        "job_name": slurm.job_name or f"sweep-{study}", "time": time_minutes(slurm.time), "nodes": 1,
        "ntasks_per_node": 1, "signal_delay_s": slurm.signal_delay_s, "array_parallelism": opts.jobs,
        "additional_parameters": {"requeue": True, "chdir": os.getcwd(), **(slurm.additional or {})},
    }  # fmt: skip
    optional = {"partition": slurm.partition, "cpus_per_task": slurm.cpus_per_job, "mem": slurm.mem,
                "account": slurm.account, "qos": slurm.qos, "constraint": slurm.constraint, "setup": slurm.setup,
                "gpus_per_node": slurm.gpus_per_job or None}  # fmt: skip
    params.update({key: value for key, value in optional.items() if value is not None})
    return params


def job_script(command: list[str], folder: Path, jobs: int, params: dict, guard: list[str] | None = None) -> str:
    """The sbatch script equivalent to the submitted array: submitit's header (`internals.submitit_sbatch_script`, or
    the same lines without submitit), `guard` (`env_guard`) and the setup lines, the sweep command in place
    of submitit's runner. Submitted by hand, a task near its time limit gets SIGTERM (its sweep re-queues its
    trials and exits), and `--requeue` lets SLURM requeue a pre-empted task; `sbatch` it again to resume after
    the time limit."""
    params = copy.deepcopy(params)
    if guard:
        params["setup"] = [*guard, *(params.get("setup") or [])]
    delay = params.pop("signal_delay_s")
    params["additional_parameters"]["signal"] = f"TERM@{delay}"
    sweep = shlex.join(command)
    note = "# `cli.py sweep --launcher slurm` submits this array through submitit; printed by --dry_run"
    text = internals.submitit_sbatch_script(command=sweep, folder=folder, map_count=jobs, **params)
    if text is not None:
        return text.replace("#!/bin/bash\n", f"#!/bin/bash\n{note}\n", 1)
    flags = {
        key: value
        for key, value in params.items()
        if key not in ("array_parallelism", "setup", "additional_parameters")
    }
    flags |= {"array": f"0-{jobs - 1}%{min(jobs, params['array_parallelism'])}", "open_mode": "append",
              "output": f"{folder}/%A_%a_0_log.out", "error": f"{folder}/%A_%a_0_log.err",
              **params["additional_parameters"]}  # fmt: skip
    lines = ["#!/bin/bash", note, "", "# Parameters"]
    lines += [f"#SBATCH --{key.replace('_', '-')}" + ("" if value is True else f"={shlex.quote(str(value))}")
              for key, value in sorted(flags.items())]  # fmt: skip
    lines += ["", "# setup", *params["setup"]] if params.get("setup") else []
    out, err = (f"{folder}/%A_%a_%t_log.{kind}" for kind in ("out", "err"))
    return "\n".join([*lines, "", "# command", f"srun --unbuffered --output {out} --error {err} {sweep}", ""])


def submit(command: list[str], folder: Path, jobs: int, params: dict, env: dict[str, str], from_env: bool) -> str:
    """Submit the array, with `env` added to the environment sbatch passes on to the tasks (`from_env`: they
    must find their storage there) and the job folder private (`private_folder`, umask 077: submitit's files
    and, through SLURM_UMASK, the tasks' logs and results); returns its job id."""
    try:
        import submitit

        from pe_sweeps.launchers.slurm_task import SweepTask
    except ImportError:
        raise ConfigError(
            "--launcher slurm needs submitit: pip install 'pe-sweeps[slurm]' (or --dry_run to print the script)"
        ) from None
    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        raise ConfigError("--launcher slurm: no sbatch / srun here; run it on the cluster's login node, or pass "
                          "--dry_run to print the sbatch script")  # fmt: skip
    private_folder(folder)
    umask = os.umask(0o077)
    try:
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=1000)  # requeued until the sweep is done
        executor.update_parameters(**params)
        with submitit.helpers.environment_variables(**env), executor.batch():  # sbatch runs as the batch ends
            tasks = [executor.submit(SweepTask(command, umask, from_env)) for _ in range(jobs)]
    finally:
        os.umask(umask)
    return tasks[0].job_id.split("_")[0]  # the array's id ("123" of task "123_0")


def launch(opts) -> None:
    """`cli.py sweep ... --launcher slurm`: check everything here, then print the script or submit the array."""
    from pe_sweeps.sweep import sweep_file as sf
    from pe_sweeps.sweep.run import check_options
    from pe_sweeps.sweep.study_protocol import apply_overrides, name_study

    check_launcher_options(opts)
    task = copy.deepcopy(opts)
    # this machine's GPUs and cores are not the tasks': the sweep's own checks, less those, run here
    task.workers = 1 if task.workers == "auto" else task.workers
    task.devices_per_trial, task.trials_per_gpu = 0, 1
    check_options(task)
    if opts.dry_run and task.storage is None:
        task.storage = "sqlite:///<out_dir>/sweeps/<study>/optuna.db"  # not made: a dry run writes nothing
    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), opts.set.split(",") if opts.set else [])
    name_study(task, sweep, suffix)
    command = task_command(opts)
    folder = layout.study_dir(Path(opts.out_dir).resolve(), task.study_name) / "slurm"
    params = sbatch_parameters(opts, task.study_name)
    check_shared_storage(task.storage, opts.heartbeat, connect=not opts.dry_run)
    from_env = storage_from_env(opts)
    if opts.dry_run:
        print(job_script(command, folder, opts.jobs, params, env_guard(task.storage) if from_env else []), end="")
        return
    job_id = submit(command, folder, opts.jobs, params, storage_env(opts), from_env)
    print(f"submitted job array {job_id} ({opts.jobs} task(s)) of study {task.study_name}; follow it with "
          f"`squeue -j {job_id}`, logs in {folder}; run the same command again to add tasks or resume")  # fmt: skip
