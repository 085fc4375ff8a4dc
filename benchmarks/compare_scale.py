"""How `cli.py compare` holds at an atlas's size (issue 49.2): writes E encodings x T tasks x S seeds synthetic runs
(records and per-example outcomes, through the project's own writers), then times `compare` over all of them in a
fresh process (wall and CPU seconds, peak memory). The target: under 10 s for 2,000 records on 2 cores.

    python benchmarks/compare_scale.py                     # 40 x 25 x 2 = 2,000 runs
    python benchmarks/compare_scale.py --encodings 10 --tasks 5 --repeats 3

Each run's outcomes are a synthetic task's: 8 lengths x 8 examples, in-distribution up to length 4, each example
right with the run's own probability; its logged val/acc, val/acc_ood and val/acc_len_N are the outcomes' (so
`compare` takes the seeds-and-examples path, as for real runs). A task's runs of one seed share their evaluation
examples (the data seed follows the seed), as a synthetic sweep's do. The numbers are the ones `compare` reports,
not a result.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pe_sweeps.runs.outcomes import write_table  # noqa: E402
from pe_sweeps.runs.records import RunRecord, write_record  # noqa: E402

LENGTHS, PER_LENGTH, TRAIN_MAX_LEN = 8, 8, 4


def write_runs(
    out: Path, encodings: int, tasks: int, seeds: int, rng: np.random.Generator, names: list[str] | None = None
) -> int:
    """The synthetic runs under `out/runs/`; returns how many. `names`: the tasks' names (default task0, task1...),
    e.g. registered tasks, whose categories compare then groups."""
    count = 0
    lengths = np.repeat(np.arange(1, LENGTHS + 1), PER_LENGTH)
    for task_name in names or [f"task{task}" for task in range(tasks)]:
        for seed in range(seeds):
            ids = np.arange(len(lengths))
            hashes = rng.integers(0, 2**62, size=len(lengths))  # this (task, seed)'s evaluation examples
            for encoding in range(encodings):
                name = f"{task_name}-enc{encoding}-s{seed}"
                run_dir = out / "runs" / name
                correct = rng.random(len(lengths)) < rng.uniform(0.05, 0.95)
                table = {"id": ids, "hash": hashes, "length": lengths, "correct": correct,
                         "tok_acc": correct.astype(np.float64), "nll": rng.random(len(lengths))}  # fmt: skip
                pointer = write_table(run_dir, "val", 100, table)
                final = {"val/acc": float(correct[lengths <= TRAIN_MAX_LEN].mean()),
                         "val/acc_ood": float(correct[lengths > TRAIN_MAX_LEN].mean())}  # fmt: skip
                final |= {f"val/acc_len_{n}": float(correct[lengths == n].mean()) for n in range(1, LENGTHS + 1)}
                data = {"task": task_name, "train_max_len": TRAIN_MAX_LEN, "seed": seed}
                model = {"arch": {"encoding": f"enc{encoding}"}}
                config = {"seed_everything": seed, "model": {"init_args": model}, "data": {"init_args": data}}
                record = RunRecord.from_dict({
                    "name": name, "group": f"atlas/{task_name}/enc{encoding}", "task": task_name,
                    "encoding": f"enc{encoding}", "seed": seed, "data_seed": seed, "sweep": "atlas",
                    "subcommand": "fit", "status": "finished", "config": config, "final": final, "best": final,
                    "history": [{"step": 100, **final}], "outcomes": {"val": pointer}, "step": 100, "max_steps": 100,
                })  # fmt: skip
                write_record(run_dir / "record.json", record)
                count += 1
    return count


def time_compare(out: Path) -> dict:
    """`cli.py compare` over `out` in a fresh process: wall and CPU seconds, peak memory, output size."""
    command = [sys.executable, str(ROOT / "cli.py"), "compare", f"--out_dir={out}", "--metric", "val/acc"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"error: compare failed: {result.stderr.strip().splitlines()[-1:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    sampled = "interval over seeds and evaluation examples" in result.stdout  # its legend, when outcomes were used
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_mb": round(after.ru_maxrss / 1024),
            "output_lines": result.stdout.count("\n"), "examples_in_intervals": sampled}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encodings", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=25)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    if min(args.encodings, args.tasks, args.seeds, args.repeats) < 1 or args.seeds < 2:
        parser.error("--encodings, --tasks and --repeats must be >= 1, --seeds >= 2")
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        runs = write_runs(Path(folder), args.encodings, args.tasks, args.seeds, np.random.default_rng(0))
        print(f"{runs} runs ({args.encodings} encodings x {args.tasks} tasks x {args.seeds} seeds) written in "
              f"{time.perf_counter() - start:.1f} s; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        for repeat in range(args.repeats):
            print(json.dumps({"repeat": repeat + 1, "runs": runs, **time_compare(Path(folder))}))


if __name__ == "__main__":
    main()
