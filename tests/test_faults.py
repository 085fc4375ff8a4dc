"""Fault injection: sweeps killed at random never lose or repeat a grid point; files never run code;
names never leave the output folder; corrupt or unwritable records never break a command."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_trial.py"


def fake_sweep(tmp_path: Path, points: int, name: str = "f") -> Path:
    """A grid of `points` fake trials (tests/fake_trial.py: about a second each, no training)."""
    sweep = {
        "program": str(FAKE), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": list(range(1, points + 1))}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def sweep_cmd(path: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}", "--heartbeat=1", *extra]


def env(**extra) -> dict:
    return {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", **extra}


def start(cmd: list[str], **extra) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env(**extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def running_children(out: Path, name: str) -> list[int]:
    """Pids of fake trials still running (each names its run folder fake-<pid>)."""
    pids = []
    for run in (out / "sweeps" / name).glob("trial-*/runs/fake-*"):
        pid = int(run.name.split("-")[1])
        try:
            os.kill(pid, 0)
            pids.append(pid)
        except ProcessLookupError:
            pass
    return pids


def counts(study: optuna.Study, points: int) -> dict:
    complete = [t.params["x"] for t in study.get_trials(states=(TrialState.COMPLETE,))]
    per_point = {x: complete.count(x) for x in range(1, points + 1)}
    return {
        "points": points,
        "duplicates": sum(max(0, n - 1) for n in per_point.values()),
        "lost": sum(n == 0 for n in per_point.values()),
    }


@pytest.fixture
def storage_url(request, tmp_path):
    """SQLite under tmp_path (None: the sweep's default) or a new, empty PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    server = os.environ.get("PE_TEST_POSTGRES")
    if not server and os.environ.get("CI"):
        pytest.fail("CI must provide PE_TEST_POSTGRES (scripts/start_postgres.sh)")
    if not server:
        pytest.skip("no PostgreSQL: run scripts/start_postgres.sh and set PE_TEST_POSTGRES")
    import psycopg

    database = f"pe_faults_{os.getpid()}_{time.time_ns()}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {database}")
    yield server.rsplit("/", 1)[0] + "/" + database
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE {database} WITH (FORCE)")


PROCESSES, WORKERS, POINTS, KILL_ROUNDS = 3, 2, 12, 1


@pytest.mark.slow
@pytest.mark.parametrize("storage_url", ["sqlite", "postgresql"], indirect=True)
def test_random_kills_never_lose_or_repeat_a_grid_point(tmp_path, storage_url):
    """PROCESSES sweeps x WORKERS workers on one study; in the first KILL_ROUNDS rounds a random sweep
    process and random trial children are SIGKILLed; rounds are re-run until the sweeps exit 0."""
    rng = random.Random(12)
    name = "faults"
    path = fake_sweep(tmp_path, POINTS, name)
    extra = [f"--workers={WORKERS}", f"--study_name={name}", "--max_retries=20"]
    extra += [f"--storage={storage_url}"] if storage_url else []
    kills = {"sweeps": 0, "children": 0}
    for round_ in range(8):
        sweeps = [start(sweep_cmd(path, tmp_path, *extra)) for _ in range(PROCESSES)]
        if round_ < KILL_ROUNDS:
            killed_sweep = False
            deadline = time.time() + 120
            while any(s.poll() is None for s in sweeps) and time.time() < deadline:
                time.sleep(rng.uniform(0.5, 2.0))
                children = running_children(tmp_path, name)
                if children and rng.random() < 0.7:
                    try:
                        os.kill(rng.choice(children), signal.SIGKILL)
                        kills["children"] += 1
                    except ProcessLookupError:
                        pass
                elif not killed_sweep and children:
                    alive = [s for s in sweeps if s.poll() is None]
                    rng.choice(alive).kill()
                    kills["sweeps"] += 1
                    killed_sweep = True
        results = [(s.wait(timeout=600), s.stderr.read()) for s in sweeps]
        for code, err in results:
            assert "Traceback" not in err, err[-3000:]
        if round_ >= KILL_ROUNDS and all(code == 0 for code, _ in results):
            break
    url = storage_url or f"sqlite:///{tmp_path / 'sweeps' / name / 'optuna.db'}"
    study = optuna.load_study(study_name=name, storage=url)
    found = counts(study, POINTS)
    storage = "postgresql" if storage_url else "sqlite"
    report = {"storage": storage, "processes": PROCESSES, "workers": WORKERS, "rounds": round_ + 1, **kills, **found}
    print("fault counts:", json.dumps(report))
    with open(ROOT / "tests" / ".fault_counts.jsonl", "a") as log:  # for the issue note; git-ignored
        log.write(json.dumps(report) + "\n")
    assert found["duplicates"] == 0 and found["lost"] == 0, report
    assert kills["sweeps"] >= 1 and kills["children"] >= 1, report
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    reasons = [t.user_attrs.get("reason", "") for t in study.trials if t.state == TrialState.FAIL]
    assert not [r for r in reasons if "arn" in r], reasons  # never a warning line as a reason
    assert any("killed by SIGKILL" in r for r in reasons), reasons
