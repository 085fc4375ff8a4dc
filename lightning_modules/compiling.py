"""Opt-in `torch.compile` of a Transformer (`--model.compile=true` on the task modules).

Regional compilation: each block is compiled in place with `nn.Module.compile` (one graph, reused by every
block of the same shape), while the once-per-forward prologue stays eager: default positions, the `embed`
hook, the shared `bias` and the masks; inside the blocks position-only tensors are rows of the encoding's
position tables (buffers, grown before the blocks run, so no hook needs a compile-specific path). Parameters and
state_dict keys are unchanged, so checkpoints load into a compiled or an eager model alike, and the
compiled wrapper is dropped on copy / pickle (`nn.Module.__getstate__`). The first forward at a new length,
dtype or mode (train / eval) compiles (tens of seconds on CPU); with `dynamic=None` (default) the second
length recompiles once with symbolic shapes, after which lengths do not recompile.
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
