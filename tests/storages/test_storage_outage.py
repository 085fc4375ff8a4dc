"""A storage outage mid-sweep, on a real PostgreSQL server of the test's own (issue 42.5): the server is
stopped and started again while trials run. The sweep rides out an outage shorter than --storage_outage
(one line when it starts, one when it ends) and finishes every grid point once; a longer one stops it in
one line, nothing lost: the next run finishes every point once. The server is a private throw-away one
(its own data folder, port and socket folder, bound to 127.0.0.1), never the shared one of
scripts/start_postgres.sh that other tests use in parallel."""

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sweep_helpers import fake_sweep

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fake_fit.py"


class PrivatePostgres:
    """A throw-away PostgreSQL server: initdb into a fresh folder (as the postgres user when run as root, as
    PostgreSQL refuses root), trust auth, listening on 127.0.0.1 at a free port and on a socket in that folder."""

    def __init__(self):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
        if not found[-1]:
            pytest.skip("no PostgreSQL binaries (apt-get install postgresql)")
        self.bin = Path(found[-1]).parent
        self.folder = Path(tempfile.mkdtemp(prefix="pe-outage-pg-"))  # not under pytest's root-only tmp
        self.data = self.folder / "data"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self.run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, program: str, *args: str) -> None:
        argv = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w", "-o", options, "start")

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def postgres():
    server = PrivatePostgres()
    server.start()
    yield server
    server.remove()


def grid(tmp_path: Path, points: int) -> Path:
    """A grid of `points` fake trials (tests/fake_fit.py, val/acc = x)."""
    return fake_sweep(tmp_path, points, "o")


def start_sweep(path: Path, out: Path, url: str, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}", f"--storage={url}",
            "--workers=2", "--heartbeat=1", "--cold_start", *extra]  # fmt: skip
    environ = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "1"}
    return subprocess.Popen(argv, cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_trials(out: Path, count: int, timeout: float = 120) -> None:
    """Until `count` trial folders exist (trials started)."""
    deadline = time.time() + timeout
    while len(list((out / "sweeps" / "o").glob("trial-*"))) < count:
        assert time.time() < deadline, "the sweep started no trial"
        time.sleep(0.2)


def completed(url: str) -> list[int]:
    study = optuna.load_study(study_name="o", storage=url)
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    return sorted(t.params["x"] for t in study.trials if t.state == TrialState.COMPLETE)


@pytest.mark.slow
def test_a_database_restart_mid_sweep_is_ridden_out(tmp_path, postgres):
    """Issue 42.5: `pg_ctl stop -m fast`, restarted seconds later: both sweeps died with a traceback from the
    live status line (StorageInternalError). Now the sweep says once that the storage is unreachable and once
    that it is back, and finishes every point once, exit 0."""
    sweep = start_sweep(grid(tmp_path, 6), tmp_path, postgres.url)
    wait_for_trials(tmp_path, 2)
    postgres.stop()
    time.sleep(6)
    postgres.start()
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0 and "Traceback" not in err, err[-3000:]
    outage = [line for line in err.splitlines() if line.startswith(("warning: storage", "storage available"))]
    assert len(outage) == 2, err[-3000:]
    assert outage[0].startswith("warning: storage unavailable (") and "--storage_outage" in outage[0], outage
    assert outage[1].startswith("storage available again after "), outage
    assert completed(postgres.url) == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_an_outage_past_the_limit_stops_the_sweep_in_one_line_and_loses_nothing(tmp_path, postgres):
    """Down longer than --storage_outage: the sweep stops its trials and exits 1 with one line; once the
    server is back, the same command finishes every point once."""
    path = grid(tmp_path, 4)
    sweep = start_sweep(path, tmp_path, postgres.url, "--storage_outage=3")
    wait_for_trials(tmp_path, 2)
    postgres.stop()
    _, err = sweep.communicate(timeout=300)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert sweep.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert len(errors) == 1 and "storage unavailable for more than 3 s (--storage_outage 3)" in errors[0], err[-3000:]
    postgres.start()
    again = start_sweep(path, tmp_path, postgres.url, "--storage_outage=3")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert completed(postgres.url) == [1, 2, 3, 4]


def test_an_outage_is_one_line_each_end_and_raises_past_its_limit(capsys, monkeypatch):
    """The tracker the workers share: one line as the outage starts (not one per failed call), StorageOutage past
    the limit (never from a call that may not stop the sweep), one line as it ends; heartbeats are not judged
    during it and for its grace period."""
    import sqlalchemy

    from pe_sweeps.storages.storage import Outage, StorageOutage, is_transient

    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    dropped = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    wrapped = optuna.exceptions.StorageInternalError("An exception is raised during the commit.")
    wrapped.__cause__ = dropped
    assert is_transient(dropped) and is_transient(wrapped) and not is_transient(ValueError("bug"))
    outage = Outage(limit=10, grace=5)
    for _ in range(3):
        outage.failed(wrapped)
    clock[0] += 11
    outage.failed(wrapped, may_raise=False)
    with pytest.raises(StorageOutage, match=r"storage unavailable for more than 10 s \(--storage_outage 10\)"):
        outage.failed(wrapped)
    assert not outage.judging_heartbeats()
    outage.succeeded()
    outage.succeeded()
    assert not outage.judging_heartbeats()
    clock[0] += 5
    assert outage.judging_heartbeats()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("warning: storage unavailable (OperationalError: "), lines
    assert lines[1] == "storage available again after 11 s; the sweep goes on"


def test_the_live_display_never_ends_the_sweep(capsys):
    """A bug in the live status is one warning line (the first time), never the sweep's end."""
    from types import SimpleNamespace

    from pe_sweeps.sweep.supervision import Sweep

    def broken(study):
        raise ValueError("max() arg is an empty sequence")

    runner = SimpleNamespace(quietly=lambda action, *args: Sweep.quietly(runner, action, *args), study=None,
                             display_failed=False)  # fmt: skip
    for _ in range(3):
        Sweep.show(runner, broken)
    assert capsys.readouterr().err.splitlines() == [
        "warning: live status: ValueError: max() arg is an empty sequence; the sweep goes on"
    ]
