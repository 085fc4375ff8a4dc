"""Helpers shared by the tests (not fixtures: those live in conftest.py)."""

import importlib.util
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path | str, name: str | None = None):
    """The Python file at `path` (relative to the checkout, or absolute) imported as a module: the benchmarks and
    scripts are not a package, and reference implementations are loaded by path, never copied."""
    path = Path(path) if Path(path).is_absolute() else ROOT / path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter a non-trivial value (LayerNorm near identity, others N(0, 0.3^2))."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            for pname, p in sub.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=gen)
                if isinstance(sub, nn.LayerNorm):
                    p.copy_((1.0 if pname == "weight" else 0.0) + 0.1 * noise)
                else:
                    p.copy_(0.3 * noise)
    return module


def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """Yield the URL of a new, empty database on the test PostgreSQL server, dropped afterwards (use with
    `yield from` in a fixture). Fails in CI without PE_TEST_POSTGRES, skips elsewhere."""
    server = os.environ.get("PE_TEST_POSTGRES")
    if not server and os.environ.get("CI"):
        pytest.fail("CI must provide PE_TEST_POSTGRES (scripts/start_postgres.sh)")
    if not server:
        pytest.skip("no PostgreSQL: run scripts/start_postgres.sh and set PE_TEST_POSTGRES")
    import psycopg

    database = f"{prefix}_{os.getpid()}_{time.time_ns()}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {database}")
    yield server.rsplit("/", 1)[0] + "/" + database
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE {database} WITH (FORCE)")


def fresh_redis_database() -> Iterator[str]:
    """Yield the URL of an empty database on the test Redis server (scripts/start_redis.sh: 4096 of them),
    flushed afterwards. Fails in CI without PE_TEST_REDIS, skips elsewhere."""
    server = os.environ.get("PE_TEST_REDIS")
    if not server and os.environ.get("CI"):
        pytest.fail("CI must provide PE_TEST_REDIS (scripts/start_redis.sh)")
    if not server:
        pytest.skip("no Redis: run scripts/start_redis.sh and set PE_TEST_REDIS")
    import random

    import redis

    rng = random.Random(f"{os.getpid()}-{time.time_ns()}")
    for _ in range(100):
        url = f"{server.rstrip('/')}/{rng.randrange(1, 4096)}"
        client = redis.Redis.from_url(url)
        if client.setnx("pe-test-claimed", 1):  # an empty database nobody else claimed
            break
    yield url
    client.flushdb()
    client.close()


def kill_once_started(process, started, timeout: float, what: str) -> None:
    """SIGKILL `process` as soon as `started()` is true (fail if it exits first or `timeout` passes)."""
    import signal

    deadline = time.time() + timeout
    while not started():
        assert time.time() < deadline and process.poll() is None, what
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()


def cli_in_process(args: list[str], capsys, monkeypatch, root) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `cli.py ARGS` run in this process from `root`: what a subprocess would
    show for commands that exit before training (--print_config, bad input), without paying its imports."""
    from pe_sweeps.cli import cli_main

    monkeypatch.chdir(root)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    capsys.readouterr()
    try:
        cli_main(args)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def slurm_cluster() -> None:
    """Skip unless a SLURM cluster answers here (`sinfo` shows an idle or mixed node) and submitit is installed;
    fail instead in CI, which starts one (scripts/start_slurm.sh)."""
    import shutil
    import subprocess

    missing = None
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        missing = "no sinfo / sbatch"
    else:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=60).stdout
        if not {"idle", "mixed"} & set(states.split()):
            missing = f"no idle SLURM node (sinfo: {states.strip() or 'no answer'})"
    try:
        import submitit  # noqa: F401
    except ImportError:
        missing = missing or "no submitit (pip install -e '.[slurm]')"
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must provide a SLURM cluster (scripts/start_slurm.sh): {missing}")
    if missing:
        pytest.skip(f"{missing}: run scripts/start_slurm.sh")


def record(**fields):
    """A RunRecord (runs/records.py) from its fields as record.json spells them: what a test builds by hand
    in place of a run's file (unknown keys land in `extra`, as when read)."""
    from pe_sweeps.runs.records import RunRecord

    return RunRecord.from_dict(fields)


def fit(args: list[str]):
    """`cli.py fit ARGS` in this process; the one run record it leaves under --run.out_dir."""
    from pe_sweeps.cli import cli_main
    from pe_sweeps.runs.records import load_records

    cli_main(args)
    out_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("--run.out_dir=")))
    (record,) = load_records(out_dir)
    return record


class FakeConfig(dict):
    def update(self, values, allow_val_change=False):
        super().update(values)


class FakeRun:
    """The calls a wandb Run receives: config updates, define_metric, log and summary updates."""

    def __init__(self):
        self.config, self.defined, self.logged, self.summary = FakeConfig(), {}, [], {}
        self.entity, self.project, self.id, self.offline, self.dir = None, "pe-sweeps", "abc", True, "/r/wandb/x/files"

    def define_metric(self, name, **kwargs):
        self.defined[name] = kwargs

    def log(self, row):
        self.logged.append(row)


def offline_run_records(run_dir: Path) -> list[dict] | None:
    """The records of an offline run's .wandb log, by `wandb leet inspect --json` (None without it)."""
    import json
    import shutil
    import subprocess
    import sys

    leet = shutil.which("wandb") or str(Path(sys.executable).with_name("wandb"))
    result = subprocess.run([leet, "leet", "inspect", "--json", str(next(run_dir.glob("*.wandb")))],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    if result.returncode != 0:
        return None
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
