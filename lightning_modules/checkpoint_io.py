"""Reading a checkpoint the user names (`--model.init_from`): tensors and plain data only, never code.

`torch.load(weights_only=True)` refuses pickles that would call anything but PyTorch's own rebuild
functions, so a crafted file cannot run code; a truncated, garbage or crafted file is a one-line error.
"""

from dataclasses import fields
from pathlib import Path

import torch

from lightning_modules.arch import ArchConfig
from pe_sweeps.errors import ConfigError


def load_checkpoint(path: str, option: str = "init_from") -> dict:
    """A Lightning checkpoint dict from `path` (memory-mapped: only what is used is read)."""
    if not Path(path).is_file():
        raise ConfigError(f"{option}: no checkpoint file {path!r}; pass a last.ckpt written by cli.py fit")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - truncated zip, garbage, or a pickle that is not plain data
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise ConfigError(
            f"{option}: {path!r} is not a readable checkpoint ({reason}); pass a last.ckpt written by cli.py fit"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"{option}: {path!r} holds no state_dict; pass a last.ckpt written by cli.py fit")
    return checkpoint


def check_given_arch(path: str, checkpoint: dict, arch, given: set[str]) -> None:
    """`--ckpt_path`: LightningCLI replaces the model's arguments by the checkpoint's, so an `--model.arch.*`
    option given on the command line (`given`: field names) that differs from the checkpoint's would be
    dropped without a word; refused in one line, compared field by field as `init_from` is."""
    hparams = checkpoint.get("hyper_parameters") or {}
    if not given or not hparams:
        return
    saved, wanted = ArchConfig.from_hparams(hparams), ArchConfig.of(arch)
    key = wanted.first_difference(saved, ignore=tuple(f.name for f in fields(ArchConfig) if f.name not in given))
    if key is not None:
        raise ConfigError(
            f"--ckpt_path {path}: the checkpoint has arch.{key}={getattr(saved, key)!r} but "
            f"--model.arch.{key}={getattr(wanted, key)!r} was given; a checkpoint keeps its architecture: drop "
            f"--model.arch.{key}, or train a new run without --ckpt_path"
        )
