"""Per-example outcomes of an evaluation: which examples a model got right, not only how many.

An evaluation's aggregate (val/acc) hides its own sampling: two encodings of equal population accuracy that get
different examples right differ on any one evaluation cut, identically for every seed when the cut is shared. The
per-example outcomes let compare resample the examples as well as the seeds (pe_sweeps/compare/resampling.py).

`ExampleOutcomes` collects them during an evaluation (DDP-safe: gathered from every process at `compute`);
`TaskModule.record_outcomes` (task_module.py) gives each example its id, its index in the evaluation dataset,
which is the same for every seed of one evaluation set (the evaluation loaders never shuffle). Columns:

- `id` (int64): the index of the example in the evaluation dataset (with several loaders, as a causal LM's one per
  context: in their datasets concatenated in loader order);
- `hash` (int64): a digest of the example's content (its tokens and targets without padding), so a reader can tell
  whether two runs evaluated the same examples (the synthetic tasks draw theirs from `data.seed`);
- per task: `correct` (bool: classification, synthetic exact match, translation has none), `tok_acc` (float),
  `nll` (float: mean token negative log-likelihood), `tokens` (int: scored tokens), `length` (int: a synthetic
  task's length n, to stratify by), `score` (float: a regression's prediction), `context` and `stride` (int: a
  causal LM window's length and sliding stride, 0 for the non-overlapping windows). Token-level losses are
  token-weighted means of `nll` (weights `tokens`): causal_lm.py, masked_lm.py, translation.py say which.
"""

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

HASH_SEED = 0x5DEECE66D  # any fixed value: the position weights of `content_hash`
PRIME = 2**31 - 1


def content_hash(*parts: tuple[Tensor, Tensor]) -> Tensor:
    """(B,) int64 digest of each example's content from one or two (values (B, L), keep (B, L) bool) parts: the
    kept values weighted by fixed pseudo-random weights per position, summed modulo 2^31 - 1 per part (exact
    integer arithmetic, so the same on every device and at every batch size: padding is not kept)."""
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"content_hash takes one or two parts, got {len(parts)}")
    total = torch.zeros(parts[0][0].shape[0], dtype=torch.int64, device=parts[0][0].device)
    for k, (values, keep) in enumerate(parts):
        generator = torch.Generator().manual_seed(HASH_SEED + k)
        weights = torch.randint(1, 2**20, (values.shape[1],), generator=generator, dtype=torch.int64)
        digest = ((values.long() % 2**20 + 2) * weights.to(values.device) * keep.long()).sum(1) % PRIME
        total = total * PRIME + digest  # < 2^62 after two parts
    return total


class ExampleOutcomes(Metric):
    """Per-example columns of one evaluation, concatenated over batches and gathered across processes.

    `columns`: their names, `id` among them. update(**columns (B,) each); compute() -> {column: numpy array}
    sorted by id, one row per example ({} when nothing was evaluated)."""

    full_state_update = False

    def __init__(self, columns: tuple[str, ...]):
        super().__init__()
        if "id" not in columns:
            raise ValueError(f"outcome columns {columns} lack 'id'")
        self.columns = tuple(sorted(columns))
        for name in self.columns:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, **columns: Tensor) -> None:
        if tuple(sorted(columns)) != self.columns:
            raise ValueError(f"outcome columns {sorted(columns)} are not the declared {list(self.columns)}")
        for name, values in columns.items():
            getattr(self, name).append(values.detach().flatten())

    def compute(self) -> dict[str, np.ndarray]:
        if isinstance(self.id, list) and not self.id:  # nothing evaluated (after a DDP sync: one gathered tensor)
            return {}
        table = {name: dim_zero_cat(getattr(self, name)).cpu() for name in self.columns}
        order = torch.argsort(table["id"])
        return {name: _compact(values[order]) for name, values in table.items()}


def _compact(values: Tensor) -> np.ndarray:
    """A column as numpy, floats as float32 (outcomes are read in bulk: half the bytes of float64)."""
    array = values.numpy()
    return array.astype(np.float32) if array.dtype.kind == "f" else array
