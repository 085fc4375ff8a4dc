"""A fake trial program for the reseed tests: parses `--key=value` arguments as `cli.py fit` would receive
them, waits FAKE_TRIAL_SECONDS (default 0), and writes a finished run record under $PE_OUT_DIR whose
val/acc is a fixed function of encoding, lr and seed (rope is best at lr 0.01, the others at 0.001)."""

import json
import os
import sys
import time
from pathlib import Path

import yaml

BASE = {"rope": 0.7, "alibi": 0.5, "none": 0.2, "learned": 0.4}


def main(argv: list[str]) -> None:
    args = {}
    for arg in argv:
        key, _, value = arg.removeprefix("--").partition("=")
        args[key] = yaml.safe_load(value)
    encoding, task = args.get("model.arch.encoding", "rope"), args.get("data.task", "copy")
    seed, lr = args.get("seed_everything", 0), args.get("model.lr", 0.001)
    good_lr = 0.01 if encoding == "rope" else 0.001
    acc = BASE[encoding] + (0.1 if lr == good_lr else 0.0) + 0.01 * seed
    config = {"seed_everything": seed}
    for key, value in args.items():
        node = config
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    final = {"val/acc": acc, "val/acc_ood": acc / 2, "val/loss": 1 - acc}
    name = f"{task}-{encoding}-s{seed}"
    record = {
        "name": name, "group": f"{task}/{encoding}", "task": task, "encoding": encoding, "seed": seed,
        "sweep": os.environ.get("PE_SWEEP"), "subcommand": "fit", "status": "running", "config": config,
        "final": {}, "best": {}, "history": [], "updated_at": time.time(),
    }  # fmt: skip
    path = Path(os.environ["PE_OUT_DIR"]) / "runs" / f"{name}-{os.getpid()}" / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    time.sleep(float(os.environ.get("FAKE_TRIAL_SECONDS", "0")))
    record.update(status="finished", final=final, best=final, history=[{"step": 1, **final}], updated_at=time.time())
    path.write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1:])
