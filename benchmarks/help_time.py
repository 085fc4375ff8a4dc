"""Wall time of every `--help` of the command line, and what it imports.

To run: python benchmarks/help_time.py [--repeats 5] [--commands fit probe ...] [--root CHECKOUT] [--cache on|off]

For each help (`cli.py --help`, `cli.py fit --help`, ..., `cli.py fit --model.help SyntheticTaskModel`):
- wall s: the minimum over `--repeats` runs of a fresh `python cli.py ... --help` (the minimum, because on a shared
  machine other processes only ever add time);
- modules: how many modules `python -X importtime` reports, and their total self import time (s) under
  importtime (which adds its own overhead): both far less sensitive to the machine's load than wall time;
- heavy: which of torch, pytorch_lightning, wandb, optuna, datasets, transformers, sklearn the help imported;
- lines, widest: the help's length and its widest line at COLUMNS=80.
--cache off (the default) measures a help built afresh (PE_CACHE_DIR empty); --cache on lets each help's first run
fill a fresh cache, so the minimum is a cached print. --root times another checkout (e.g. `git archive` of an
older commit) with this interpreter. Measure only: not a timed test (tests/app/test_help.py checks the imports
and widths, not the time).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELPS = {
    "top": ["--help"],
    "fit": ["fit", "--help"],
    "validate": ["validate", "--help"],
    "test": ["test", "--help"],
    "predict": ["predict", "--help"],
    "sweep": ["sweep", "--help"],
    "compare": ["compare", "--help"],
    "probe": ["probe", "--help"],
    "model.help": ["fit", "--model.help", "SyntheticTaskModel"],
}
HEAVY = ("torch", "pytorch_lightning", "wandb", "optuna", "datasets", "transformers", "sklearn")
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


ENV = {**os.environ, "COLUMNS": "80", "PE_CACHE_DIR": ""}


def run(args: list[str], importtime: bool = False) -> subprocess.CompletedProcess:
    """`python [-X importtime] cli.py ARGS` in the checkout, at 80 columns."""
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, str(ROOT / "cli.py"), *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def measure(args: list[str], repeats: int) -> dict:
    """Minimum wall time, module count and self import time, heavy packages, lines and widest line."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = run(args)
        times.append(time.perf_counter() - start)
    traced = run(args, importtime=True)
    rows = [m for line in traced.stderr.splitlines() if (m := IMPORT_LINE.match(line))]
    names = {m[4] for m in rows}
    lines = done.stdout.splitlines()
    return {
        "wall": min(times), "modules": len(rows), "self_s": sum(int(m[1]) for m in rows) / 1e6,
        "heavy": [h for h in HEAVY if h in names], "lines": len(lines), "widest": max(map(len, lines), default=0),
        "rc": done.returncode,
    }  # fmt: skip


def main() -> None:
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commands", nargs="*", default=list(HELPS), choices=list(HELPS))
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose cli.py is timed")
    parser.add_argument("--cache", choices=("on", "off"), default="off")
    args = parser.parse_args()
    ROOT = args.root.resolve()
    if args.cache == "on":
        ENV["PE_CACHE_DIR"] = tempfile.mkdtemp(prefix="help-cache-")
    print(f"{'help':<11} {'wall s':>7} {'modules':>8} {'import s':>9} {'lines':>6} {'widest':>7}  heavy imports")
    for name in args.commands:
        r = measure(HELPS[name], args.repeats)
        heavy = ", ".join(r["heavy"]) or "-"
        rc = "" if r["rc"] == 0 else f"  (exit {r['rc']})"
        print(f"{name:<11} {r['wall']:>7.2f} {r['modules']:>8} {r['self_s']:>9.2f} {r['lines']:>6} {r['widest']:>7}  "
              f"{heavy}{rc}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
