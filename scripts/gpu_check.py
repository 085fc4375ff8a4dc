"""The prepared GPU check (issue 26, "fast on a GPU by construction"): one command that a session lent a GPU runs
once, whose numbers then go into docs/benchmarks.md. Run it through scripts/gpu_check.sh (a time budget, the JSON's
path).

To run: bash scripts/gpu_check.sh [--only encodings,ddp] [--limit encodings=300] [--encodings rope,alibi]
        GPU_CHECK_CPU=1 bash scripts/gpu_check.sh    # the same sections on the CPU at tiny sizes (CI's dry run)

Sections, each with its own time limit (seconds, `LIMITS`); one that fails records its error, the others still run,
and each records its wall seconds. The JSON is rewritten after every section, so a run cut short keeps what it had.
- device (top-level `device`): torch / CUDA / NCCL / cuDNN / Triton versions, GPU name and count, bf16 support,
  which SDPA kernels are enabled and whether FlashAttention is built in.
- encodings: every registered encoding, causal and (unless causal-only) bidirectional: a small `Transformer`'s
  forward + backward in fp32 and under bf16 autocast on the device (`auto` attention backend: FlexAttention on
  CUDA for encodings that declare it); the attention kernels the profiler saw; the largest difference from the
  same model in fp32 on the CPU (outputs absolute, gradients relative to the model's largest gradient entry); ms per
  forward + backward (median). Compiled FlexAttention's caches are reset per encoding, as in a run of one encoding.
- pytest_gpu: `pytest -m gpu` and its summary line.
- sweep: a 2-trial grid sweep of tiny copy-task fits (`cli.py sweep`, warm start) with `--devices_per_trial 1
  --trials_per_gpu 2 --workers 2` (the CPU: `--devices_per_trial 0`); each trial's start, device and state.
- ddp: a DDP `cli.py fit` on min(2, GPUs) GPUs over NCCL (the CPU: 2 processes over gloo); on CUDA also a raw
  NCCL all_reduce with 1 and with 2 ranks (both on one GPU when there is one: NCCL may refuse; recorded).
- throughput: benchmarks/throughput.py, ours vs x-transformers, at bert-base size in bf16 (the CPU: tiny).
- step_overhead: benchmarks/step_overhead.py's ms/step and host syncs per step ("missing" without the file).
- trials_per_hour: benchmarks/trials_per_hour.py's tiny sweep (3 seeds of the copy task, fixed-shape batches) on
  the plain loop, ours, regional compile, the compiled step (on CUDA: CUDA graphs, `mode="reduce-overhead"`) and
  a seed ensemble, trials/hour and each path's speed-up over ours (the CPU: tiny, the compile backend "eager").
"""

import argparse
import contextlib
import copy
import importlib.util
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECTIONS = ("encodings", "pytest_gpu", "sweep", "ddp", "throughput", "step_overhead", "trials_per_hour")
# per-section time limits: on one GPU they add up to 390 s; on the CPU they only stop a hang
LIMITS = {
    "gpu": {"device": 10, "encodings": 95, "pytest_gpu": 40, "sweep": 40, "ddp": 45, "throughput": 50,
            "step_overhead": 20, "trials_per_hour": 90},
    "cpu": {"device": 30, "encodings": 120, "pytest_gpu": 120, "sweep": 150, "ddp": 120, "throughput": 120,
            "step_overhead": 120, "trials_per_hour": 120},
}  # fmt: skip
SIZES = {  # the encodings section's model and batch
    "gpu": {"batch": 4, "length": 256, "dim": 256, "heads": 4, "depth": 2, "repeats": 5},
    "cpu": {"batch": 2, "length": 16, "dim": 32, "heads": 2, "depth": 1, "repeats": 1},
}
VOCAB = 64
# what the sections import (pyproject's dependencies and the dev extra's x-transformers): a bare GPU image may lack some
NEEDED = ("pytorch_lightning", "jsonargparse", "torchmetrics", "datasets", "tokenizers", "wandb", "optuna", "filelock",
          "rich", "yaml", "scipy", "sklearn", "matplotlib", "pytest", "xdist", "x_transformers")  # fmt: skip
# parity with the CPU in fp32 counts as ok below these (outputs absolute, gradients relative)
TOLERANCE = {"fp32": 1e-3, "bf16": 0.1}
KERNELS = (  # profiler event name fragment -> attention kernel; the first match names an event
    ("_flash_attention_for_cpu", "flash (cpu)"),
    ("_flash_attention", "flash"),
    ("_efficient_attention", "efficient"),
    ("_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_attention_math", "math"),
    ("flex_attention", "flex"),
    ("triton_tem_", "triton template"),  # a compiled FlexAttention kernel (inductor's template kernels)
)
# a tiny copy-task fit (on top of configs/synthetic.yaml and configs/quickstart.yaml): a few seconds
TINY_FIT = ["--trainer.max_steps=10", "--trainer.val_check_interval=5", "--data.train_size=640",
            "--data.eval_per_length=8", "--data.eval_per_train_length=8"]  # fmt: skip
FIT = ["cli.py", "fit", "--config", "configs/synthetic.yaml", "--config", "configs/quickstart.yaml", *TINY_FIT]


class SectionTimeout(Exception):
    """A section (or the process it started) ran past its time limit."""


# ---------------------------------------------------------------------------------------------------- helpers


def run(argv: list[str], limit: float, env: dict | None = None) -> tuple[int, str]:
    """Run `argv` from the repository root in its own session: (exit status, output). Past `limit` seconds its
    whole process group is stopped (SIGTERM, then SIGKILL) and SectionTimeout raised."""
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        output = proc.communicate(timeout=limit)[0]
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        stop(proc)
        raise SectionTimeout(f"{' '.join(argv[1:3])} ran past {limit:.0f} s") from None
    except BaseException:  # the section's alarm, Ctrl-C: never leave the processes behind
        stop(proc)
        raise


def stop(proc: subprocess.Popen) -> None:
    """Stop the process group `run` started: SIGTERM (a sweep stops its trials), SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise SectionTimeout in this (main) thread after `seconds`: the hard stop of an in-process section."""

    def expire(signum, frame):
        raise SectionTimeout(f"ran past {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------- device


def device_section(setup, result: dict) -> None:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    result.update(
        mode=setup.mode, torch=torch.__version__, cuda=torch.version.cuda, cuda_available=cuda,
        gpu_count=torch.cuda.device_count(), gpu_name=torch.cuda.get_device_name(0) if cuda else None,
        capability=".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
        bf16_supported=torch.cuda.is_bf16_supported() if cuda else True,  # CPU autocast always has bf16
        cudnn=torch.backends.cudnn.version() if cuda else None, nccl=nccl_version() if cuda else None,
        triton=module_version("triton"), nccl_available=dist.is_nccl_available(),
        gloo_available=dist.is_gloo_available(),
        flash_attention_built=torch.backends.cuda.is_flash_attention_available(),
        sdpa_enabled={"flash": torch.backends.cuda.flash_sdp_enabled(),
                      "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                      "cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled()},
        float32_matmul_precision=torch.get_float32_matmul_precision(), cpu_cores=len(os.sched_getaffinity(0)),
        python=sys.version.split()[0], missing_modules=[m for m in NEEDED if importlib.util.find_spec(m) is None],
    )  # fmt: skip
    gpu = (
        f"{result['gpu_count']} x {result['gpu_name']}, CUDA {result['cuda']}, NCCL {result['nccl']}" if cuda else "CPU"
    )
    on = [k for k, v in result["sdpa_enabled"].items() if v]
    result["summary"] = f"{gpu}, torch {result['torch']}; bf16 {result['bf16_supported']}; SDPA on: {', '.join(on)}"
    if result["missing_modules"]:  # the sections that import them will fail: name them once, here
        result.update(status="failed", summary=result["summary"] + f"; MISSING: {', '.join(result['missing_modules'])}")


def nccl_version() -> str | None:
    import torch

    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def module_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------------- encodings


def forward_backward(model, tokens, weights, device: str, precision: str):
    """One forward (bf16 autocast for precision bf16) and the backward of a fixed linear loss; the outputs."""
    import torch

    model.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(tokens)
    (out.float() * weights).sum().backward()
    return out


def grads(model) -> dict:
    return {name: p.grad.detach().float().cpu() for name, p in model.named_parameters() if p.grad is not None}


def attention_kernels(step) -> list[str]:
    """The attention kernels the profiler saw during `step()` (op and kernel names, see KERNELS)."""
    import torch
    from torch.profiler import ProfilerActivity

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        step()
    names = {event.name for event in prof.events()} if cuda else kineto_event_names(prof)
    return sorted({kernel_label(name) for name in names} - {None})


def kineto_event_names(prof) -> set[str]:
    """The names of the events a finished profile recorded, read from its Kineto result without building the
    FunctionEvent tree of `prof.events()` (made from these same events, less a few bookkeeping ops such as
    aten::is_leaf): that tree took 2/3 of the CPU dry run's encodings section (~60 ms a profile)."""
    return {event.name() for event in prof.profiler.kineto_results.events()}


def kernel_label(name: str) -> str | None:
    """The attention kernel a profiler event name belongs to (KERNELS), None for any other event."""
    return next((label for part, label in KERNELS if part in name.lower()), None)


def milliseconds(step, device: str, repeats: int) -> float:
    """Median ms of `step()` over `repeats` runs."""
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 3)


def encoding_case(name: str, causal: bool, setup) -> dict:
    """fp32 and bf16 forward + backward of one encoding on the device, against fp32 on the CPU."""
    import torch

    from lightning_modules.arch import ArchConfig
    from lightning_modules.transformer import Transformer

    s = SIZES[setup.mode]
    torch.manual_seed(0)
    arch = ArchConfig(name, dim=s["dim"], depth=s["depth"], num_heads=s["heads"], vocab_size=VOCAB,
                      max_length=s["length"])  # fmt: skip
    reference = Transformer(arch, causal=causal).train()  # dropout 0: deterministic
    model = copy.deepcopy(reference).to(setup.device)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (s["batch"], s["length"]), generator=generator)
    weights = torch.randn(s["batch"], s["length"], s["dim"], generator=generator)
    expected = forward_backward(reference, tokens, weights, "cpu", "fp32").detach()
    expected_grads = grads(reference)
    # relative to the largest gradient entry of the model: some exact gradients are ~0 (a bias every logit of a
    # row shares), so a ratio per parameter would be a ratio of rounding errors
    grad_scale = max(g.abs().max().item() for g in expected_grads.values())
    row = {"encoding": name, "causal": causal}
    for precision in ("fp32", "bf16"):
        inputs = (model, tokens.to(setup.device), weights.to(setup.device), setup.device, precision)
        out = forward_backward(*inputs).detach().float().cpu()  # the first one compiles FlexAttention on CUDA
        out_diff = (out - expected).abs().max().item()
        diffs = [(g - expected_grads[k]).abs().max().item() for k, g in grads(model).items() if k in expected_grads]
        grad_diff = max(diffs) / grad_scale
        row[precision] = {
            "kernels": attention_kernels(lambda inputs=inputs: forward_backward(*inputs)),
            "out_max_abs_diff": out_diff, "grad_max_rel_diff": grad_diff,
            "parity_ok": max(out_diff, grad_diff) <= TOLERANCE[precision],
            "ms": milliseconds(lambda inputs=inputs: forward_backward(*inputs), setup.device, s["repeats"]),
        }  # fmt: skip
    return row


def encodings_section(setup, result: dict) -> None:
    import torch

    from lightning_modules.encodings import ENCODINGS

    names = setup.encodings or list(ENCODINGS)
    cases = [(n, c) for n in names for c in (True, False) if c or not ENCODINGS[n].causal_only]
    result.update(sizes=SIZES[setup.mode], tolerance=TOLERANCE, encodings=names, cases=[], errors={})
    if setup.device == "cpu":
        torch.set_num_threads(1)  # tiny models: a second thread only adds contention on a shared machine
    for name, causal in cases:
        if setup.device == "cuda" and causal:  # each encoding's first case
            torch.compiler.reset()  # a fresh compile per encoding, as in a run of one encoding
        try:
            result["cases"].append(encoding_case(name, causal, setup))
        except SectionTimeout:
            raise
        except Exception as error:  # one encoding's failure is recorded, the others still run
            result["errors"][f"{name} {'causal' if causal else 'bidirectional'}"] = f"{type(error).__name__}: {error}"
    if result["errors"]:
        result["status"] = "failed"
    ok = {p: sum(c[p]["parity_ok"] for c in result["cases"]) for p in ("fp32", "bf16")}
    kernels = sorted({k for c in result["cases"] for p in ("fp32", "bf16") for k in c[p]["kernels"]})
    result["summary"] = (f"{len(result['cases'])}/{len(cases)} cases; parity ok fp32 {ok['fp32']}, bf16 {ok['bf16']}; "
                         f"kernels seen: {', '.join(kernels) or '-'}; {len(result['errors'])} errors")  # fmt: skip


# ---------------------------------------------------------------------------------------------------- pytest


def pytest_section(setup, result: dict) -> None:
    workers = "4" if setup.device == "cuda" else "0"
    # quiet (-q) already, from pyproject's addopts: a second -q would drop the summary line
    # only the files that hold a gpu-marked test: collecting all of tests/ costs ~15 s of imports
    files = [str(path) for path in sorted((ROOT / "tests").rglob("test_*.py")) if "mark.gpu" in path.read_text()]
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-n", workers, *files]
    code, output = run(argv, setup.limit("pytest_gpu"))
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|skipped|failed|deselected)", line)]
    summary = lines[-1].strip("= ") if lines else tail(output, 1)
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", summary)}
    result.update(exit_code=code, summary=summary, counts=counts)
    if code != 0:
        result.update(status="failed", output_tail=tail(output, 40))


# ---------------------------------------------------------------------------------------------------- sweep


def sweep_file(folder: Path) -> Path:
    """A 2-point grid (2 seeds) of the tiny copy-task fit."""
    import yaml

    sweep = {
        "name": "gpu_check", "program": "cli.py", "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"seed_everything": {"values": [0, 1]}},
        "command": ["${env}", "${interpreter}", "${program}", *FIT[1:], "${args}"],
    }  # fmt: skip
    path = folder / "gpu_check.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def trial_device(log: str | None) -> str:
    """cuda or cpu, as the trial's Lightning log says (its "GPU available: ..., used: ..." line); else unknown."""
    text = Path(log).read_text(errors="replace") if log and Path(log).exists() else ""
    if "GPU available:" not in text:
        return "unknown"
    return "cuda" if re.search(r"GPU available: True \(cuda\), used: True", text) else "cpu"


def trial_precision(record: str | None) -> str | None:
    from pe_sweeps.runs.records import read_record

    run = read_record(record, warn=False) if record else None
    return run.precision if run else None


def sweep_section(setup, result: dict) -> None:
    import optuna

    from pe_sweeps import layout

    gpus = (
        ["--devices_per_trial", "1", "--trials_per_gpu", "2"]
        if setup.device == "cuda"
        else ["--devices_per_trial", "0"]
    )
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out"
        argv = [sys.executable, "cli.py", "sweep", str(sweep_file(Path(folder))), "--out_dir", str(out),
                "--workers", "2", *gpus]  # fmt: skip
        code, output = run(argv, setup.limit("sweep"))
        result.update(options=" ".join(argv[4:]).replace(folder, "<tmp>"), exit_code=code, output_tail=tail(output, 30))
        study = optuna.load_study(study_name="gpu_check", storage=f"sqlite:///{layout.study_db(out, 'gpu_check')}")
        result["trials"] = [
            {"number": t.number, "state": t.state.name, "start": t.user_attrs.get("start"),
             "device": trial_device(t.user_attrs.get("log")), "precision": trial_precision(t.user_attrs.get("record")),
             "params": t.params, "val/acc": t.value,
             "seconds": t.duration.total_seconds() if t.duration else None}
            for t in study.trials
        ]  # fmt: skip
    trials = result["trials"]
    if code != 0 or len(trials) != 2 or any(t["state"] != "COMPLETE" for t in trials):
        result["status"] = "failed"
    else:
        del result["output_tail"]
    result["summary"] = "; ".join(f"trial {t['number']} {t['state']} {t['start']} on {t['device']}" for t in trials)


# ---------------------------------------------------------------------------------------------------- ddp

NCCL_PROBE = """
import os, torch, torch.distributed as dist
torch.cuda.set_device(int(os.environ["RANK"]) % torch.cuda.device_count())
dist.init_process_group("nccl")
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
print("all_reduce", x.item(), "on cuda:%d" % torch.cuda.current_device(), flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nccl_probe(world: int, limit: float) -> dict:
    """A raw NCCL all_reduce of ones over `world` ranks (rank r on GPU r mod GPUs): ok when each sums to world."""
    port, env = free_port(), {"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": str(world), "NCCL_DEBUG": "WARN"}
    procs = [subprocess.Popen([sys.executable, "-c", NCCL_PROBE], env={**os.environ, **env, "MASTER_PORT": str(port),
             "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
             start_new_session=True) for r in range(world)]  # fmt: skip
    outputs, deadline = [], time.monotonic() + limit
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            outputs.append(proc.communicate()[0] + f"\n(killed after {limit:.0f} s)")
    ok = all(p.returncode == 0 and f"all_reduce {float(world)}" in o for p, o in zip(procs, outputs))
    return {"ranks": world, "ok": ok, "output_tail": [tail(o, 4) for o in outputs] if not ok else None}


def probe_verdict(probe: dict, needed: bool) -> str:
    return "ok" if probe["ok"] else "FAILED" if needed else "refused (both ranks on one GPU)"


def ddp_section(setup, result: dict) -> None:
    import torch

    from pe_sweeps.runs.records import load_records

    cuda = setup.device == "cuda"
    processes = min(2, torch.cuda.device_count()) if cuda else 2
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, *FIT, "--trainer.strategy=ddp", f"--trainer.devices={processes}",
                f"--trainer.accelerator={'gpu' if cuda else 'cpu'}", f"--run.out_dir={folder}"]  # fmt: skip
        code, output = run(argv, setup.limit("ddp") * (0.5 if cuda else 1))  # on CUDA, then 2 NCCL probes
        records = load_records(Path(folder) / "runs")
    line = next((x for x in output.splitlines() if x.startswith("DDP over")), None)
    result["fit"] = {"processes": processes, "backend": "nccl" if cuda else "gloo", "exit_code": code,
                     "world_size": records[0].world_size if records else None,
                     "status": records[0].status if records else None, "line": line}  # fmt: skip
    if processes < 2:
        result["fit"]["note"] = "one GPU: DDP over 1 process (NCCL process group of 1); 2-GPU DDP not run"
    if cuda:  # a raw NCCL check; 2 ranks share the GPU when there is one (NCCL may refuse that: recorded)
        result["nccl"] = [nccl_probe(world, setup.limit("ddp") * 0.25) for world in (1, 2)]
        shared = torch.cuda.device_count() < 2
        needed = [p for p in result["nccl"] if p["ranks"] == 1 or not shared]  # 2 ranks on 1 GPU may be refused
        probes = ", ".join(f"{p['ranks']} rank(s) {probe_verdict(p, p in needed)}" for p in result["nccl"])
    else:
        result["nccl"] = {"status": "skipped", "reason": "no CUDA: NCCL needs GPUs (the fit ran over gloo)"}
        probes, needed = "skipped (no CUDA)", []
    if code != 0 or result["fit"]["status"] != "finished" or not all(p["ok"] for p in needed):
        result.update(status="failed", output_tail=tail(output, 30))
    result["summary"] = (f"fit over {processes} {'GPU' if cuda else 'CPU'} process(es) ({result['fit']['backend']}): "
                         f"{result['fit']['status']}; NCCL all_reduce: {probes}")  # fmt: skip


# ---------------------------------------------------------------------------------------------------- benchmarks


def throughput_section(setup, result: dict) -> None:
    if setup.device == "cuda":
        sizes = ["--device", "cuda", "--preset", "bert-base", "--steps", "10", "--warmup", "3", "--repeats", "2"]
    else:
        sizes = ["--device", "cpu", "--dim", "32", "--depth", "1", "--heads", "2", "--length", "32", "--batch", "2",
                 "--steps", "1", "--warmup", "1", "--repeats", "1", "--no-memory", "--threads", "1"]  # fmt: skip
    if setup.encodings:
        sizes += ["--encodings", ",".join(setup.encodings)]
    elif setup.device == "cpu":
        sizes += ["--encodings", "rope,t5_bias"]  # the preset's reduced list on CUDA (PRESET_ENCODINGS)
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "benchmarks/throughput.py", *sizes, "--precision", "bf16", "--out", folder]
        code, output = run(argv, setup.limit("throughput"))
        found = sorted(Path(folder).glob("*.json"))
        bench = json.loads(found[0].read_text()) if found else None
    result.update(options=" ".join(argv[2:-2]), exit_code=code)
    if bench is None:
        result.update(status="failed", output_tail=tail(output, 30))
        return
    peak = bench["matmul_peak_flops"]
    overhead = (bench.get("lightning_overhead") or {}).get("overhead_pct")
    result.update(device_name=bench["device_name"], encodings=bench["config"]["encodings"], matmul_peak_flops=peak,
                  lightning_overhead_pct=overhead, rows=[])  # fmt: skip
    for row in bench["encodings"]:
        entry = {"encoding": row["encoding"], "ratio": row.get("ratio")}
        for impl in ("ours", "x-transformers"):
            if impl in row:
                m = row[impl]
                mfu = m["tokens_per_s"] * m["flops_per_token"] / peak
                entry[impl] = {"tokens_per_s": m["tokens_per_s"], "mfu": mfu, "sdpa": m["sdpa"],
                               "peak_mib": m.get("peak_mib")}  # fmt: skip
        result["rows"].append(entry)
    ratios = [f"{r['encoding']} {r['ratio']['median']:.2f}" for r in result["rows"] if r.get("ratio")]
    result["summary"] = f"ours / x-transformers tok/s (bf16): {', '.join(ratios)}"


STEP_LINE = re.compile(r"^(plain|ours)\s+([\d.]+) \(([\d.]+)-([\d.]+)\)\s+([\d.]+)$")


def step_overhead_section(setup, result: dict) -> None:
    script = ROOT / "benchmarks" / "step_overhead.py"
    if not script.exists():
        result.update(status="missing", summary="benchmarks/step_overhead.py is not in this checkout")
        return
    if setup.device == "cuda":
        sizes = ["--steps", "200", "--warmup", "50", "--repeats", "3"]
    else:
        sizes = ["--steps", "12", "--warmup", "4", "--repeats", "1", "--dim", "16", "--depth", "1", "--heads", "2",
                 "--num-workers", "0"]  # fmt: skip
    code, output = run([sys.executable, str(script.relative_to(ROOT)), *sizes, "--per-encoding"],
                       setup.limit("step_overhead"))  # fmt: skip
    result.update(options=" ".join(sizes + ["--per-encoding"]), exit_code=code, per_encoding_syncs={})
    for line in output.splitlines():
        if match := STEP_LINE.match(line.strip()):
            label, median, low, high, syncs = match.groups()
            result[label] = {"ms_per_step": float(median), "ms_min": float(low), "ms_max": float(high),
                             "host_syncs_per_step": float(syncs)}  # fmt: skip
        elif (parts := line.split()) and len(parts) == 2 and parts[0] in setup.registry:
            result["per_encoding_syncs"][parts[0]] = float(parts[1]) if re.fullmatch(r"[\d.]+", parts[1]) else parts[1]
    if code != 0 or "ours" not in result:
        result.update(status="failed", output_tail=tail(output, 30))
        return
    o, p = result["ours"], result["plain"]
    result["summary"] = (f"ms/step ours {o['ms_per_step']} vs plain {p['ms_per_step']}; host syncs/step ours "
                         f"{o['host_syncs_per_step']} vs plain {p['host_syncs_per_step']}")  # fmt: skip


def trials_per_hour_section(setup, result: dict) -> None:
    script = ROOT / "benchmarks" / "trials_per_hour.py"
    if not script.exists():
        result.update(status="missing", summary="benchmarks/trials_per_hour.py is not in this checkout")
        return
    if setup.device == "cuda":
        sizes = ["--device", "cuda", "--fixed-shapes", "--seeds", "3", "--steps", "200", "--repeats", "1"]
    else:
        sizes = ["--quick", "--fixed-shapes", "--paths", "plain,ours,compiled_step,ensemble"]
    sizes += ["--tasks", "copy", "--encodings", "none"]
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, str(script.relative_to(ROOT)), *sizes, "--out", folder]
        code, output = run(argv, setup.limit("trials_per_hour"))
        found = Path(folder) / "trials_per_hour.json"
        bench = json.loads(found.read_text()) if found.exists() else None
    result.update(options=" ".join(sizes), exit_code=code)
    if bench is None:
        result.update(status="failed", output_tail=tail(output, 30))
        return
    result["rows"] = bench["sweep"]["rows"]
    shown = [f"{r['path']} {r['trials_per_hour']:.0f} (x{r['speedup_vs_ours']:.2f})" for r in result["rows"]
             if r["status"] == "ok"]  # fmt: skip
    result["summary"] = f"trials/hour (x ours): {', '.join(shown)}"


# ---------------------------------------------------------------------------------------------------- driver


class Setup:
    """What every section reads: the mode (gpu / cpu), its device, its limits and the encodings asked for."""

    def __init__(self, args):
        from lightning_modules.encodings import ENCODINGS, check_encoding_name

        self.mode = "cpu" if args.cpu else "gpu"
        self.device = "cpu" if args.cpu else "cuda"
        self.limits = {**LIMITS[self.mode], **args.limit}
        self.registry = list(ENCODINGS)
        self.encodings = args.encodings.split(",") if args.encodings else None
        for name in self.encodings or []:
            check_encoding_name(name)

    def limit(self, section: str) -> float:
        return float(self.limits[section])


def run_section(fn, setup, name: str) -> dict:
    """`fn(setup, result)` under the section's time limit; its status (ok unless it set another), its error if
    it raised, and its wall seconds."""
    result, start = {}, time.perf_counter()
    grace = 0 if name in ("device", "encodings") else 30  # the others stop their own processes at the limit
    try:
        with alarm(setup.limit(name) + grace):
            fn(setup, result)
        result.setdefault("status", "ok")
    except SectionTimeout as error:
        result.update(status="timeout", error=str(error))
    except Exception as error:
        result.update(
            status="error", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc()[-3000:]
        )
    result["wall_s"] = round(time.perf_counter() - start, 2)
    return result


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, path)


def summary(report: dict, path: Path) -> str:
    """A few lines for a person: one per section, its status, wall seconds and headline numbers."""
    lines = [f"GPU check ({report['mode']}) -> {path}  [{report.get('total_s', '?')} s]"]
    for name, section in [("device", report["device"]), *report["sections"].items()]:
        last = tail(section.get("output_tail") or "", 1)
        text = section.get("summary") or section.get("error") or section.get("reason") or last
        lines.append(f"  {name:14} {section['status']:8} {section['wall_s']:7.1f} s  {text}")
    return "\n".join(lines)


SECTION_FUNCTIONS = {
    "encodings": encodings_section, "pytest_gpu": pytest_section, "sweep": sweep_section, "ddp": ddp_section,
    "throughput": throughput_section, "step_overhead": step_overhead_section,
    "trials_per_hour": trials_per_hour_section,
}  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check.json", help="the JSON report's path")
    parser.add_argument("--cpu", action="store_true", default=os.environ.get("GPU_CHECK_CPU") == "1",
                        help="the CPU dry run at tiny sizes (default: GPU_CHECK_CPU=1)")  # fmt: skip
    parser.add_argument("--only", help=f"a comma-separated subset of: {', '.join(SECTIONS)}")
    parser.add_argument("--limit", action="append", default=[], help="SECTION=SECONDS, a section's time limit")
    parser.add_argument("--encodings", help="comma-separated registry names (encodings and throughput sections)")
    parser.add_argument("--summary", metavar="JSON", help="print the summary of an existing report and exit")
    args = parser.parse_args(argv)
    limits = {}
    for item in args.limit:
        key, _, value = item.partition("=")
        if key not in LIMITS["gpu"] or not re.fullmatch(r"\d+(\.\d+)?", value):
            parser.error(f"--limit {item!r}: expected SECTION=SECONDS with SECTION one of: {', '.join(LIMITS['gpu'])}")
        limits[key] = float(value)
    args.limit = limits
    args.only = args.only.split(",") if args.only else list(SECTIONS)
    if unknown := [s for s in args.only if s not in SECTIONS]:
        parser.error(f"--only: unknown section {unknown[0]!r}; choose from: {', '.join(SECTIONS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.summary:
        print(summary(json.loads(Path(args.summary).read_text()), Path(args.summary)))
        return 0
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible; GPU_CHECK_CPU=1 runs the CPU dry run", file=sys.stderr)
        return 2
    from pe_core.errors import ConfigError

    try:
        setup = Setup(args)
    except ConfigError as error:
        print(f"gpu_check: {error}", file=sys.stderr)
        return 2
    path, start = Path(args.out).resolve(), time.perf_counter()
    report = {"mode": setup.mode, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "limits": setup.limits, "sections": {}}
    report["device"] = run_section(device_section, setup, "device")
    write_json(report, path)
    for name in args.only:
        print(f"gpu_check: {name} ...", flush=True)
        report["sections"][name] = run_section(SECTION_FUNCTIONS[name], setup, name)
        report["total_s"] = round(time.perf_counter() - start, 1)
        write_json(report, path)
    print(summary(report, path))
    bad = [n for n, s in report["sections"].items() if s["status"] not in ("ok", "skipped", "missing")]
    return 1 if bad or report["device"]["status"] != "ok" else 0


if __name__ == "__main__":
    sys.exit(main())
