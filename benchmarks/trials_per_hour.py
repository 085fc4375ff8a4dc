"""Trials per hour of a 5-seed tiny sweep: today's training path vs compiled (vs seed ensembles), beside the
plain-loop floor; and a tiny-model ms/step table per encoding, ours vs plain.

To run: python benchmarks/trials_per_hour.py [--seeds 5] [--steps 300] [--repeats 3] [--paths plain,ours,...]
        python benchmarks/trials_per_hour.py --quick      # tiny sizes, a few seconds (the smoke test)

Sweep: `--seeds` seeds of each task of `--tasks` (copy and the Chomsky task even_pairs; tiny model d 64, 2 layers,
rope, batch 8), `--steps` training steps each, no validation (the same evaluation would follow on every path).
A trial is everything from building its data and model to the end of its last step, in this process (a
sweep's process start, the same for every path, is benchmarks/sweep_throughput.py's subject). Paths:
- plain: a hand-written PyTorch loop (benchmarks/step_overhead.py's): the floor, no logging or callbacks;
- ours: `Trainer.fit` with the callbacks `cli.py` adds (step_overhead.py's), i.e. `cli.py fit` today;
- compiled: ours with `--model.compile=true` (regional: each block compiled, lightning_modules/compiling.py);
- compiled_step: ours with the training step's forward + loss compiled as one graph (`compile_step`); on CUDA
  with fixed-shape batches (`--fixed-shapes`) that is CUDA graphs (`mode="reduce-overhead"`);
- ensemble: all seeds of a task as one batched model (lightning_modules/ensemble.py's SeedEnsemble, each member
  on its own data, per-member AdamW and schedule; `ensemble_trials`), "missing" in a checkout without it.
Each compiled trial starts from reset compiler caches (`torch.compiler.reset`), as a sweep's fresh trial process
does: its compile time counts (inductor's on-disk cache, shared by the trials, is kept as a sweep keeps it).
Repeats interleave the paths, rotated per repeat, so that drift on a shared machine falls on all alike;
trials/hour is the median over repeats, and each path's ratio to ours is the median of per-repeat ratios.

Per encoding (`--encodings`, default every registered one; `--per-encoding-steps`): ms/step of plain and ours
over the steady steps (step_overhead.py's timing), interleaved, ours / plain.

Writes benchmarks/results/trials_per_hour.json and .md (`--name`). Measure only: not a timed test. On a loaded machine
the absolute numbers are noisy (load average recorded); the ratios, measured interleaved, less so, and
`--clock cpu` (this process's CPU time instead of wall time) much less.
"""

import argparse
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from datamodules.synthetic import SyntheticDataModule  # noqa: E402
from lightning_modules.arch import ArchConfig  # noqa: E402
from lightning_modules.compiling import compile_blocks, compile_step  # noqa: E402
from lightning_modules.optim import adamw_with_schedule  # noqa: E402
from lightning_modules.synthetic_model import SyntheticTaskModel  # noqa: E402

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # cpu: this process's CPU time, all its threads
PATHS = ("plain", "ours", "compiled", "compiled_step", "ensemble")
TASKS = ("copy", "even_pairs")


def step_overhead():
    """benchmarks/step_overhead.py as a module (its plain loop and its `Trainer.fit` with our callbacks)."""
    spec = importlib.util.spec_from_file_location("step_overhead", ROOT / "benchmarks" / "step_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_data(args, task: str, seed: int) -> SyntheticDataModule:
    """One trial's data: `--steps` batches of `task` drawn with `seed`."""
    min_len = args.train_max_len if args.fixed_shapes else 1
    data = SyntheticDataModule(task=task, causal=True, min_len=min_len, train_max_len=args.train_max_len,
                               train_size=args.batch_size * (args.steps + 10), batch_size=args.batch_size, seed=seed,
                               num_workers=0)  # fmt: skip
    data.setup("fit")
    return data


def build_model(args, data, encoding: str = "rope", compile_mode: str | None = None) -> SyntheticTaskModel:
    """One trial's task module; `compile_mode`: None, "compiled" (regional) or "compiled_step"."""
    arch = ArchConfig(encoding=encoding, dim=args.dim, depth=args.depth, num_heads=args.heads,
                      vocab_size=data.vocab_size, max_length=data.max_seq_len)  # fmt: skip
    model = SyntheticTaskModel(arch=arch, lr=1e-3)
    options = {"backend": args.compile_backend} if args.compile_backend != "inductor" else {}
    if compile_mode == "compiled":
        compile_blocks(model.transformer, **options)
    elif compile_mode == "compiled_step":
        step = compile_step(lambda batch: model.loss(model(batch), batch["targets"]), args.device,
                            fixed_shapes=args.fixed_shapes, **options)  # fmt: skip
        model.forward_loss = step  # read by StepCompiled.training_step
        model.__class__ = StepCompiled
    return model


def build(args, task: str, seed: int, compile_mode: str | None = None):
    """(task module, data) of one solo trial, the model built after `torch.manual_seed(seed)`."""
    data = build_data(args, task, seed)
    torch.manual_seed(seed)
    return build_model(args, data, compile_mode=compile_mode), data


class StepCompiled(SyntheticTaskModel):
    """SyntheticTaskModel whose training step's forward + loss is one compiled function (`forward_loss`)."""

    def training_step(self, batch: dict, batch_idx: int):
        loss = self.forward_loss(batch)
        self.watch_loss(loss)
        self.log("train/loss", loss)
        return loss


def plain_trial(args, task: str, seed: int) -> None:
    """One trial in a hand-written loop: build, then `--steps` AdamW steps."""
    model, data = build(args, task, seed)
    model.to(args.device).train()
    config = adamw_with_schedule(model, 1e-3, 0.0, 0, "cosine", args.steps)
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    for step, batch in enumerate(data.train_dataloader()):
        if step == args.steps:
            break
        batch = {k: v.to(args.device, non_blocking=True) for k, v in batch.items()}
        loss = model.loss(model(batch), batch["targets"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    if args.device == "cuda":
        torch.cuda.synchronize()


def lightning_trial(args, task: str, seed: int, compile_mode: str | None = None) -> None:
    """One trial through `Trainer.fit` with the callbacks `cli.py` adds (step_overhead.py's set)."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.loggers import CSVLogger

    from pe_sweeps import internals
    from pe_sweeps.runs.callbacks import LogLearningRate, StepProgressBar
    from pe_sweeps.runs.record_writer import RecordWriter

    internals.skip_no_op_metric_moves()  # as cli.py does
    if compile_mode:
        torch.compiler.reset()  # a sweep's trial is a fresh process: it compiles again (inductor's disk cache kept)
    model, data = build(args, task, seed, compile_mode=compile_mode)
    with tempfile.TemporaryDirectory() as run_dir:
        callbacks = [RecordWriter(Path(run_dir), {"name": "bench"}, {}), StepProgressBar(), LogLearningRate(),
                     ModelCheckpoint(dirpath=Path(run_dir) / "checkpoints", save_last=True)]  # fmt: skip
        trainer = pl.Trainer(
            max_steps=args.steps, accelerator=args.device, devices=1, logger=CSVLogger(run_dir), callbacks=callbacks,
            limit_val_batches=0, num_sanity_val_steps=0, enable_model_summary=False, default_root_dir=run_dir,
        )  # fmt: skip
        trainer.fit(model, datamodule=data)


def ensemble_trials(args, task: str, seeds: list[int]) -> bool:
    """All `seeds` of a task as one seed ensemble (lightning_modules/ensemble.py's `SeedEnsemble`, what
    `fit --run.ensemble_seeds K` trains): each member built and fed like its solo trial (its own data module and
    batches), `--steps` steps of one batched model. False when that module is not in this checkout (the column
    then reads "missing")."""
    if importlib.util.find_spec("lightning_modules.ensemble") is None:
        return False
    from lightning_modules.ensemble import SeedEnsemble, stack_batches

    data = {seed: build_data(args, task, seed) for seed in seeds}
    ensemble = SeedEnsemble(lambda seed: build_model(args, data[seed]), seeds, device=args.device).train()
    ensemble.configure_optimizer(1e-3, 0.0, 0, "cosine", args.steps)
    loaders = [iter(data[seed].train_dataloader()) for seed in seeds]
    for _ in range(args.steps):
        batches = stack_batches([next(loader) for loader in loaders], device=args.device)
        ensemble.train_step(batches)
    if args.device == "cuda":
        torch.cuda.synchronize()
    return True


def sweep_seconds(args, path: str) -> float | None:
    """Wall seconds of the whole sweep (every task x seed) on one path; None when the path is missing."""
    seeds = list(range(args.seeds))
    clock = CLOCKS[args.clock]
    start = clock()
    for task in args.tasks:
        if path == "ensemble":
            if not ensemble_trials(args, task, seeds):
                return None
            continue
        for seed in seeds:
            if path == "plain":
                plain_trial(args, task, seed)
            else:
                lightning_trial(args, task, seed, None if path == "ours" else path)
    return clock() - start


def run_sweeps(args) -> dict:
    """Every path's sweep, `--repeats` times, interleaved (the order rotated per repeat)."""
    runs = {path: [] for path in args.paths}
    for repeat in range(args.repeats if runs else 0):
        shift = repeat % len(args.paths)
        for path in args.paths[shift:] + args.paths[:shift]:
            load = os.getloadavg()[0]
            seconds = sweep_seconds(args, path)
            runs[path].append({"seconds": seconds, "load": round(load, 2)})
            shown = "missing" if seconds is None else f"{seconds:.1f} s"
            print(f"repeat {repeat} {path}: {shown}, load {load:.1f}", flush=True)
    trials = args.seeds * len(args.tasks)
    rows = []
    for path, each in runs.items():
        if any(r["seconds"] is None for r in each):
            rows.append({"path": path, "status": "missing"})
            continue
        ratios = [r["seconds"] / o["seconds"] for r, o in zip(each, runs["ours"])] if "ours" in runs else []
        rows.append({
            "path": path, "status": "ok",
            "trials_per_hour": statistics.median(3600 * trials / r["seconds"] for r in each),
            "trials_per_hour_each": [round(3600 * trials / r["seconds"]) for r in each],
            "seconds_each": [round(r["seconds"], 2) for r in each],
            "speedup_vs_ours": 1 / statistics.median(ratios) if ratios else None,
            "load_each": [r["load"] for r in each],
        })  # fmt: skip
    return {"trials": trials, "rows": rows}


def per_encoding(args, overhead) -> list[dict]:
    """ms/step of plain and ours per encoding (step_overhead.py's timing of the steady steps), interleaved."""
    rows = []
    for name in args.encodings:
        bench = argparse.Namespace(steps=args.per_encoding_steps, warmup=max(1, args.per_encoding_steps // 5),
                                   dim=args.dim, depth=args.depth, heads=args.heads, batch_size=args.batch_size,
                                   encoding=name, num_workers=0)  # fmt: skip
        plain, ours = [], []
        try:
            for _ in range(args.encoding_repeats or args.repeats):
                plain.append(1000 * overhead.plain_loop(bench))
                ours.append(1000 * overhead.lightning_fit(bench))
        except Exception as error:  # an encoding that needs options: reported, not fatal
            rows.append({"encoding": name, "error": f"{type(error).__name__}: {str(error)[:120]}"})
            continue
        ratio = statistics.median(o / p for o, p in zip(ours, plain))
        rows.append({"encoding": name, "plain_ms": statistics.median(plain), "ours_ms": statistics.median(ours),
                     "ratio": ratio})  # fmt: skip
        print(f"{name:22} plain {rows[-1]['plain_ms']:7.2f} ms  ours {rows[-1]['ours_ms']:7.2f} ms  {ratio:.3f}",
              flush=True)  # fmt: skip
    return rows


def markdown(report: dict, args) -> str:
    sweep = report["sweep"]
    lines = (
        []
        if not sweep["rows"]
        else [
            f"Trials per hour: {args.seeds} seeds x {', '.join(args.tasks)} ({sweep['trials']} trials of {args.steps} "
            f"steps; d {args.dim}, {args.depth} layers, rope, batch {args.batch_size}, no validation), device "
            f"{args.device}, {torch.get_num_threads()} thread(s), {args.clock} clock, {args.repeats} repeat(s) "
            "interleaved; compile "
            f"backend {args.compile_backend}, fixed shapes {args.fixed_shapes}. Load average (1 min) at each run's "
            "start in the last column.",
            "",
            "| path | trials/hour (median) | x ours | each repeat | sweep s | load |",
            "|---|---|---|---|---|---|",
        ]
    )
    for r in sweep["rows"]:
        if r["status"] != "ok":
            lines.append(f"| {r['path']} | {r['status']} | | | | |")
            continue
        speed = f"{r['speedup_vs_ours']:.2f}" if r["speedup_vs_ours"] else ""
        lines.append(f"| {r['path']} | {r['trials_per_hour']:.0f} | {speed} | {r['trials_per_hour_each']} | "
                     f"{r['seconds_each']} | {r['load_each']} |")  # fmt: skip
    if report["per_encoding"]:
        repeats = args.encoding_repeats or args.repeats
        title = (
            f"ms/step per encoding ({args.clock} clock, {args.per_encoding_steps} steps, the first fifth "
            f"untimed; median of {repeats} repeat(s), plain and ours interleaved):"
        )
        lines += ["", title, "",
                  "| encoding | plain ms/step | ours ms/step | ours / plain |", "|---|---|---|---|"]  # fmt: skip
        for r in report["per_encoding"]:
            if "error" in r:
                lines.append(f"| {r['encoding']} | {r['error']} | | |")
            else:
                lines.append(f"| {r['encoding']} | {r['plain_ms']:.2f} | {r['ours_ms']:.2f} | {r['ratio']:.3f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="training steps of every trial")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"a comma-separated subset of: {', '.join(PATHS)} ('none': no sweep)"
    )
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--train-max-len", type=int, default=16)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--fixed-shapes",
        action="store_true",
        help="every example of train-max-len (one batch shape): compiled_step uses CUDA graphs on CUDA",
    )
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (aot_eager: no codegen)")
    parser.add_argument(
        "--encodings",
        default=None,
        help="comma-separated encodings of the ms/step table (default: all registered; 'none': no table)",
    )
    parser.add_argument("--per-encoding-steps", type=int, default=60)
    parser.add_argument("--encoding-repeats", type=int, default=None, help="repeats of the table (default: --repeats)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (steadier on a loaded machine)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a tiny model: 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds (the smoke test)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="trials_per_hour", help="the results' file name (.json, .md)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.repeats, args.dim, args.depth, args.heads = 2, 4, 1, 16, 1, 2
        args.per_encoding_steps, args.compile_backend = 6, "eager"
        args.encodings = args.encodings or "rope,alibi"
    args.tasks = args.tasks.split(",")
    args.paths = [] if args.paths == "none" else args.paths.split(",")
    if unknown := [p for p in args.paths if p not in PATHS]:
        parser.error(f"--paths: unknown path {unknown[0]!r}; choose from: {', '.join(PATHS)}")
    from lightning_modules.encodings import ENCODINGS, check_encoding_name

    if args.encodings == "none":
        args.encodings = []
    else:
        args.encodings = args.encodings.split(",") if args.encodings else list(ENCODINGS)
        for name in args.encodings:
            check_encoding_name(name)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # a tiny model: threads only add noise on a shared machine
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    report = {"args": {k: v for k, v in vars(args).items()}, "torch": torch.__version__, "sweep": run_sweeps(args)}
    overhead = step_overhead()
    overhead.CLOCK = CLOCKS[args.clock]
    report["per_encoding"] = per_encoding(args, overhead)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=1))
    text = markdown(report, args)
    (out / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
