"""`cli.py sweep FILE --launcher slurm --jobs N`: the sweep's workers as a SLURM job array (launchers/slurm.py).

The slow tests submit to a real cluster (CI: a one-node cluster on 127.0.0.1, scripts/start_slurm.sh; elsewhere
skipped without one) a 12-point grid of fake trials (tests/fake_fit.py) and count the points the study
completed: each exactly once, also when a task is cancelled mid-run and requeued, and when a task is told it
nears its time limit (SIGUSR2) and requeues itself.

Claims of docs/clusters.md covered here:
- "`--launcher slurm --jobs N` submits N tasks of one job array, each an ordinary `cli.py sweep` of the same
  study": test_a_job_array_runs_each_grid_point_once
- "a task cancelled mid-run and requeued (or the command run again) finishes the grid, each point once":
  test_a_cancelled_and_requeued_task_still_runs_each_point_once
- "near its time limit (or pre-empted) a task stops its sweep and requeues itself":
  test_a_task_told_to_stop_requeues_itself_and_the_grid_finishes_once
- "`--dry_run` prints the sbatch script and submits nothing": test_dry_run_prints_the_sbatch_script
- "bad launcher options are one line, exit 2": test_bad_launcher_options_are_one_line
"""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import cli_in_process, fresh_postgres_database, slurm_cluster
from optuna.trial import TrialState
from sweep_helpers import counts, fake_sweep

from pe_core.errors import ConfigError
from pe_sweeps.launchers.slurm import time_minutes
from pe_sweeps.storages.storage_url import url_password

ROOT = Path(__file__).resolve().parents[2]
POINTS = 12
ONCE = {"points": POINTS, "duplicates": 0, "lost": 0}


def submit(path: Path, out: Path, jobs: int, extra: tuple[str, ...] = ()) -> str:
    """Submit the sweep as `jobs` SLURM tasks (fake trials of about a second); returns the array's job id."""
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "0.5"}
    cmd = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}", "--heartbeat=1",
           "--cold_start", "--launcher=slurm", f"--jobs={jobs}", "--slurm.time=20",
           "--slurm.cpus_per_job=1", *extra]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for secret in filter(None, map(url_password, extra)):
        assert secret not in done.stdout + done.stderr
    assert done.stdout.startswith("submitted job array "), done.stdout
    return done.stdout.split()[3]


def queued(job: str) -> list[str]:
    """`squeue` lines (`<id> <state>`) of a job array or one of its tasks; [] once it has ended. An squeue that
    fails for another reason than an unknown (ended and purged) job, such as a slurmctld busy with a requeue,
    says nothing about the job: it counts as still queued, so a wait does not end early."""
    done = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T"], capture_output=True, text=True)
    if done.returncode == 0:
        return done.stdout.split("\n")[:-1]
    return [] if "Invalid job id" in done.stderr else [f"{job} UNKNOWN ({done.stderr.strip()})"]


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(1)


def study(out: Path, name: str) -> optuna.Study | None:
    db = out / "sweeps" / name / "optuna.db"
    try:
        return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    except (KeyError, Exception):  # not made yet by the first task
        return None


def completed(out: Path, name: str) -> int:
    found = study(out, name)
    return len(found.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) if found else 0


def log(out: Path, name: str, task: str) -> str:
    return (out / "sweeps" / name / "slurm" / f"{task}_0_log.out").read_text()


def requeue_now(task: str) -> None:
    """SLURM holds a requeued job back for a while: start it as soon as a CPU is free, but not right after its
    last run was killed: a relaunch 0.8 s after the kill (same second) was refused by slurmd ("Job 17 already
    killed, do not launch batch job", a CI run) and the task failed without running."""
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], check=True, capture_output=True)


@pytest.mark.slow
def test_a_job_array_runs_each_grid_point_once(tmp_path):
    slurm_cluster()
    array = submit(fake_sweep(tmp_path, POINTS, "array"), tmp_path, jobs=2)
    assert len(queued(array)) == 2
    wait_until(lambda: not queued(array), 600, "the job array did not finish")
    assert counts(study(tmp_path, "array"), POINTS) == ONCE
    for task in ("0", "1"):
        assert "Job completed successfully" in log(tmp_path, "array", f"{array}_{task}")


@pytest.mark.slow
def test_a_cancelled_and_requeued_task_still_runs_each_point_once(tmp_path):
    slurm_cluster()
    array = submit(fake_sweep(tmp_path, POINTS, "cancel"), tmp_path, jobs=2)
    task = f"{array}_1"
    wait_until(lambda: completed(tmp_path, "cancel") >= 2, 600, "no trial completed")
    subprocess.run(["scancel", task], check=True)
    wait_until(lambda: not queued(task), 120, "the cancelled task did not end")
    subprocess.run(["scontrol", "requeue", task], check=True, capture_output=True)
    requeue_now(task)
    wait_until(lambda: not queued(array), 600, "the job array did not finish")
    assert counts(study(tmp_path, "cancel"), POINTS) == ONCE
    assert "Job completed successfully" in log(tmp_path, "cancel", task)  # the requeued run


@pytest.mark.slow
def test_a_task_told_to_stop_requeues_itself_and_the_grid_finishes_once(tmp_path):
    """SIGUSR2 is what SLURM sends a task --slurm.signal_delay_s before its time limit (and on pre-emption)."""
    slurm_cluster()
    array = submit(fake_sweep(tmp_path, POINTS, "usr2"), tmp_path, jobs=2)
    task = f"{array}_1"
    wait_until(lambda: completed(tmp_path, "usr2") >= 2, 600, "no trial completed")
    subprocess.run(["scancel", "--signal=USR2", task], check=True)
    wait_until(lambda: "Requeued job" in log(tmp_path, "usr2", task), 120, "the task did not requeue itself")
    requeue_now(task)
    wait_until(lambda: not queued(array), 600, "the job array did not finish")
    assert counts(study(tmp_path, "usr2"), POINTS) == ONCE
    stopped = [t for t in study(tmp_path, "usr2").trials if "stopped by SIGTERM" in t.user_attrs.get("reason", "")]
    assert "Job completed successfully" in log(tmp_path, "usr2", task)
    assert stopped or "Job completed successfully" in log(tmp_path, "usr2", f"{array}_0")


def test_a_task_without_its_storage_variable_stops_before_its_sweep(monkeypatch, tmp_path):
    """Submitted with the environment withheld (--export=NONE), a task whose storage URL travels in
    $PE_SWEEP_STORAGE stops before its sweep, which would otherwise run the study in the default SQLite file."""
    from pe_sweeps.launchers.slurm_task import SweepTask

    marker = tmp_path / "ran"
    monkeypatch.delenv("PE_SWEEP_STORAGE", raising=False)
    with pytest.raises(RuntimeError, match=r"\$PE_SWEEP_STORAGE \(the sweep's storage URL\) is not in this task's"):
        SweepTask(["touch", str(marker)], storage_from_env=True)()
    assert not marker.exists()
    monkeypatch.setenv("PE_SWEEP_STORAGE", "postgresql://u:pw@127.0.0.1/db")
    task_umask = os.umask(0o077)  # what a task gets (SLURM_UMASK) from `cli.py sweep --launcher slurm`
    try:
        assert SweepTask(["touch", str(marker)], umask=0o022, storage_from_env=True)() == 0
    finally:
        os.umask(task_umask)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o644  # the submitting shell's umask, not the task's 077


@pytest.fixture
def postgres_url():
    yield from fresh_postgres_database("pe_slurm")


@pytest.mark.slow
def test_the_storage_password_reaches_the_tasks_but_no_file_others_can_read(tmp_path, postgres_url):
    """A --storage URL with a password: the tasks get it in their environment, the job folder (submitit's
    pickles, the sbatch script, the tasks' logs) is this user's only (0700, files 0600) and holds it nowhere."""
    slurm_cluster()
    password = url_password(postgres_url)
    assert password, "scripts/start_postgres.sh gives the server a password"
    name = "secret"
    array = submit(fake_sweep(tmp_path, POINTS, name), tmp_path, jobs=2, extra=[f"--storage={postgres_url}"])
    wait_until(lambda: not queued(array), 600, "the job array did not finish")
    assert counts(optuna.load_study(study_name=name, storage=postgres_url), POINTS) == ONCE
    folder = tmp_path / "sweeps" / name / "slurm"
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.suffix == ".pkl" for p in files) and any(p.name.endswith("_log.out") for p in files)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: "0o600" for p in files}
    assert [p.name for p in files if password.encode() in p.read_bytes()] == []
    assert "Job completed successfully" in log(tmp_path, name, f"{array}_0")


def test_dry_run_prints_the_sbatch_script(tmp_path, capsys, monkeypatch):
    path = fake_sweep(tmp_path, POINTS, "dry")
    out = tmp_path / "out"
    args = ["sweep", str(path), f"--out_dir={out}", "--launcher", "slurm", "--jobs", "3", "--dry-run",
            "--slurm.partition", "gpu", "--slurm.time", "1:30:00", "--slurm.gpus_per_job", "2",
            "--devices_per_trial", "1", "--workers", "2", "--slurm.setup", "[module load cuda]"]  # fmt: skip
    code, script, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 0, err
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for flag in ("--array=0-2%3", "--partition=gpu", "--time=90", "--gpus-per-node=2", "--requeue",
                 "--job-name=sweep-dry", "--signal=TERM@120"):  # fmt: skip
        assert f"#SBATCH {flag}" in lines
    assert "module load cuda" in lines
    command = lines[-1]
    assert command.startswith("srun ")
    assert f"{sys.executable} -m pe_sweeps sweep {path} " in command  # the installed package, from any folder
    for option in ("--workers=2", "--devices_per_trial=1", f"--out_dir={out}"):
        assert option in command.split()
    assert "--launcher" not in command and "--jobs" not in command and "--slurm" not in command
    assert not out.exists()  # a dry run writes nothing


PASSWORD = "s3cretPW42"
SECRET_URLS = [
    f"postgresql://user:{PASSWORD}@127.0.0.1:54329/db",
    f"redis://:{PASSWORD}@127.0.0.1:63790/3",
    f"postgresql://user@127.0.0.1:54329/db?password={PASSWORD}",
]


@pytest.mark.parametrize("url", SECRET_URLS, ids=["postgresql", "redis", "query"])
def test_dry_run_keeps_the_storage_password_out_of_the_script(tmp_path, capsys, monkeypatch, url):
    """The tasks read a URL with a password from $PE_SWEEP_STORAGE: the printed script never holds it, and
    stops at once (one line naming the variable) when submitted without it."""
    monkeypatch.delenv("PE_SWEEP_STORAGE", raising=False)
    path = fake_sweep(tmp_path, POINTS, "secret")
    args = ["sweep", str(path), f"--out_dir={tmp_path / 'out'}", "--launcher=slurm", "--dry_run", f"--storage={url}"]
    code, script, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 0, err
    assert PASSWORD not in script and PASSWORD not in err
    assert "--storage" not in script.splitlines()[-1]
    (guard,) = [line for line in script.splitlines() if line.startswith(": ")]
    assert "${PE_SWEEP_STORAGE:?" in guard
    run = subprocess.run(["bash", "-c", guard], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert run.returncode != 0 and "PE_SWEEP_STORAGE" in run.stderr
    assert subprocess.run(["bash", "-c", guard], env={"PE_SWEEP_STORAGE": url}).returncode == 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--launcher=slurm", "--jobs=0"], "--jobs must be an integer >= 1"),
        (["--launcher=slurm", "--slurm.time=soon"], "--slurm.time 'soon': expected MINUTES"),
        (["--launcher=slurm", "--slurm.time=0"], "--slurm.time '0' must be more than 0"),
        (["--launcher=slurm", "--slurm.gpus_per_job=-1"], "--slurm.gpus_per_job must be an integer >= 0"),
        (["--launcher=slurm", "--devices_per_trial=2"], "--devices_per_trial 2 is more than the --slurm.gpus_per_job"),
        (["--launcher=slurm", "--storage=sqlite:///:memory:"], "is in memory, which the jobs cannot share"),
        (["--launcher=slurm", "--reseed=2", "--per=x"], "--reseed / --per are not supported"),
        (["--jobs=2"], "--jobs: only with --launcher slurm"),
        (["--dry-run", "--slurm.partition=gpu"], "--slurm.partition: only with --launcher slurm"),
        (["--launcher=pbs"], "launcher"),
    ],
)
def test_bad_launcher_options_are_one_line(tmp_path, capsys, monkeypatch, extra, message):
    path = fake_sweep(tmp_path, POINTS, "bad")
    args = ["sweep", str(path), f"--out_dir={tmp_path / 'out'}", "--dry-run" if "--launcher=slurm" in extra else ""]
    code, out, err = cli_in_process([a for a in args if a] + extra, capsys, monkeypatch, ROOT)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "value, minutes",
    [("30", 30), ("10:30", 11), ("1:30:00", 90), ("2-00", 2880), ("1-2:03", 1563), ("1-00:00:01", 1441)],
)
def test_slurm_time_forms(value, minutes):
    assert time_minutes(value) == minutes


def test_slurm_time_refuses_other_forms():
    with pytest.raises(ConfigError, match="expected MINUTES"):
        time_minutes("1h")
