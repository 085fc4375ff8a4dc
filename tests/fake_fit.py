"""A fake `cli.py fit` for tests/sweep/test_faults.py (tests/fake_trial.py is the sweep-method tests' one): takes
the sweep's --key=value arguments, validates twice
within about a second (writing its run record as a real run does) and finishes with val/acc = x.
FAKE_SLEEP=S: S seconds per validation; FAKE_CRASH_X=N: the trial with x=N prints a warning and crashes.
FAKE_CRASH_P=P: each trial crashes with probability P after its first validation (benchmarks/chaos.py);
FAKE_FINISHED_LOG=FILE: a run that finishes appends a line `x` to FILE (to count points trained twice).
Validations are at global steps 1 and 2, or 3 and 4 when resumed (`--ckpt_path`: a checkpoint taken at step 2),
as a resumed run's global steps continue from its checkpoint."""

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pe_sweeps.sweep.children import start_watchdog  # noqa: E402  (stdlib only: starts in milliseconds)

start_watchdog(interval=0.2)


def write_atomic(path: Path, text: str) -> None:  # runs.records' own would import Lightning
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
run_dir = Path(os.environ["PE_OUT_DIR"]) / "runs" / f"fake-{os.getpid()}"
record = {"name": "fake", "status": "running", "final": {}, "history": [], "args": args}
if args.get("x") == os.environ.get("FAKE_CRASH_X"):
    print("UserWarning: a warning line that is not the error", file=sys.stderr)
    raise RuntimeError("boom")
crash = random.random() < float(os.environ.get("FAKE_CRASH_P", 0))
for step in (3, 4) if "ckpt_path" in args else (1, 2):
    time.sleep(float(os.environ.get("FAKE_SLEEP", 0)) or random.uniform(0.1, 0.5))
    record["history"].append({"step": step, "val/acc": step / 10})
    write_atomic(run_dir / "record.json", json.dumps(record))
    if crash:
        raise RuntimeError("random crash (FAKE_CRASH_P)")
record.update(status="finished", final={"val/acc": float(args.get("x", 0))})
write_atomic(run_dir / "record.json", json.dumps(record))
if os.environ.get("FAKE_FINISHED_LOG"):
    with open(os.environ["FAKE_FINISHED_LOG"], "a") as log:  # one short O_APPEND write: lines never interleave
        log.write(f"{args.get('x', '')}\n")
