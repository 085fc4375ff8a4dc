"""Opt-in `torch.compile` of a Transformer (`--model.compile=true` on the task modules).

Regional compilation: each block is compiled in place with `nn.Module.compile` (one graph, reused by every
block of the same shape), while the once-per-forward prologue stays eager: default positions, the `embed`
hook, the shared `bias` and the masks; inside the blocks position-only tensors are rows of the encoding's
position tables (buffers, grown before the blocks run, so no hook needs a compile-specific path). Parameters and
state_dict keys are unchanged, so checkpoints load into a compiled or an eager model alike, and the
compiled wrapper is dropped on copy / pickle (`nn.Module.__getstate__`). The first forward at a new length,
dtype or mode (train / eval) compiles (tens of seconds on CPU); with `dynamic=None` (default) the second
length recompiles once with symbolic shapes, after which lengths do not recompile.

Whole-step compilation (`compile_step`, issue 47): a training step's forward + loss as one graph, with CUDA
graphs for fixed-shape batches on CUDA. Measured by benchmarks/trials_per_hour.py (and on a GPU by
scripts/gpu_check.py's compile_step section); not a default: on the CPU, a tiny model's compile time (tens of
seconds a fresh process) outweighs what it saves over a short trial's steps.
"""

from torch import nn

from pe_core.errors import ConfigError

# encoding -> why torch.compile cannot serve it. Empty: every registered encoding compiles on CPU (inductor)
# and matches eager (tests/models/test_compile.py).
NOT_COMPILABLE: dict[str, str] = {}


def check_compilable(encoding: str) -> None:
    """One-line ConfigError when torch.compile cannot serve `encoding`."""
    if encoding in NOT_COMPILABLE:
        names = ", ".join(sorted(NOT_COMPILABLE))
        raise ConfigError(f"compile=true cannot serve encoding {encoding!r} ({NOT_COMPILABLE[encoding]}); "
                          f"set compile=false for: {names}")  # fmt: skip


def compile_blocks(transformer: nn.Module, **options) -> nn.Module:
    """Compile every block of a `Transformer` (anything with `.encoding` and `.blocks`) in place and return
    it; `options` go to `torch.compile` (e.g. `dynamic=True`, `backend="aot_eager"`)."""
    check_compilable(transformer.encoding.name)
    for block in transformer.blocks:
        block.compile(**options)
    return transformer


def compile_step(fn, device_type: str, fixed_shapes: bool = False, **options):
    """A whole training step's forward + loss `fn(batch) -> loss` under `torch.compile`: one graph from the
    embedding to the loss, whose backward AOTAutograd compiles with it (the optimizer step stays eager).
    `fixed_shapes` (every batch the same shape): `dynamic=False`, and on CUDA `mode="reduce-overhead"`
    (CUDA graphs: the step's kernels replayed without a launch each), whose output buffers are reused by the
    next replay, so the loss returned is a copy. CUDA graphs are CUDA-only: asking for them elsewhere is a
    ConfigError. `options` go to `torch.compile` (e.g. `backend="aot_eager"`, `mode=...`)."""
    import torch

    mode = options.pop("mode", "reduce-overhead" if fixed_shapes and device_type == "cuda" else None)
    if mode == "reduce-overhead" and device_type != "cuda":
        raise ConfigError(f"mode='reduce-overhead' (CUDA graphs) needs a CUDA device, not {device_type!r}; "
                          "choose from: default, max-autotune-no-cudagraphs")  # fmt: skip
    if fixed_shapes:
        options.setdefault("dynamic", False)
    compiled = torch.compile(fn, mode=mode, **options)
    if mode != "reduce-overhead":
        return compiled

    def replayed(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are no longer read
        return compiled(*args, **kwargs).clone()

    return replayed
