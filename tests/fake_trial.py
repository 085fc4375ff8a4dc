"""A fake trial program for the sweep runner's tests: starts in a fraction of a second and writes the run
record `cli.py fit` writes (`$PE_OUT_DIR/runs/<name>/record.json`: status, final, history), so the runner's
sampling, budget and pruning are tested end to end without training a model.

    fake_trial.py --mode=quadratic|first_wins|pareto [--steps=N] [--step_size=K] [--pause=SECONDS] [--dump_env=1]
                  [--x=...] [...]

$FAKE_STEPS, when set, overrides --steps (a re-run sweep can then finish quickly). Validation i is at global
step i * step_size (default 1). The record names a W&B run (`wandb`: id fake-<trial>), as `cli.py fit`'s does.

quadratic: val/score = -(x - 0.3)^2 at every validation. first_wins: val/score = 1 for trial 0 and 0 for
every later trial (each trial's directory is `trial-<n>`), a metric a pruner must cut. pareto: quadratic's
val/score and val/cost = x, two objectives whose Pareto front (score up, cost down) is x <= 0.3.
--dump_env=1 writes the trial's environment to `$PE_OUT_DIR/env.json`.
"""

import json
import os
import sys
import time
from pathlib import Path

args = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--"))
out = Path(os.environ["PE_OUT_DIR"])
trial = int(out.name.rsplit("-", 1)[-1])
if args.get("dump_env"):
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps(dict(os.environ)))
metrics = {}
if args["mode"] in ("quadratic", "pareto"):
    value = -((float(args["x"]) - 0.3) ** 2)
    if args["mode"] == "pareto":
        metrics["val/cost"] = float(args["x"])
else:
    value = 1.0 if trial == 0 else 0.0
path = out / "runs" / f"fake-{os.getpid()}" / "record.json"
path.parent.mkdir(parents=True, exist_ok=True)
record = {
    "task": "fake",
    "encoding": "fake",
    "seed": trial,
    "sweep": os.environ.get("PE_SWEEP"),
    "status": "running",
    "config": args,
    "final": {},
    "best": {},
    "history": [],
    "wandb_project": os.environ.get("WANDB_PROJECT"),
    "sweep_params": os.environ.get("PE_SWEEP_PARAMS"),
    "wandb": {"id": f"fake-{trial}", "path": f"p/fake-{trial}", "mode": "offline", "dir": str(out / "wandb")},
}


def write() -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


steps, size = int(os.environ.get("FAKE_STEPS", args.get("steps", 1))), int(args.get("step_size", 1))
for step in range(1, steps + 1):
    time.sleep(float(args.get("pause", 0)))
    record.update(step=step * size, max_steps=steps * size)
    record["history"].append({"step": step * size, "val/score": value, **metrics})
    record["final"].update({"val/score": value, **metrics})
    write()
record["status"] = "finished"
write()
