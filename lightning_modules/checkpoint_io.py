"""Reading a checkpoint the user names (`--model.init_from`): tensors and plain data only, never code.

`torch.load(weights_only=True)` refuses pickles that would call anything but PyTorch's own rebuild
functions, so a crafted file cannot run code; a truncated, garbage or crafted file is a one-line error.
"""

from pathlib import Path

import torch

from errors import ConfigError


def load_checkpoint(path: str, option: str = "init_from") -> dict:
    """A Lightning checkpoint dict from `path` (memory-mapped: only what is used is read)."""
    if not Path(path).is_file():
        raise ConfigError(f"{option}: no checkpoint file {path!r}")
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
