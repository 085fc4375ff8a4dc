"""Per-step overhead of our training stack on a tiny model: ms/step and host syncs per step, ours vs a plain loop.

To run: python benchmarks/step_overhead.py [--steps 300] [--repeats 3] [--dim 64] [--depth 2] [--encoding rope]

The model is so small (d=64, 2 layers, batches of 8 copy-task examples) that a step is almost all overhead:
what Python, Lightning and our callbacks cost around the same forward, backward and AdamW step.
- "plain": a hand-written PyTorch loop over the same `SyntheticTaskModel` (its forward and loss), the same
  DataLoader and the same AdamW + schedule (`adamw_with_schedule`), with no logging.
- "ours": `Trainer.fit` on that task module with the callbacks `cli.py` adds (RecordWriter, StepProgressBar,
  LogLearningRate, ModelCheckpoint) and a CSVLogger standing in for W&B (whose writes go to a background
  process); no validation inside the timed steps.
Timing: the wall time of steps [warmup, steps) only (model building, Lightning's start-up and the first steps
are excluded), runs interleaved plain/ours repeat by repeat so that drift on a shared machine cancels; the ratio
is the median of per-repeat ratios.

Host syncs: a separate, untimed run of each that counts the Python-level reads of a tensor's value on the host
(`item`, `tolist`, `__bool__`, `__int__`, `__float__`, `cpu`, `numpy`, `nonzero`) per steady-state step,
by call site. On CUDA each of these waits for the GPU (a device sync); here on the CPU the same calls are
counted. Reads from `torch/optim/` are left out: AdamW's step counters are CPU tensors on every device (not a
device sync). Not counted: syncs inside C++ ops (a boolean-mask index, `torch.tensor(x, device="cuda")`).
Per encoding (`--per-encoding`): host syncs per step of the bare task module's training step (forward, loss,
backward) for every registered encoding.
Python calls per step (`--calls`): cProfile's count of function calls per step of each, a measure of interpreter
overhead that a loaded machine does not blur (issue 47: ours 5612 -> 4747 per tiny-model step, plain 1598).
Measure only: not a timed test. Noise: repeats on a loaded 2-core machine vary by 10-30 %.
"""

import argparse
import collections
import contextlib
import logging
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datamodules.synthetic import SyntheticDataModule  # noqa: E402
from lightning_modules.arch import ArchConfig  # noqa: E402
from lightning_modules.encodings import ENCODINGS  # noqa: E402
from lightning_modules.optim import adamw_with_schedule  # noqa: E402
from lightning_modules.synthetic_model import SyntheticTaskModel  # noqa: E402

# what a step's time is read from: wall time (default), or `--clock cpu`: this process's CPU time (all its
# threads, the progress bar's included), which other processes' load on a shared machine barely moves
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = CLOCKS["wall"]
HOST_READS = ("item", "tolist", "__bool__", "__int__", "__float__", "cpu", "numpy", "nonzero")
NOT_A_DEVICE_SYNC = ("torch/optim/",)  # AdamW's step counters live on the CPU on every device


class HostReads:
    """Counts calls of `HOST_READS` on tensors while `counting` is set, by call site (`file:line`)."""

    def __init__(self):
        self.counting = False
        self.sites = collections.Counter()

    def total(self) -> int:
        return sum(self.sites.values())

    @contextlib.contextmanager
    def patched(self):
        originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

        def wrap(name, original):
            def read(tensor, *args, **kwargs):
                if self.counting:
                    self.counting = False  # reads made while reporting one are not counted
                    try:
                        site = call_site()
                        if not any(part in site for part in NOT_A_DEVICE_SYNC):
                            self.sites[f"{name} at {site}"] += 1
                    finally:
                        self.counting = True
                return original(tensor, *args, **kwargs)

            return read

        for name, original in originals.items():
            setattr(torch.Tensor, name, wrap(name, original))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)


def call_site() -> str:
    """`path:line` of the first frame outside this file and torch's own tensor wrappers."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename != __file__ and not frame.filename.endswith(("torch/_tensor.py", "torch/overrides.py")):
            parts = Path(frame.filename).parts
            short = "/".join(parts[-3:]) if "site-packages" in parts else "/".join(parts[-2:])
            return f"{short}:{frame.lineno}"
    return "?"


def build(args, seed: int = 0) -> tuple[SyntheticTaskModel, SyntheticDataModule]:
    torch.manual_seed(seed)
    data = SyntheticDataModule(task="copy", train_max_len=16, train_size=args.batch_size * (args.steps + 10),
                               batch_size=args.batch_size, seed=seed, num_workers=args.num_workers)  # fmt: skip
    data.setup("fit")
    arch = ArchConfig(encoding=args.encoding, dim=args.dim, depth=args.depth, num_heads=args.heads,
                      vocab_size=data.vocab_size, max_length=data.max_seq_len)  # fmt: skip
    return SyntheticTaskModel(arch=arch, lr=1e-3), data


def plain_loop(args, reads: HostReads | None = None) -> float:
    """Seconds per step of a plain PyTorch loop over steps [warmup, steps)."""
    model, data = build(args)
    model.train()
    config = adamw_with_schedule(model, 1e-3, 0.0, 0, "cosine", args.steps)
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    start = None
    for step, batch in enumerate(data.train_dataloader()):
        if step == args.warmup:
            start = CLOCK()
            if reads:
                reads.counting = True
        if step == args.steps:
            break
        loss = model.loss(model(batch), batch["targets"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    if reads:
        reads.counting = False
    return (CLOCK() - start) / (args.steps - args.warmup)


def lightning_fit(args, reads: HostReads | None = None) -> float:
    """Seconds per step of `Trainer.fit` with our callbacks over steps [warmup, steps)."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.loggers import CSVLogger

    from pe_sweeps import internals
    from pe_sweeps.runs.callbacks import LogLearningRate, StepProgressBar
    from pe_sweeps.runs.record_writer import RecordWriter

    class Clock(pl.Callback):
        start = end = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == args.warmup:
                self.start = CLOCK()
                if reads:
                    reads.counting = True
            if trainer.global_step == args.steps - 1 and reads:
                reads.counting = False  # the last step's end runs into fit's teardown: not counted

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == args.steps:
                self.end = CLOCK()

    internals.skip_no_op_metric_moves()  # as cli.py does
    model, data = build(args)
    clock = Clock()
    with tempfile.TemporaryDirectory() as run_dir:
        callbacks = [clock, RecordWriter(Path(run_dir), {"name": "bench"}, {}), StepProgressBar(), LogLearningRate(),
                     ModelCheckpoint(dirpath=Path(run_dir) / "checkpoints", save_last=True)]  # fmt: skip
        trainer = pl.Trainer(
            max_steps=args.steps, accelerator="cpu", devices=1, logger=CSVLogger(run_dir), callbacks=callbacks,
            limit_val_batches=0, num_sanity_val_steps=0, enable_model_summary=False, default_root_dir=run_dir,
        )  # fmt: skip
        trainer.fit(model, datamodule=data)
    counted = args.steps - 1 - args.warmup
    if reads:
        return counted
    return (clock.end - clock.start) / (args.steps - args.warmup)


def syncs_per_step(run, args) -> tuple[float, collections.Counter]:
    """(host reads per steady-state step, their call sites) of one untimed run."""
    reads = HostReads()
    with reads.patched():
        result = run(args, reads)
    steps = result if run is lightning_fit else args.steps - args.warmup
    return reads.total() / steps, reads.sites


def python_calls_per_step(run, args) -> float:
    """Python function calls per training step (cProfile's count, the main thread): the difference between a run
    of `steps` and one of `steps + 100`, so start-up cancels. Deterministic, unlike time on a loaded machine."""
    import cProfile
    import pstats

    counts = []
    for steps in (args.steps, args.steps + 100):
        profile = cProfile.Profile()
        profile.enable()
        run(argparse.Namespace(**{**vars(args), "steps": steps}))
        profile.disable()
        counts.append(pstats.Stats(profile).total_calls)
    return (counts[1] - counts[0]) / 100


def encoding_syncs(args) -> dict[str, float]:
    """Host reads per training step (forward, loss, backward) of the bare task module, per encoding."""
    out = {}
    for name in ENCODINGS:
        try:
            model, data = build(argparse.Namespace(**{**vars(args), "encoding": name}))
        except Exception as error:  # e.g. an encoding that needs options: reported, not fatal
            out[name] = f"- ({type(error).__name__})"
            continue
        batches = iter(data.train_dataloader())
        reads = HostReads()
        with reads.patched():
            for step in range(3):
                batch = next(batches)
                reads.counting = step > 0  # the first step may grow position tables
                model.loss(model(batch), batch["targets"]).backward()
                reads.counting = False
        out[name] = reads.total() / 2
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--encoding", default="rope")
    parser.add_argument("--num-workers", type=int, default=None, help="loader workers (default: 2 on CUDA, 0 on CPU)")
    parser.add_argument("--per-encoding", action="store_true", help="host syncs per step of every encoding")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="wall time, or this process's CPU time")
    parser.add_argument("--calls", action="store_true", help="Python calls per step of each (cProfile; load-proof)")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = CLOCKS[args.clock]
    torch.set_num_threads(1)  # a tiny model: threads only add noise on a shared machine
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    plain_syncs, plain_sites = syncs_per_step(plain_loop, args)
    ours_syncs, ours_sites = syncs_per_step(lightning_fit, args)
    plain, ours = [], []
    for _ in range(args.repeats):
        plain.append(plain_loop(args))
        ours.append(lightning_fit(args))
    ratios = [o / p for o, p in zip(ours, plain)]
    print(
        f"\ntiny model: dim {args.dim}, depth {args.depth}, {args.encoding}, batch {args.batch_size}, steps "
        f"{args.warmup}..{args.steps}, {args.repeats} repeats, 1 thread, loader workers {args.num_workers}, "
        f"{args.clock} clock"
    )
    print(f"{'':8} {'ms/step (median, min-max)':>28} {'host syncs/step':>16}")
    for label, times, syncs in (("plain", plain, plain_syncs), ("ours", ours, ours_syncs)):
        ms = [1000 * t for t in times]
        print(f"{label:8} {statistics.median(ms):>12.2f} ({min(ms):.2f}-{max(ms):.2f}) {syncs:>16.2f}")
    print(f"ours / plain: {statistics.median(ratios):.3f} (median of repeats; min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}); target on CPU <= 1.10")  # fmt: skip
    for label, sites in (("plain", plain_sites), ("ours", ours_sites)):
        for site, count in sites.most_common(8):
            print(f"  {label} host reads: {count:5d} x {site}")
    if args.calls:
        plain_calls, ours_calls = python_calls_per_step(plain_loop, args), python_calls_per_step(lightning_fit, args)
        print(
            f"Python calls per step: plain {plain_calls:.0f}, ours {ours_calls:.0f} ({ours_calls / plain_calls:.2f}x)"
        )
    if args.per_encoding:
        print("\nhost syncs per training step (forward, loss, backward) of the bare task module:")
        for name, count in encoding_syncs(args).items():
            print(f"  {name:20} {count}")


if __name__ == "__main__":
    main()
