"""Training throughput, peak memory and MFU of every registered encoding, ours vs x-transformers.

To run: python benchmarks/throughput.py [--encodings all|rope,alibi] [--device cpu|cuda] [--preset bert-base]
[--precision bf16|fp32] [--compile]

Per encoding: training tokens/s (forward + backward + AdamW step, next-token loss over random tokens) of our
`Transformer` + a linear head, and of an x-transformers `TransformerWrapper(Decoder(...))` of the same size
with the same encoding where it has one; runs are interleaved ours/theirs repeat by repeat (ABAB) so drift
on a shared machine cancels, and the ratio ours/x-transformers is reported as median and min-max over
repeats. Also: the overhead of Lightning's `fit` over a plain PyTorch loop on the same module and data, and
MFU = model FLOPs/token x tokens/s / a matmul peak measured in the same run. Per model also the SDPA backend
its forward dispatched to (`sdpa_backends`: the profiler's aten op names; on CUDA flash, efficient, cudnn or
math; "-" when attention is an explicit softmax), to show which encodings keep the fused kernels.

Model FLOPs per token (PaLM appendix B, training = 3 x forward): 6 N + 12 depth L C, N the parameters
without the token embedding (a lookup, not a matmul), L the sequence length, C the width; the attention
term counts the full L x L (causal masking is not discounted).

Peak memory: on CUDA `torch.cuda.max_memory_allocated` (tensors only); on CPU the growth of the peak
resident set size (`resource.getrusage` ru_maxrss, which is process-wide and never goes down) in a forked
child that builds the model and runs one training step (AdamW creates its state there), over its RSS at
fork: a whole-process figure (allocator caching, optimizer state, autograd buffers), not tensor bytes.
`--compile`: torch.compile both models, ours per block as `--model.compile=true` does
(lightning_modules/compiling.py), x-transformers' whole `TransformerWrapper` (`nn.Module.compile`), both with
torch.compile's defaults; compiling happens in the untimed warm-up steps (at least one), dynamo's caches are
reset per encoding (our encodings share the block code, and past dynamo's recompile limit it would silently
run eager), the memory probe is skipped (a forked child would compile again) and the Lightning-overhead run
stays eager. Results go to throughput_<device>[_<preset>]_compile.json / .md.
`--precision`: bf16 runs both models' forward under `torch.autocast(dtype=bfloat16)` on the device (CUDA or
CPU; Lightning's bf16-mixed in the overhead run), fp32 without autocast; default bf16 on CUDA, fp32 on the
CPU. A precision other than the device's default adds `_<precision>` to the result files' names.
Rows: every registered encoding (`--encodings all`), and `rope+sinks`, `rope+qk_norm`, `rope+continuous` (RoPE
with `--model.arch.attention_sinks`, `--model.arch.qk_norm`, continuous random positions; VARIANTS), named by
`--encodings` only. Where x-transformers has no twin the ratio is "-" and the note says why (NO_TWIN).
Not a timed test: measure only. The ratio column is the median (min-max) of per-repeat ratios, so it need
not equal the ratio of the two median tok/s columns. Noise: repeats on a loaded 2-core machine vary by 2x.
"""

import argparse
import ctypes
import gc
import json
import logging
import os
import platform
import resource
import select
import signal
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightning_modules.arch import ArchConfig  # noqa: E402
from lightning_modules.compiling import compile_blocks  # noqa: E402
from lightning_modules.encodings import ENCODINGS  # noqa: E402
from lightning_modules.transformer import Transformer  # noqa: E402

PRESETS = {"bert-base": {"dim": 768, "depth": 12, "heads": 12, "length": 512}}
PRESET_ENCODINGS = {"bert-base": ["learned", "rope", "alibi", "t5_bias", "tupe_r"]}
VOCAB = 512
MEMORY_TIMEOUT_S = 120  # a forked memory probe that takes longer is killed and reported as '-'

# Our encoding -> x-transformers keyword arguments (Decoder kwargs, TransformerWrapper kwargs, note).
XT_FLASH_INCOMPATIBLE = {"t5_bias", "dynamic_bias", "rope+sinks"}  # x-transformers asserts flash is off with these

# Rows that are an encoding with architecture or encoding options: name -> (encoding, ArchConfig keyword
# arguments); `--encodings rope+qk_norm` names them (`all` is the registry only).
VARIANTS = {
    "rope+sinks": ("rope", {"attention_sinks": True}),
    "rope+qk_norm": ("rope", {"qk_norm": True}),
    "rope+continuous": ("rope", {"encoding_options": {"continuous_positions": True}}),  # N: see arch_kwargs
}

# Why a row has no x-transformers twin (x-transformers 2.31's source read for each): the note of its "-" ratio.
NO_TWIN = {
    "grape_m": "GRAPE-M reduces to RoPE but is another method: no ratio",
    "grape_m_ctx": "x-transformers has no GRAPE",
    "grape_a": "x-transformers has no GRAPE",
    "grape_ap": "x-transformers has no GRAPE",
    "rope_clipped": "x-transformers has no clipped RoPE",
    "fope": "x-transformers has no FoPE",
    "rope_decoupled": "x-transformers' shared-key RoPE exists only inside its latent-KV (MLA) attention",
    "comrope": "x-transformers has no ComRoPE",
    "liere": "x-transformers has no LieRE",
    "cable": "x-transformers has no CABLE",
    "nope_head_scale": "x-transformers' head_scale scales head outputs (NormFormer), not logits",
    "rope+continuous": "x-transformers draws no continuous positions",
}


def xt_kwargs(encoding: str, dim_head: int) -> tuple[dict, dict, str] | None:
    """(Decoder kwargs, TransformerWrapper kwargs, note) for the x-transformers twin, None if it has none."""
    no_abs = {"use_abs_pos_emb": False}
    rotary = {"rotary_pos_emb": True, "rotary_emb_dim": dim_head}
    table = {
        "none": ({}, no_abs, ""),
        "learned": ({}, {"use_abs_pos_emb": True}, ""),
        "sinusoidal": ({}, {"scaled_sinu_pos_emb": True}, "theirs scaled sinusoid (learned scale)"),
        "scaled_sinusoidal": ({}, {"scaled_sinu_pos_emb": True}, "channels concatenated, ours interleaved"),
        "t5_bias": ({"rel_pos_bias": True}, no_abs, ""),
        "alibi": ({"alibi_pos_bias": True}, no_abs, ""),
        "rope": ({"rotary_pos_emb": True, "rotary_emb_dim": dim_head}, no_abs, "full-head rotary both"),
        "xpos": ({"rotary_xpos": True, "rotary_emb_dim": dim_head}, no_abs, "full-head rotary both"),
        "dynamic_bias": ({"dynamic_pos_bias": True}, no_abs, ""),
        "pope": ({"polar_pos_emb": True}, no_abs, ""),
        "dd_alibi_row": (
            {"attn_data_dependent_alibi": True, "attn_data_dependent_alibi_per_row": True},
            no_abs,
            "theirs gates read the layer input, ours the keys",
        ),
        # theirs: base 10000 x factor ** (d / (d - 2)) = 1e6
        "rope_global": (
            rotary | {"rotary_base_rescale_factor": 100 ** ((dim_head - 2) / dim_head)},
            no_abs,
            "base 1e6 both",
        ),
        "rope+sinks": (
            rotary | {"attn_head_learned_sink": True},
            no_abs,
            "theirs an explicit softmax (no flash with sinks), ours SDPA with the sink as a key",
        ),
        "rope+qk_norm": (
            rotary | {"attn_qk_norm": True, "attn_qk_norm_dim_scale": True},
            no_abs,
            "theirs l2-norm x learned per-dim scale (cosine-sim), ours RMSNorm x learned scale",
        ),
    }
    return table.get(encoding)


def arch_kwargs(name: str, args) -> tuple[str, dict]:
    """(encoding, ArchConfig options) of a row: a registered encoding as is, a VARIANTS row with its options
    (continuous positions drawn from [0, 2 x length))."""
    if name not in VARIANTS:
        return name, {}
    encoding, options = VARIANTS[name]
    if "encoding_options" in options:
        options = options | {"encoding_options": options["encoding_options"] | {"randomize_positions": 2 * args.length}}
    return encoding, options


def note(name: str, dim_head: int) -> str:
    """The row's note: how the twin differs, or why there is none."""
    spec = xt_kwargs(name, dim_head)
    return spec[2] if spec is not None else NO_TWIN.get(name, "")


class OurLM(nn.Module):
    """Our Transformer + a linear head: tokens (B, L) -> logits (B, L, V)."""

    def __init__(self, encoding: str, args):
        super().__init__()
        encoding, options = arch_kwargs(encoding, args)
        arch = ArchConfig(encoding, dim=args.dim, depth=args.depth, num_heads=args.heads, ffn_mult=4, dropout=0.0,
                          post_norm=False, vocab_size=VOCAB, max_length=args.length, **options)  # fmt: skip
        self.transformer = Transformer(arch, causal=True)
        self.head = nn.Linear(args.dim, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.transformer(tokens))


def build(impl: str, encoding: str, args) -> nn.Module | None:
    """Our model or the x-transformers twin (None where x-transformers has no such encoding); compiled with
    `--compile` (see the module docstring)."""
    if impl == "ours":
        model = OurLM(encoding, args)
        if args.compile:
            compile_blocks(model.transformer)
        return model
    from x_transformers import Decoder, TransformerWrapper

    dim_head = args.dim // args.heads
    spec = xt_kwargs(encoding, dim_head)
    if spec is None:
        return None
    decoder_kwargs, wrapper_kwargs, _ = spec
    flash = encoding not in XT_FLASH_INCOMPATIBLE
    decoder = Decoder(
        dim=args.dim, depth=args.depth, heads=args.heads, attn_dim_head=dim_head, ff_mult=4, attn_flash=flash,
        attn_dropout=0.0, ff_dropout=0.0, verbose=False, **decoder_kwargs,
    )  # fmt: skip
    model = TransformerWrapper(num_tokens=VOCAB, max_seq_len=args.length, attn_layers=decoder, **wrapper_kwargs)
    if args.compile:
        model.compile()
    return model


def flops_per_token(model: nn.Module, args) -> float:
    """6 N + 12 depth L C, N = parameters without the token embedding."""
    embedding = sum(
        m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding) and m.weight.shape[0] == VOCAB
    )
    n = sum(p.numel() for p in model.parameters()) - embedding
    return 6 * n + 12 * args.depth * args.length * args.dim


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def default_precision(device: str) -> str:
    return "bf16" if device == "cuda" else "fp32"


def autocast(device: str, precision: str | None):
    """bf16 autocast on `device` for precision bf16 (default: bf16 on CUDA, fp32 on the CPU), else off."""
    precision = precision or default_precision(device)
    return torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")


def train_step(model: nn.Module, optimizer, tokens: Tensor, device: str, precision: str | None = None) -> None:
    with autocast(device, precision):
        logits = model(tokens[:, :-1])  # (B, L, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


SDPA_BACKENDS = {  # aten op that SDPA dispatched to -> backend (CUDA and CPU names)
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}


def sdpa_backends(model: nn.Module, tokens: Tensor, device: str, precision: str | None = None) -> str:
    """The SDPA backend(s) one training-mode forward of `model` dispatched to, read from the profiler's op
    names ("-" when no SDPA ran, e.g. an explicit softmax)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with autocast(device, precision):
            model(tokens[:, :-1])
    used = sorted({SDPA_BACKENDS[e.name] for e in prof.events() if e.name in SDPA_BACKENDS})
    return ", ".join(used) or "-"


def make_batches(args, count: int, seed: int = 0) -> list[Tensor]:
    """`count` (B, L + 1) batches of random tokens: inputs are the first L, targets the last L."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (args.batch, args.length + 1), generator=generator) for _ in range(count)]


def timed_steps(model, optimizer, batches: list[Tensor], device: str, precision: str | None = None) -> float:
    """Seconds for one training step per batch."""
    sync(device)
    start = time.perf_counter()
    for tokens in batches:
        train_step(model, optimizer, tokens, device, precision)
    sync(device)
    return time.perf_counter() - start


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim_heap() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def peak_memory(impl: str, encoding: str, args, batches: list[Tensor]) -> float | None:
    """Peak memory in MiB of building the model and one training step (see the module docstring)."""
    if args.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model = build(impl, encoding, args).cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        timed_steps(model, optimizer, [b.cuda() for b in batches[:1]], "cuda", args.precision)
        peak = torch.cuda.max_memory_allocated() - base
        del model, optimizer
        return peak / 2**20
    trim_heap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: measure, report, exit without running any parent cleanup
        os.close(read)
        try:
            torch.set_num_threads(1)  # the parent's OpenMP pool does not survive fork: one thread in the child
            base = rss_bytes()
            model = build(impl, encoding, args)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            timed_steps(model, optimizer, batches[:1], "cpu", args.precision)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
            os.write(write, str(peak).encode())
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], MEMORY_TIMEOUT_S)
    text = os.read(read, 64).decode() if ready else ""
    os.close(read)
    if not ready:
        os.kill(pid, signal.SIGKILL)  # our own child only
    os.waitpid(pid, 0)
    return int(text) / 2**20 if text else None


def matmul_peak(device: str) -> float:
    """Measured FLOP/s of a large matmul: float32 on CPU, bf16 on CUDA (median of 5)."""
    n, dtype = (2048, torch.float32) if device == "cpu" else (8192, torch.bfloat16)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    times = []
    for _ in range(5):
        sync(device)
        start = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def bench_encoding(encoding: str, args, batches: list[Tensor]) -> dict:
    """Interleaved ours/theirs throughput (ABAB), memory and MFU inputs for one encoding."""
    if args.compile:
        torch.compiler.reset()  # a fresh recompile budget per encoding (see the module docstring)
    torch.manual_seed(0)
    impls = {"ours": build("ours", encoding, args)}
    theirs = build("x-transformers", encoding, args)
    if theirs is not None:
        impls["x-transformers"] = theirs
    device_batches = [b.to(args.device) for b in batches]
    optimizers, rates = {}, {name: [] for name in impls}
    for name, model in impls.items():
        model.to(args.device).train()
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=1e-4)
        timed_steps(model, optimizers[name], device_batches[: args.warmup], args.device, args.precision)  # warm-up
    tokens = args.batch * args.length * args.steps
    for _ in range(args.repeats):
        for name, model in impls.items():  # A B A B ...
            seconds = timed_steps(model, optimizers[name], device_batches[args.warmup :], args.device, args.precision)
            rates[name].append(tokens / seconds)
    row = {"encoding": encoding, "note": note(encoding, args.dim // args.heads)}
    for name, model in impls.items():
        row[name] = {
            "sdpa": sdpa_backends(model, device_batches[0], args.device, args.precision),
            "tokens_per_s": statistics.median(rates[name]),
            "tokens_per_s_all": rates[name],
            "params": sum(p.numel() for p in model.parameters()),
            "flops_per_token": flops_per_token(model, args),
        }
    if "x-transformers" in impls:
        ratios = [a / b for a, b in zip(rates["ours"], rates["x-transformers"])]
        row["ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    del impls, optimizers
    if args.memory:
        for name in ("ours", "x-transformers"):
            if name in row:
                row[name]["peak_mib"] = peak_memory(name, encoding, args, batches)
    return row


def lightning_overhead(encoding: str, args, batches: list[Tensor]) -> dict:
    """Lightning `fit` vs a plain loop on the same module and data, interleaved; overhead in %."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # no "GPU available" lines per repeat
    warnings.filterwarnings("ignore")

    class TinyLM(pl.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def training_step(self, tokens, batch_idx):
            logits = self.model(tokens[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Clock(pl.Callback):
        """Time from the first batch after warm-up to the end of the last one."""

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == args.warmup:
                sync(args.device)
                self.start = time.perf_counter()

        def on_train_end(self, trainer, module):
            sync(args.device)
            self.seconds = time.perf_counter() - self.start

    loader = DataLoader(batches, batch_size=None, shuffle=False)
    plain_times, lightning_times = [], []
    for _ in range(args.repeats):
        torch.manual_seed(0)
        model = OurLM(encoding, args).to(args.device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        device_batches = [b.to(args.device) for b in batches]
        timed_steps(model, optimizer, device_batches[: args.warmup], args.device, args.precision)
        plain_times.append(timed_steps(model, optimizer, device_batches[args.warmup :], args.device, args.precision))
        torch.manual_seed(0)
        clock = Clock()
        trainer = pl.Trainer(
            max_steps=len(batches), accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
            precision="bf16-mixed" if args.precision == "bf16" else "32-true", num_sanity_val_steps=0,
        )  # fmt: skip
        trainer.fit(TinyLM(OurLM(encoding, args)), train_dataloaders=loader)
        lightning_times.append(clock.seconds)
    overheads = [100 * (lit / plain - 1) for lit, plain in zip(lightning_times, plain_times)]
    return {
        "encoding": encoding, "plain_s": plain_times, "lightning_s": lightning_times,
        "overhead_pct": {"median": statistics.median(overheads), "min": min(overheads), "max": max(overheads)},
    }  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--encodings", default="all", help="all, or a comma-separated list of registry names and "
                        f"of {', '.join(VARIANTS)}")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="sizes (and encodings unless given) of a preset")
    parser.add_argument("--precision", choices=("bf16", "fp32"), help="bf16: torch.autocast bf16 for both models; "
                        "default bf16 on cuda, fp32 on cpu")  # fmt: skip
    parser.add_argument("--steps", type=int, default=2, help="timed training steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per model")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before timing")
    parser.add_argument("--overhead-encoding", default="rope", help="encoding of the Lightning-overhead run")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory runs")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (see the docstring)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    if args.preset:
        for key, value in PRESETS[args.preset].items():
            setattr(args, key, value)
        if args.encodings == "all":
            args.encodings = ",".join(PRESET_ENCODINGS[args.preset])
    names = list(ENCODINGS) if args.encodings == "all" else args.encodings.split(",")
    unknown = [n for n in names if n not in ENCODINGS and n not in VARIANTS]
    if unknown:
        parser.error(f"unknown encoding {unknown[0]!r}; choose from: {', '.join([*ENCODINGS, *VARIANTS])}")
    args.encodings = names
    args.precision = args.precision or default_precision(args.device)
    if args.compile:
        args.memory, args.warmup = False, max(args.warmup, 1)
    return args


def fmt_ratio(r: dict | None) -> str:
    return "-" if r is None else f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def table_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table (shared by the console and the markdown file)."""
    peak = result["matmul_peak_flops"]
    header = ["encoding", "ours tok/s", "x-t tok/s", "ours/x-t (min-max)", "ours MFU", "x-t MFU",
              "ours MiB", "x-t MiB", "ours SDPA", "x-t SDPA", "note"]  # fmt: skip
    rows = []
    for row in result["encodings"]:
        cells = [row["encoding"]]
        for key in ("ours", "x-transformers"):
            cells.append(f"{row[key]['tokens_per_s']:,.0f}" if key in row else "-")
        cells.append(fmt_ratio(row.get("ratio")))
        for key in ("ours", "x-transformers"):
            m = row.get(key)
            cells.append(f"{100 * m['tokens_per_s'] * m['flops_per_token'] / peak:.1f}%" if m else "-")
        for key in ("ours", "x-transformers"):
            mib = row.get(key, {}).get("peak_mib")
            cells.append(f"{mib:,.0f}" if mib is not None else "-")
        for key in ("ours", "x-transformers"):
            cells.append(row[key]["sdpa"] if key in row else "-")
        cells.append(row["note"])
        rows.append(cells)
    return header, rows


def report(result: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    header, rows = table_rows(result)
    title = (f"{result['device']} | dim {result['config']['dim']} depth {result['config']['depth']} heads "
             f"{result['config']['heads']} L {result['config']['length']} B {result['config']['batch']} | "
             f"{result['config']['precision']} | matmul peak {result['matmul_peak_flops'] / 1e9:,.0f} GFLOP/s "
             f"({result['peak_dtype']})"
             + (" | torch.compile" if result["config"].get("compile") else ""))  # fmt: skip
    table = Table(*header, title=title)
    for cells in rows:
        table.add_row(*cells)
    console = Console(width=160)
    console.print(table)
    overhead = result.get("lightning_overhead")
    line = ""
    if overhead:
        o = overhead["overhead_pct"]
        line = (f"Lightning fit vs plain loop ({overhead['encoding']}): overhead {o['median']:+.1f}% "
                f"(min {o['min']:+.1f}%, max {o['max']:+.1f}%)")  # fmt: skip
        console.print(line)
    console.print(f"memory: {result['memory_method']}")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"throughput_{result['device']}" + (f"_{result['config']['preset']}" if result["config"]["preset"] else "")
    stem += "_compile" if result["config"].get("compile") else ""
    precision = result["config"]["precision"]
    stem += f"_{precision}" if precision != default_precision(result["device"]) else ""
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    md = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(cells) + " |" for cells in rows]
    md += ["", line, "", f"FLOPs/token: {result['flops_formula']}", "", f"Memory: {result['memory_method']}", ""]
    (out / f"{stem}.md").write_text("\n".join(md))
    console.print(f"wrote {out / stem}.json and .md")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("throughput: --device cuda but CUDA is not available; skipped")
        return
    torch.set_num_threads(args.threads)
    batches = make_batches(args, args.warmup + args.steps)
    started = time.perf_counter()
    peak = matmul_peak(args.device)
    rows = []
    for encoding in args.encodings:
        rows.append(bench_encoding(encoding, args, batches))
        r = rows[-1]
        print(f"{encoding:>20}: ours {r['ours']['tokens_per_s']:,.0f} tok/s, ratio {fmt_ratio(r.get('ratio'))}",
              flush=True)  # fmt: skip
    peak = (peak + matmul_peak(args.device)) / 2  # before and after, for drift
    overhead = lightning_overhead(args.overhead_encoding, args, batches) if args.overhead_encoding else None
    result = {
        "device": args.device,
        "device_name": platform.processor() or "cpu" if args.device == "cpu" else torch.cuda.get_device_name(),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
        "matmul_peak_flops": peak, "peak_dtype": "float32" if args.device == "cpu" else "bf16",
        "flops_formula": "6 * params (without token embedding) + 12 * depth * length * dim, per token",
        "memory_method": "not measured (--no-memory)" if not args.memory else
        "torch.cuda.max_memory_allocated (tensors)" if args.device == "cuda" else
        "ru_maxrss growth over RSS at fork in a forked child (build + 1 step; whole process)",
        "encodings": rows, "lightning_overhead": overhead, "seconds": time.perf_counter() - started,
    }  # fmt: skip
    report(result, Path(args.out))


if __name__ == "__main__":
    main()
