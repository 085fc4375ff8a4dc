"""Chaos harness: does every grid point of a sweep run exactly once when sweep processes and trials are killed?

To run: python benchmarks/chaos.py [--storages sqlite-cold,sqlite-warm,postgresql,journal,redis] [--runs 1]
[--points 48] [--processes 3] [--workers 3] [--crash-p 0.2] [--seed 0] [--json FILE] [--storage-url NAME=URL]

Per storage and repetition: a grid sweep of `--points` fake trials (tests/fake_fit.py: about a second each, no
training; each crashes with probability `--crash-p` after its first validation and, when it finishes, appends
its x to a shared log) is run by `--processes` `cli.py sweep` processes x `--workers` workers on one study
(`--heartbeat 1`, `--max_retries 50`: crashes alone never exhaust the retries). Round 1 is the chaos round: at
random moments a random sweep process is SIGKILLed, a random trial child is SIGKILLed, a sweep is SIGKILLed
right after one of its children wrote a finished record (usually before it has told the result), and a sweep is sent
SIGTERM or SIGINT; a sweep that exits non-zero is restarted while chaos remains. Later rounds restart all the
processes without chaos, until every one exits 0 or `--max-rounds` is reached. Then the study is read with
Optuna and per storage the table shows (summed over repetitions):

- lost: grid points with no COMPLETE trial;
- completed twice: grid points with more than one COMPLETE trial;
- trained twice: grid points whose fake run reached `finished` more than once (the shared log), even if only
  one trial COMPLETEd: the work was done twice;
- promised retry missing: FAIL trials whose reason says "re-queued" (not "not re-queued") although no trial
  has their number in its `retry_history`;
- stale, no reason: FAIL trials with an empty reason (failed by Optuna's stale-heartbeat check);
- rounds until every sweep exited 0 (or "-" if never), the last round's exit codes, wall seconds per run.

Storages: `sqlite-cold` (the sweep's own SQLite file, `--cold_start`), `sqlite-warm` (`--warm_any`: trials
forked from the warm-start server), `postgresql` (a fresh database per run on the server named by
PE_TEST_POSTGRES, else the one scripts/start_postgres.sh starts), `journal` (a journal file in the run's folder),
`redis` (an empty database on the server named by PE_TEST_REDIS, else scripts/start_redis.sh's), and any
`--storage-url NAME=URL` (`{out}` in
URL is the run's folder; NAME ending in -warm runs warm). The harness makes itself a child subreaper
(Linux), so every process its sweeps leave behind is its descendant: at the end it SIGKILLs their process
groups and removes its folders (`--keep` keeps them).
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_fit.py"
STUDY = "chaos"
SWEEP_EVENTS = ["kill", "kill", "kill_after_finish", "kill_after_finish", "term", "int"]  # per chaos round
CHILD_KILLS = 6  # per chaos round
ROUND_TIMEOUT_S = 300


@dataclass
class Storage:
    name: str
    url: str | None  # None: the sweep's own SQLite file; "{out}" is the run's folder
    warm: bool = False
    postgres: bool = False
    redis: bool = False


@dataclass
class Run:
    """One repetition on one storage: its folder, sweep processes and what happened to them."""

    storage: Storage
    out: Path
    url: str | None
    rng: random.Random
    args: argparse.Namespace
    sweeps: list = field(default_factory=list)  # one Popen per slot
    events: Counter = field(default_factory=Counter)
    tracebacks: int = 0  # sweep stderr files with a Traceback
    started: int = 0  # sweep processes started

    def __post_init__(self):
        self.children = Children(self.out / "sweeps" / STUDY)


# ---------------------------------------------------------------- processes (Linux /proc)


def become_subreaper() -> None:
    """Orphans of our sweeps (trial children, fork servers) are re-parented to us, so we can find and end them."""
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid, pgid = text.rsplit(")", 1)[1].split()[:3]
    return state, int(ppid), int(pgid)


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1 and (stat := proc_stat(pid)) and len(chain) < 64:
        pid = stat[1]
        chain.append(pid)
    return chain


def alive_descendant(pid: int) -> bool:
    stat = proc_stat(pid)
    return bool(stat) and stat[0] != "Z" and os.getpid() in ancestors(pid)


def descendants() -> list[int]:
    """Our descendants, zombies included (one pass over /proc)."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))):
            parent[int(entry.name)] = stat[1]
    me, found = os.getpid(), []
    for pid in parent:
        up = parent.get(pid)
        while up and up != me and up > 1:
            up = parent.get(up)
        if up == me:
            found.append(pid)
    return found


def reap_orphans(sweeps: list[subprocess.Popen]) -> None:
    """Collect exited orphans re-parented to us (not our sweeps: their Popen objects collect those)."""
    ours = {s.pid for s in sweeps}
    for pid in descendants():
        stat = proc_stat(pid)
        if stat and stat[0] == "Z" and stat[1] == os.getpid() and pid not in ours:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill_everything() -> None:
    """SIGKILL the process group of every descendant (each sweep, server and child leads its own), then reap."""
    for _ in range(50):
        left = [pid for pid in descendants() if (proc_stat(pid) or ("Z",))[0] != "Z"]
        if not left:
            break
        for pid in left:
            try:
                pgid = os.getpgid(pid)
                os.killpg(pgid, signal.SIGKILL) if pgid != os.getpgrp() else os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


class Children:
    """The running fake trials of a study folder: each writes its record under trial-<n>/runs/fake-<pid>/."""

    PENDING_S = 60  # a trial folder with no run folder after this long never had a child that validated

    def __init__(self, study_dir: Path):
        self.study_dir = study_dir
        self.done: set[str] = set()
        self.pending: dict[str, float] = {}  # trial folder -> first seen
        self.live: dict[str, tuple[int, Path]] = {}  # trial folder -> (pid, record)

    def scan(self) -> dict[int, Path]:
        """pid -> record of each running child (one trial folder, one child)."""
        names = [e.name for e in os.scandir(self.study_dir)] if self.study_dir.is_dir() else []
        for name in names:
            if name.startswith("trial-") and name not in self.done and name not in self.live:
                self.pending.setdefault(name, time.time())
        for name, seen in list(self.pending.items()):
            runs = list((self.study_dir / name / "runs").glob("fake-*"))
            if runs or time.time() - seen > self.PENDING_S:
                del self.pending[name]
                if runs:
                    self.live[name] = (int(runs[0].name.split("-")[1]), runs[0] / "record.json")
                else:
                    self.done.add(name)
        for name, (pid, _) in list(self.live.items()):
            if not alive_descendant(pid):
                del self.live[name]
                self.done.add(name)
        return dict(self.live.values())


# ---------------------------------------------------------------- sweeps


def write_sweep_file(out: Path, points: int) -> Path:
    sweep = {
        "program": str(FAKE), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": list(range(1, points + 1))}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = out / f"{STUDY}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def start_sweep(run: Run) -> subprocess.Popen:
    a = run.args
    cmd = [sys.executable, str(ROOT / "cli.py"), "sweep", str(run.out / f"{STUDY}.yaml"), f"--out_dir={run.out}",
           "--heartbeat=1", f"--workers={a.workers}", f"--study_name={STUDY}", "--max_retries=50",
           "--warm_any" if run.storage.warm else "--cold_start"]  # fmt: skip
    cmd += [f"--storage={run.url}"] if run.url else []
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_CRASH_P": str(a.crash_p),
           "FAKE_FINISHED_LOG": str(run.out / "finished.log")}  # fmt: skip
    run.started += 1
    err = open(run.out / "logs" / f"sweep-{run.started}.err", "w")
    with err:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def owner(run: Run, pid: int) -> subprocess.Popen | None:
    """The live sweep process a trial child runs under (its parent, or the fork server's parent)."""
    chain = ancestors(pid)
    return next((s for s in run.sweeps if s.poll() is None and s.pid in chain), None)


def finished(record: Path) -> bool:
    from pe_sweeps.runs.records import read_record

    run = read_record(record, warn=False)  # None while missing or caught mid-write
    return run is not None and run.status == "finished"


def signal_sweep(run: Run, sweep: subprocess.Popen | None, sig: int, event: str) -> bool:
    if sweep is None or sweep.poll() is not None:
        return False
    sweep.send_signal(sig)
    run.events[event] += 1
    return True


def kill_child(run: Run, children: dict[int, Path]) -> None:
    try:
        os.killpg(run.rng.choice(sorted(children)), signal.SIGKILL)  # a trial child leads its own process group
        run.events["child"] += 1
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- rounds


class Chaos:
    """The chaos round: SWEEP_EVENTS in random order and CHILD_KILLS child kills, one every 0.5-2 s from the
    first running child on; "kill_after_finish" arms a watch that SIGKILLs the sweep of the first child whose
    record turns finished."""

    def __init__(self, run: Run):
        self.run = run
        self.plan = list(SWEEP_EVENTS)
        run.rng.shuffle(self.plan)
        self.child_kills = CHILD_KILLS
        self.state = "before"  # before the first child, "acting", or "armed" (watching for a finished record)
        self.watched: dict[int, Path] = {}  # armed: children seen running, and their sweeps when last seen
        self.owners: dict[int, subprocess.Popen | None] = {}
        self.next_at = 0.0

    def active(self) -> bool:
        return bool(self.plan or self.child_kills or self.state == "armed")

    def tick(self) -> None:
        children = self.run.children.scan()
        if self.state == "before" and children:
            self.state = "acting"
        if self.state == "armed":
            self.watch(children)
        elif self.state == "acting" and time.time() >= self.next_at and self.act(children):
            self.next_at = time.time() + self.run.rng.uniform(0.5, 2.0)

    def act(self, children: dict[int, Path]) -> bool:
        """One fault, on a sweep that runs a child (past its start-up) or on a child; False if none runs."""
        run = self.run
        busy = sorted({s for s in map(lambda pid: owner(run, pid), children) if s is not None}, key=lambda s: s.pid)
        if children and self.child_kills and (run.rng.random() < 0.5 or not self.plan or not busy):
            self.child_kills -= 1
            kill_child(run, children)
        elif self.plan and busy:
            event = self.plan.pop()
            if event == "kill_after_finish":
                self.state, self.watched = "armed", {}
                return True
            sig = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}[event]
            signal_sweep(run, run.rng.choice(busy), sig, event)
        return bool(children)

    def watch(self, children: dict[int, Path]) -> None:
        """SIGKILL the sweep of the first watched child whose record says finished (it may have just exited)."""
        self.watched.update(children)
        for pid, record in list(self.watched.items()):
            if finished(record):
                if signal_sweep(self.run, self.owners.get(pid) or owner(self.run, pid), signal.SIGKILL,
                                "kill_after_finish"):  # fmt: skip
                    self.state = "acting"
                    return
                del self.watched[pid]
            elif pid not in children:
                del self.watched[pid]
        self.owners = {pid: owner(self.run, pid) for pid in children}  # while the child still has its parent


def run_round(run: Run, chaos: Chaos | None) -> list[int]:
    """Start `--processes` sweeps and wait for them; with `chaos`, inject faults and restart failed sweeps."""
    run.sweeps = [start_sweep(run) for _ in range(run.args.processes)]
    deadline, last_reap = time.time() + ROUND_TIMEOUT_S, 0.0
    while any(s.poll() is None for s in run.sweeps):
        if time.time() > deadline:
            for sweep in run.sweeps:
                signal_sweep(run, sweep, signal.SIGKILL, "round_timeout")
            break
        if chaos and chaos.active():
            chaos.tick()
            restart_failed(run)
        if time.time() - last_reap > 1:
            reap_orphans(run.sweeps)
            last_reap = time.time()
        time.sleep(0.05 if chaos and chaos.state == "armed" else 0.2)
    codes = [s.wait() for s in run.sweeps]
    count_tracebacks(run)
    settle(run)
    return codes


def restart_failed(run: Run) -> None:
    """Restart every slot whose sweep exited non-zero."""
    for i, sweep in enumerate(run.sweeps):
        if sweep.poll() not in (None, 0):
            run.sweeps[i] = start_sweep(run)


def count_tracebacks(run: Run) -> None:
    run.tracebacks = sum("Traceback" in p.read_text(errors="replace") for p in (run.out / "logs").glob("*.err"))


def settle(run: Run) -> None:
    """Give orphaned trial children the time their watchdog needs to stop them (sweep/children.py)."""
    deadline = time.time() + 15
    while run.children.scan() and time.time() < deadline:
        reap_orphans(run.sweeps)
        time.sleep(0.2)
    reap_orphans(run.sweeps)


# ---------------------------------------------------------------- one repetition


def service_url(env: str, script: str) -> str:
    """The test server named by the variable `env`, else the one `scripts/<script>` starts (its last line)."""
    server = os.environ.get(env)
    if not server:
        command = ["bash", str(ROOT / "scripts" / script)]
        server = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return server


def postgres_server() -> str:
    return service_url("PE_TEST_POSTGRES", "start_postgres.sh")


def fresh_database(server: str) -> tuple[str, str]:
    """A new, empty database on `server`: (its name, its SQLAlchemy URL)."""
    import psycopg

    name = f"pe_chaos_{os.getpid()}_{time.time_ns()}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    url = server.rsplit("/", 1)[0] + "/" + name
    return name, url.replace("postgresql://", "postgresql+psycopg://", 1)


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def redis_database() -> str:
    """An empty database on the test Redis server (scripts/start_redis.sh makes 4096)."""
    import redis

    server = service_url("PE_TEST_REDIS", "start_redis.sh")
    for index in random.Random(time.time_ns()).sample(range(1, 4096), 200):
        url = f"{server.rstrip('/')}/{index}"
        if redis.Redis.from_url(url).setnx("pe-chaos-claimed", 1):
            return url
    raise SystemExit("error: no empty Redis database left")


def repetition(storage: Storage, args: argparse.Namespace, rep: int, pg: str | None) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"{storage.name}-{rep}-", dir=args.out))
    (out / "logs").mkdir()
    database, url = fresh_database(pg) if storage.postgres else (None, (storage.url or "").replace("{out}", str(out)))
    url = redis_database() if storage.redis else url
    run = Run(storage, out, url or None, random.Random(f"{args.seed}-{storage.name}-{rep}"), args)
    began, rounds, codes = time.time(), None, []
    try:
        write_sweep_file(out, args.points)
        for index in range(args.max_rounds):
            codes = run_round(run, Chaos(run) if index == 0 else None)
            if all(code == 0 for code in codes):
                rounds = index + 1
                break
        wall = time.time() - began
        found = measure(run.url or f"sqlite:///{out / 'sweeps' / STUDY / 'optuna.db'}", out, args.points)
    finally:
        kill_everything()
        if database:
            drop_database(pg, database)
        if storage.redis:
            import redis

            redis.Redis.from_url(url).flushdb()
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return {"storage": storage.name, "rep": rep, "rounds": rounds, "exit_codes": codes, "wall_s": round(wall, 1),
            "events": dict(run.events), "sweeps_started": run.started, "tracebacks": run.tracebacks,
            **found}  # fmt: skip


def measure(url: str, out: Path, points: int) -> dict:
    """The exactly-once counts of the study (see the module docstring)."""
    import optuna
    from optuna.trial import TrialState

    from pe_sweeps.storages.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=STUDY, storage=open_storage(url, 1)).get_trials(deepcopy=False)
    complete = Counter(t.params.get("x") for t in trials if t.state == TrialState.COMPLETE)
    log = out / "finished.log"
    trained = Counter(int(x) for x in log.read_text().split()) if log.exists() else Counter()
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    failed = [t for t in trials if t.state == TrialState.FAIL]
    reasons = {t.number: t.user_attrs.get("reason", "") for t in failed}
    promised = [n for n, r in reasons.items() if "re-queued" in r and "not re-queued" not in r and n not in retried]
    return {
        "points": points,
        "trials": len(trials),
        "lost": sum(complete[x] == 0 for x in range(1, points + 1)),
        "completed_twice": sum(complete[x] > 1 for x in range(1, points + 1)),
        "trained_twice": sum(trained[x] > 1 for x in range(1, points + 1)),
        "promised_retry_missing": len(promised),
        "stale_no_reason": sum(not r for r in reasons.values()),
        "unfinished": sum(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials),
        "adopted": sum("result adopted" in t.user_attrs.get("reason", "") for t in trials),  # kill_after_finish hit
        "examples": {"promised_retry_missing": [reasons[n] for n in promised[:3]]},
    }


# ---------------------------------------------------------------- report


COLUMNS = [("runs", "runs"), ("points", "points"), ("lost", "lost"), ("completed twice", "completed_twice"),
           ("trained twice", "trained_twice"), ("promised retry missing", "promised_retry_missing"),
           ("stale, no reason", "stale_no_reason"), ("rounds to exit 0", "rounds"),
           ("last exit codes", "exit_codes"), ("wall s", "wall_s"), ("chaos events", "events")]  # fmt: skip
SUMMED = ("lost", "completed_twice", "trained_twice", "promised_retry_missing", "stale_no_reason")


def summarize(results: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["storage"] for r in results):
        mine = [r for r in results if r["storage"] == name]
        row = {"storage": name, "runs": len(mine), "points": mine[0]["points"]}
        row |= {key: sum(r[key] for r in mine) for key in SUMMED}
        row["rounds"] = " / ".join(str(r["rounds"] or "-") for r in mine)
        row["exit_codes"] = " / ".join(" ".join(map(str, r["exit_codes"])) for r in mine)
        row["wall_s"] = " / ".join(f"{r['wall_s']:.0f}" for r in mine)
        events = sum((Counter(r["events"]) for r in mine), Counter())
        row["events"] = ", ".join(f"{k} {v}" for k, v in sorted(events.items()))
        rows.append(row)
    return rows


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("storage")
    for header, _ in COLUMNS:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(row["storage"], *(str(row[key]) for _, key in COLUMNS))
    Console(width=200).print(table)


# ---------------------------------------------------------------- main


def storages(args: argparse.Namespace) -> list[Storage]:
    known = {
        "sqlite-cold": Storage("sqlite-cold", None),
        "sqlite-warm": Storage("sqlite-warm", None, warm=True),
        "postgresql": Storage("postgresql", None, postgres=True),
        "journal": Storage("journal", "{out}/journal.log"),
        "redis": Storage("redis", None, redis=True),
    }
    chosen = []
    for name in filter(None, args.storages.split(",")):
        if name not in known:
            raise SystemExit(f"error: unknown storage {name!r}; known: {', '.join(known)} (or --storage-url)")
        chosen.append(known[name])
    for item in args.storage_url:
        name, sep, url = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --storage-url {item!r}: expected NAME=URL")
        chosen.append(Storage(name, url, warm=name.endswith("-warm")))
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=48)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1, help="repetitions per storage")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crash-p", type=float, default=0.2)
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument("--storages", default="sqlite-cold,sqlite-warm,postgresql")
    parser.add_argument("--storage-url", action="append", default=[], metavar="NAME=URL")
    parser.add_argument("--out", help="parent folder of the runs' folders (default: a new temporary folder)")
    parser.add_argument("--json", help="write the per-run results and the summary here")
    parser.add_argument("--keep", action="store_true", help="keep the runs' folders")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = storages(args)
    pg = postgres_server() if any(s.postgres for s in chosen) else None  # before we adopt orphans
    own_out = args.out is None
    args.out = args.out or tempfile.mkdtemp(prefix="pe-chaos-")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    results, began = [], time.time()
    try:
        for rep in range(args.runs):
            for storage in chosen:
                results.append(repetition(storage, args, rep, pg))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        kill_everything()
        if own_out and not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)
    rows = summarize(results)
    title = (f"chaos: {args.points} points, {args.processes} processes x {args.workers} workers, "
             f"crash p {args.crash_p}, seed {args.seed}; {time.time() - began:.0f} s")  # fmt: skip
    print_table(rows, title)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("json", "out")}
        Path(args.json).write_text(json.dumps({"config": config, "summary": rows, "results": results}, indent=1))


if __name__ == "__main__":
    main()
