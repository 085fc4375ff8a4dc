"""Reading a checkpoint, wherever the project opens one: tensors and plain data only, never code.

`torch.load(weights_only=True)` refuses pickles that would call anything but PyTorch's own rebuild
functions, so a crafted file cannot run code; a truncated, garbage or crafted file is a one-line error.
`read_checkpoint` is the one loader: `--model.init_from`, `--ckpt_path` (fit / validate / test / predict),
Lightning's SLURM requeue checkpoint, a sweep retry's resume and `probe --ckpt` all go through it, and
`SafeCheckpointIO` puts it under Lightning's own restore (`trainer.strategy.load_checkpoint`), which would
otherwise follow torch's default (`weights_only=False` before torch 2.6, or with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD).
"""

from dataclasses import fields
from pathlib import Path

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from lightning_modules.arch import ArchConfig
from pe_core.errors import ConfigError

HINT = "pass a last.ckpt written by cli.py fit"


def read_checkpoint(path, option: str = "init_from", hint: str = HINT, map_location="cpu", mmap: bool = True):
    """What the checkpoint file `path` holds, loaded with `weights_only=True` (memory-mapped unless `mmap` is
    false: only what is used is read); a missing, truncated, garbage or crafted file is a one-line ConfigError
    naming `option` and saying what to do (`hint`)."""
    if not Path(path).is_file():
        raise ConfigError(f"{option}: no checkpoint file {str(path)!r}; {hint}")
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as error:  # noqa: BLE001 - truncated zip, garbage, or a pickle that is not plain data
        raise ConfigError(f"{option}: {str(path)!r} is not a readable checkpoint ({reason(error)}); {hint}") from None


def reason(error: Exception) -> str:
    """One line on why torch.load failed: for a pickle that is not plain data, the object it names (torch's
    first line would advise `weights_only=False`, the very thing a crafted file wants)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    refused = [line for line in lines if "GLOBAL" in line or "nsupported" in line]
    return (f"not plain data: {refused[0]}" if refused else lines[0])[:200]


def load_checkpoint(path: str, option: str = "init_from") -> dict:
    """A Lightning checkpoint dict from `path` (`read_checkpoint`), which must hold a state_dict."""
    checkpoint = read_checkpoint(path, option)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"{option}: {path!r} holds no state_dict; {HINT}")
    return checkpoint


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO with every load through `read_checkpoint` (`weights_only=True` whatever the
    caller or torch's default says); saving is unchanged. Not memory-mapped: a resumed run rewrites the very
    file it resumed from (last.ckpt), and a mapped tensor would read the new file's bytes."""

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path, "checkpoint", map_location=map_location or "cpu", mmap=False)


def use_safe_checkpoint_io(trainer) -> None:
    """Make a trainer's restores (`--ckpt_path`, the SLURM requeue checkpoint) read through `SafeCheckpointIO`;
    a checkpoint IO of the user's own (a `--trainer.plugins` of another class) is left as it is."""
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = SafeCheckpointIO()


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
