"""A sweep's and a run's files are private to their user by default (umask 077: folders 0700, files 0600), a
group can be let in with PE_UMASK=007, and a sweep that waits on its study lock says who holds it.

Tests that switch to another user (uid 65534, `nobody`) need root and `setpriv`; the mode checks run as anyone.
The sweeps run under a folder of /tmp that every user can enter, so what keeps `nobody` out is the modes of the
project's own files and folders, never those of the folders above them."""

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fake_fit.py"
NOBODY = 65534
AS_ROOT = os.geteuid() == 0 and shutil.which("setpriv") is not None and shutil.which("flock") is not None


@pytest.fixture
def open_folder():
    """A fresh folder under /tmp that every user may enter and list (0755), removed afterwards."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="pe-perm-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def fake_sweep(folder: Path, name: str, points: int = 1) -> Path:
    """A grid of `points` fake trials (tests/fake_fit.py: no training)."""
    sweep = {
        "name": name, "program": str(FAKE), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": list(range(1, points + 1))}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    path.chmod(0o644)
    return path


def sweep_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PE_UMASK"}
    return {**env, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "0.05", **extra}


def sweep_cmd(path: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}", "--heartbeat=1", *extra]


def run_sweep(path: Path, out: Path, *extra: str, **env) -> subprocess.CompletedProcess:
    done = subprocess.run(sweep_cmd(path, out, *extra), cwd=ROOT, env=sweep_env(**env), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def as_user(command: list[str], gid: int = NOBODY) -> subprocess.CompletedProcess:
    """`command` run as uid 65534 with group `gid` only (the test runs as root)."""
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={gid}", "--clear-groups"]
    return subprocess.run(drop + command, capture_output=True, text=True, timeout=30)


def modes(*roots: Path) -> dict[str, int]:
    """Permission bits of every file and folder under (and including) `roots`; links are skipped."""
    found = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            if not path.is_symlink():
                found[str(path)] = stat.S_IMODE(path.stat().st_mode)
    return found


def sweep_files(out: Path, name: str, journal: Path | None) -> dict[str, Path]:
    """The files another user must not read: the study, its lock, manifest, a trial's arguments and log."""
    study = out / "sweeps" / name
    files = {"manifest": study / "manifest.json", "args": study / "trial-0" / "args.json",
             "log": study / "trial-0" / "output.log"}  # fmt: skip
    if journal:
        return {**files, "study": journal, "lock": Path(f"{journal}.study-lock")}
    return {**files, "study": study / "optuna.db", "lock": study / "optuna.db.lock"}


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_sweep_files_are_private_to_their_user(open_folder, storage):
    out = open_folder / "out"
    journal = open_folder / "study.log" if storage == "journal" else None
    run_sweep(fake_sweep(open_folder, "priv"), out, *([f"--storage={journal}"] if journal else []))
    files = sweep_files(out, "priv", journal)
    assert all(path.is_file() for path in files.values()), files
    written = modes(out / "sweeps" / "priv", *([journal, Path(f"{journal}.study-lock"),
                                                Path(f"{journal}.heartbeats")] if journal else []))  # fmt: skip
    assert {path: oct(mode) for path, mode in written.items() if mode & 0o077} == {}
    if not AS_ROOT:
        return
    for what, path in files.items():
        read = as_user(["cat", str(path)])
        assert read.returncode != 0 and "Permission denied" in read.stderr, (what, read)
    held = as_user(["flock", "--nonblock", str(files["lock"]), "true"])
    assert held.returncode != 0 and "Permission denied" in held.stderr, held


@pytest.mark.skipif(not AS_ROOT, reason="needs root and setpriv to act as another user")
def test_share_umask_lets_the_group_in_and_no_one_else(open_folder):
    out = open_folder / "out"
    run_sweep(fake_sweep(open_folder, "shared"), out, PE_UMASK="007")
    files = sweep_files(out, "shared", None)
    written = modes(out / "sweeps" / "shared")
    assert {path: oct(mode) for path, mode in written.items() if mode & 0o007} == {}
    assert stat.S_IMODE(files["study"].stat().st_mode) == 0o660
    assert stat.S_IMODE((out / "sweeps" / "shared").stat().st_mode) == 0o770
    group = os.getgid()  # the files' group: a member of it reads them and may take the lock
    assert as_user(["cat", str(files["manifest"])], gid=group).returncode == 0
    assert as_user(["flock", "--nonblock", str(files["lock"]), "true"], gid=group).returncode == 0
    assert as_user(["cat", str(files["manifest"])]).returncode != 0


@pytest.mark.parametrize("value", ["abc", "0o999", "1000", "-7", "8", "07 7"])
def test_a_bad_umask_is_refused_in_one_line(value):
    from pe_core.errors import ConfigError
    from pe_sweeps.permissions import umask_setting

    with pytest.raises(ConfigError, match=r"^\$PE_UMASK must be an octal umask from 000 to 777 .*, got '"):
        umask_setting({"PE_UMASK": value})


@pytest.mark.parametrize("value, mask", [("", 0o077), ("007", 0o007), ("0o27", 0o027), ("0", 0), (" 77 ", 0o077)])
def test_umask_setting(value, mask):
    from pe_sweeps.permissions import umask_setting

    assert umask_setting({"PE_UMASK": value}) == mask == umask_setting({"PE_UMASK": value} if value else {})


def test_a_bad_umask_stops_the_command_with_exit_2(open_folder):
    done = subprocess.run(sweep_cmd(fake_sweep(open_folder, "bad"), open_folder / "out"), cwd=ROOT, text=True,
                          env=sweep_env(PE_UMASK="0o999"), capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("error: $PE_UMASK must be"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (open_folder / "out").exists()


def test_an_existing_study_folder_is_made_private(open_folder):
    """A study a sweep made before umask 077 (0755 folder, 0644 files) is closed when the sweep resumes it."""
    out = open_folder / "out"
    path = fake_sweep(open_folder, "old")
    run_sweep(path, out, PE_UMASK="022")
    assert stat.S_IMODE((out / "sweeps" / "old").stat().st_mode) == 0o755
    run_sweep(path, out)
    assert stat.S_IMODE((out / "sweeps" / "old").stat().st_mode) == 0o700


def line_with(process: subprocess.Popen, text: str, timeout: float) -> str:
    """The first line `process` writes to stderr that holds `text`, or '' when none comes in `timeout` s."""
    import select

    deadline = time.monotonic() + timeout
    while select.select([process.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]:
        line = process.stderr.readline()
        if text in line or not line:
            return line
    return ""


def test_a_sweep_waiting_on_a_held_lock_says_who_holds_it(open_folder):
    out = open_folder / "out"
    study = out / "sweeps" / "held"
    study.mkdir(parents=True)
    with open(study / "optuna.db.lock", "w") as lock:  # a stuck holder: this test process
        fcntl.flock(lock, fcntl.LOCK_EX)
        sweep = subprocess.Popen(sweep_cmd(fake_sweep(open_folder, "held"), out), cwd=ROOT, env=sweep_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            waiting = line_with(sweep, "waiting", timeout=30)
            assert "waiting" in waiting and f"pid {os.getpid()}" in waiting and "optuna.db.lock" in waiting, waiting
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if not waiting:
                sweep.kill()
    rest = sweep.communicate(timeout=120)[1]
    assert sweep.returncode == 0, rest[-2000:]
    assert "waiting" not in rest  # said once


@pytest.mark.slow  # trains a model in a fresh process (W&B offline)
def test_a_fit_run_folder_is_private_to_its_user(open_folder):
    """The record, config, checkpoint and W&B files of a plain `cli.py fit`."""
    from conftest import TINY

    out = open_folder / "out"
    env = {**sweep_env(), "WANDB_MODE": "offline", "HOME": str(open_folder / "home")}  # W&B's cache too
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "fit", *TINY, f"--run.out_dir={out}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = (out / "runs").iterdir()
    written = modes(out, open_folder / "home")
    assert any(p.endswith(".ckpt") for p in written) and any(p.endswith(".wandb") for p in written)
    assert {path: oct(mode) for path, mode in written.items() if mode & 0o077} == {}
    if AS_ROOT:
        read = as_user(["cat", str(run / "record.json")])
        assert read.returncode != 0 and "Permission denied" in read.stderr, read


@pytest.mark.parametrize("where, expected", [("exact", [42]), ("other device", [42]), ("waiter only", []),
                                             ("other inode", [])])  # fmt: skip
def test_lock_holders_reads_the_kernels_lock_table(tmp_path, where, expected):
    """/proc/locks rows: a holder of this file's device and inode (or of its inode alone, as overlay file systems
    show it); a waiter's row (`->`) and another file's are not holders."""
    from pe_sweeps.storages.study_lock import lock_holders

    path = tmp_path / "optuna.db.lock"
    path.touch()
    status = path.stat()
    device = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}"
    row = {"exact": f"1: FLOCK  ADVISORY  WRITE 42 {device}:{status.st_ino} 0 EOF",
           "other device": f"1: FLOCK  ADVISORY  WRITE 42 00:99:{status.st_ino} 0 EOF",
           "waiter only": f"1: -> FLOCK  ADVISORY  WRITE 43 {device}:{status.st_ino} 0 EOF",
           "other inode": f"1: FLOCK  ADVISORY  WRITE 44 {device}:{status.st_ino + 1} 0 EOF"}[where]  # fmt: skip
    assert lock_holders(str(path), f"2: POSIX  ADVISORY  WRITE 7 00:01:5 0 EOF\n{row}\n") == expected
