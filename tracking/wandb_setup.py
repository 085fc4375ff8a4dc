"""W&B defaults: offline unless a key is configured, and one naming scheme for every run."""

import netrc
import os
from pathlib import Path


def has_api_key() -> bool:
    """True when W&B could log online: WANDB_API_KEY set or an api.wandb.ai entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def default_wandb_mode() -> str:
    """Respect WANDB_MODE; otherwise "online" with a key and "offline" without (set for children too)."""
    if not os.environ.get("WANDB_MODE"):
        os.environ["WANDB_MODE"] = "online" if has_api_key() else "offline"
    return os.environ["WANDB_MODE"]


def run_name(task: str, encoding: str, seed: int) -> str:
    return f"{task}-{encoding}-s{seed}"


def run_group(task: str, encoding: str) -> str:
    return f"{task}/{encoding}"


def make_wandb_logger(run_dir: Path, name: str, group: str, project: str, entity: str | None, tags: list[str]):
    """A Lightning WandbLogger writing under run_dir; never needs network when offline."""
    from pytorch_lightning.loggers import WandbLogger

    default_wandb_mode()
    os.environ.setdefault("WANDB_SILENT", "true")
    return WandbLogger(
        name=name, group=group, project=project, entity=entity, save_dir=str(run_dir), tags=tags,
        job_type="train",
    )  # fmt: skip
