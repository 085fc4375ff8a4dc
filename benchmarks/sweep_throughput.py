"""Sweep throughput: the same small grid of short trials, cold vs warm start and 1 vs auto workers.

To run: python benchmarks/sweep_throughput.py [--repeats 2] [--seeds 2] [--steps 20]

The grid is 4 encodings x `--seeds` seeds of a tiny copy model (tests/conftest.py's TINY sizes, `--steps`
training steps, W&B disabled). Each repeat runs the four settings (cold/1, warm/1, cold/auto, warm/auto) as
`cli.py sweep` processes, one after another, in an order rotated per repeat so that load drifting on a
shared machine falls on every setting alike. Per setting (median over repeats, and every repeat's value):

- trials/hour: grid trials / wall time of the whole `cli.py sweep` command (its own start-up and final
  table included: what a user waits for);
- start-up: per trial, child start to its first training step, from the run records (`startup_seconds`:
  `cli.py`'s first line runs to the first `on_train_batch_start`; a cold child's interpreter start before
  that first line, ~20-50 ms, is not in it), as median and the distribution (min, quartiles, max);
- idle-worker fraction: the share of worker-time (workers x wall time of the command) in which a worker had no
  trial (between Optuna's ask and tell); and not-training fraction: the share in which it had no trial in
  its training phase (first step to the record's last write), start-up and exit included;
- the per-trial final val/acc, checked equal between cold and warm for the same grid point.

Writes benchmarks/results/sweep_throughput.json and .md. Numbers on a loaded 2-core machine are noisy: the
report states the load average before and after each run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import TINY  # noqa: E402

from pe_sweeps.runs.records import load_records  # noqa: E402
from pe_sweeps.sweep.trial_devices import cpu_cores  # noqa: E402

ENCODINGS = ["rope", "alibi", "none", "learned"]
SETTINGS = [("cold", "1"), ("warm", "1"), ("cold", "auto"), ("warm", "auto")]


def grid_file(folder: Path, seeds: int, steps: int) -> Path:
    args = [a for a in TINY if not a.startswith(("--trainer.max_steps", "--trainer.val_check_interval"))]
    sweep = {
        "program": str(ROOT / "cli.py"), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"model.arch.encoding": {"values": ENCODINGS}, "seed_everything": {"values": list(range(seeds))}},
        "command": ["${env}", "${interpreter}", "${program}", "fit", *args, f"--trainer.max_steps={steps}",
                    f"--trainer.val_check_interval={max(1, steps // 2)}", "${args}"],
    }  # fmt: skip
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def run_setting(grid: Path, out: Path, start: str, workers: str) -> dict:
    """One `cli.py sweep` of the grid; its wall time, load and the per-trial numbers."""
    cmd = [sys.executable, str(ROOT / "cli.py"), "sweep", str(grid), f"--out_dir={out}", "--study_name=g",
           f"--workers={workers}", *(["--cold_start"] if start == "cold" else [])]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled"}
    load = os.getloadavg()[0]
    began = time.time()
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    ended = time.time()
    if result.returncode != 0:
        raise SystemExit(f"error: {start}/{workers} sweep failed: {result.stderr.strip().splitlines()[-1:]}")
    study = optuna.load_study(study_name="g", storage=f"sqlite:///{out / 'sweeps' / 'g' / 'optuna.db'}")
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    starts = {t.user_attrs.get("start") for t in trials}
    if starts != {start}:
        raise SystemExit(f"error: {start}/{workers}: trials started {starts}")
    records = load_records(out / "sweeps" / "g")
    n_workers = cpu_cores() if workers == "auto" else int(workers)  # cli.py sweep's rule, threads_per_trial 0
    wall = ended - began
    in_trial = sum(t.datetime_complete.timestamp() - t.datetime_start.timestamp() for t in trials)
    training = sum(r.updated_at - (r.process_start + r.startup_seconds) for r in records)
    return {
        "start": start, "workers": workers, "resolved_workers": n_workers, "trials": len(trials),
        "wall_s": wall, "trials_per_hour": 3600 * len(trials) / wall,
        "startup_s": sorted(r.startup_seconds for r in records),
        "idle_worker_fraction": max(0.0, 1 - in_trial / (n_workers * wall)),
        "not_training_fraction": max(0.0, 1 - training / (n_workers * wall)),
        "val_acc": {f"{t.params['model.arch.encoding']}-s{t.params['seed_everything']}": t.value for t in trials},
        "load_before": load, "load_after": os.getloadavg()[0],
    }  # fmt: skip


def quartiles(values: list[float]) -> list[float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return [min(values), q[0], q[1], q[2], max(values)]


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for start, workers in SETTINGS:
        mine = [r for r in runs if (r["start"], r["workers"]) == (start, workers)]
        startups = [s for r in mine for s in r["startup_s"]]
        rows.append({
            "start": start, "workers": f"{workers} ({mine[0]['resolved_workers']})",
            "trials_per_hour": statistics.median(r["trials_per_hour"] for r in mine),
            "trials_per_hour_each": [round(r["trials_per_hour"]) for r in mine],
            "wall_s_each": [round(r["wall_s"], 1) for r in mine],
            "startup_median_s": statistics.median(startups),
            "startup_min_q1_median_q3_max_s": [round(v, 2) for v in quartiles(startups)],
            "idle_worker_fraction": statistics.median(r["idle_worker_fraction"] for r in mine),
            "not_training_fraction": statistics.median(r["not_training_fraction"] for r in mine),
            "load_each": [round(r["load_before"], 1) for r in mine],
        })  # fmt: skip
    return rows


def markdown(rows: list[dict], runs: list[dict], args, same: bool) -> str:
    lines = [
        f"Sweep throughput: {len(ENCODINGS) * args.seeds} trials (tiny copy model, {args.steps} steps, W&B "
        f"disabled), {args.repeats} repeat(s) interleaved, {cpu_cores()} cores, load average (1 min) at each "
        "run's start in the last column.",
        "",
        "| start | workers | trials/hour (median) | each repeat | wall s | start-up median s | start-up min/q1/"
        "median/q3/max s | idle-worker fraction | not-training fraction | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['start']} | {r['workers']} | {r['trials_per_hour']:.0f} | {r['trials_per_hour_each']} | "
            f"{r['wall_s_each']} | {r['startup_median_s']:.2f} | {r['startup_min_q1_median_q3_max_s']} | "
            f"{r['idle_worker_fraction']:.2f} | {r['not_training_fraction']:.2f} | {r['load_each']} |"
        )
    by = {(r["start"], r["workers"].split()[0]): r for r in rows}
    lines.append("")
    for workers in ("1", "auto"):
        cold, warm = by["cold", workers]["trials_per_hour"], by["warm", workers]["trials_per_hour"]
        lines.append(f"- workers {workers}: warm {100 * (warm / cold - 1):+.0f} % trials/hour vs cold")
    lines.append(f"- final val/acc per grid point identical cold vs warm: {same}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--work", default="/tmp/sweep_throughput")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    work = Path(args.work) / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    grid = grid_file(work, args.seeds, args.steps)
    runs = []
    for repeat in range(args.repeats):
        order = SETTINGS[repeat % 4 :] + SETTINGS[: repeat % 4]  # rotated: drift falls on every setting
        for start, workers in order:
            run = run_setting(grid, work / f"{repeat}-{start}-{workers}", start, workers)
            runs.append(run)
            print(f"repeat {repeat} {start}/{workers}: {run['wall_s']:.1f} s, {run['trials_per_hour']:.0f} trials/h, "
                  f"start-up median {statistics.median(run['startup_s']):.2f} s, load {run['load_before']:.1f}",
                  flush=True)  # fmt: skip
    values = {}
    for run in runs:
        values.setdefault(run["start"], []).append(run["val_acc"])
    same = all(v == values["cold"][0] for v in values["cold"] + values["warm"])
    rows = summarise(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"args": vars(args), "cores": cpu_cores(), "rows": rows, "runs": runs, "val_acc_identical": same}
    (out / "sweep_throughput.json").write_text(json.dumps(report, indent=1))
    text = markdown(rows, runs, args, same)
    (out / "sweep_throughput.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
