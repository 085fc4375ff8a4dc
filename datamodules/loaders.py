"""The DataLoader every data module hands out (through `TaskDataModule`'s loaders, datamodules/base.py)."""

import warnings
from collections.abc import Iterator

import torch
import torch.distributed as dist
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

# torchdata 0.11's StatefulDataLoader calls torch.set_vital, deprecated since torch 2.13: a warning per loader
# made (Lightning makes it again for DDP) that says nothing about the run
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)

CUDA_WORKERS = 2  # default loader processes per training process on CUDA


def loader_workers(num_workers: int | None) -> int:
    """`data.num_workers` as given; by default (None) 2 on CUDA, where collating the next batches in worker
    processes overlaps the GPU's step, and 0 on the CPU, where workers would take cores from the step itself."""
    if num_workers is not None:
        return num_workers
    return CUDA_WORKERS if torch.cuda.is_available() else 0


class EpochShuffle(RandomSampler):
    """Every index once an epoch, in an order drawn from `seed + epoch` alone (as DistributedSampler's), never
    from a generator carried over from earlier epochs: a fit resumed mid-epoch (its StatefulDataLoader skips
    the indices it had yielded) sees the batches an uninterrupted one does, in this epoch and the next ones.
    Lightning calls `set_epoch` at each epoch; being a RandomSampler, it is replaced by Lightning's
    DistributedSampler in a multi-process fit, as a plain shuffling loader's was."""

    def __init__(self, data_source: Dataset, seed: int):
        super().__init__(data_source)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


def seeded_loader(dataset: Dataset | None, *, batch_size: int, shuffle: bool, seed: int, num_workers: int | None,
                  collate_fn=None) -> DataLoader:  # fmt: skip
    """Batches of `dataset`, shuffled (when asked) in an order fixed by `seed` and the epoch (`EpochShuffle`), so
    runs with the same seed see the same batches (whatever the number of workers). A shuffled (training) loader
    is a torchdata `StatefulDataLoader`: Lightning saves how far it got in every checkpoint, and a fit resumed
    from one continues with the next batch, not the epoch's first. Memory is pinned for fast host-to-GPU copies
    when CUDA is available; workers (`loader_workers`) are kept between epochs and validations.

    An evaluation loader (shuffle=False) in a multi-process run gives each process every world_size-th
    example, none twice (`UnrepeatedDistributedSampler`): the DistributedSampler Lightning would add pads
    the last batches with repeated examples, which then count twice in every metric."""
    if dataset is None:
        raise RuntimeError("call setup() before asking for a dataloader")
    workers = loader_workers(num_workers)
    common = {"batch_size": batch_size, "collate_fn": collate_fn, "num_workers": workers,
              "pin_memory": torch.cuda.is_available(), "persistent_workers": workers > 0}  # fmt: skip
    if shuffle:  # the generator seeds the worker processes (their base seed), as before
        generator = torch.Generator().manual_seed(seed)
        return StatefulDataLoader(dataset, sampler=EpochShuffle(dataset, seed), generator=generator, **common)
    sampler = None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        sampler = UnrepeatedDistributedSampler(dataset, shuffle=False)  # Lightning keeps a DistributedSampler
    return DataLoader(dataset, sampler=sampler, **common)  # evaluation loaders start afresh each time anyway
