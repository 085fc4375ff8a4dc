"""BatchLog: a Lightning callback that appends one line per training step to a file: the step and a hash of
its batch, so a test can tell whether a resumed fit saw the batches an uninterrupted one did. Passed to
`cli.py fit` as `--trainer.callbacks=[{class_path: batch_log.BatchLog, init_args: {path: ...}}]` (tests/ is
on the import path)."""

import hashlib
import json

import torch
from pytorch_lightning.callbacks import Callback


def batch_hash(batch) -> str:
    """A short hash of every tensor in `batch` (a dict, list or tuple of tensors), in order."""
    tensors = batch.values() if isinstance(batch, dict) else batch
    digest = hashlib.sha256()
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class BatchLog(Callback):
    """Append `{"step": global step the batch trains, "hash": batch_hash(batch)}` to `path` per batch."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        with open(self.path, "a") as log:
            log.write(json.dumps({"step": trainer.global_step + 1, "hash": batch_hash(batch)}) + "\n")


def read_batch_log(path) -> list[tuple[int, str]]:
    """The (step, hash) pairs a BatchLog wrote, in order."""
    with open(path) as log:
        return [(row["step"], row["hash"]) for row in map(json.loads, log)]
