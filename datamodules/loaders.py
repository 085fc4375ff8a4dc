"""The DataLoader every data module hands out (through `TaskDataModule`'s loaders, datamodules/base.py)."""

import torch
import torch.distributed as dist
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset

CUDA_WORKERS = 2  # default loader processes per training process on CUDA


def loader_workers(num_workers: int | None) -> int:
    """`data.num_workers` as given; by default (None) 2 on CUDA, where collating the next batches in worker
    processes overlaps the GPU's step, and 0 on the CPU, where workers would take cores from the step itself."""
    if num_workers is not None:
        return num_workers
    return CUDA_WORKERS if torch.cuda.is_available() else 0


def seeded_loader(dataset: Dataset | None, *, batch_size: int, shuffle: bool, seed: int, num_workers: int | None,
                  collate_fn=None) -> DataLoader:  # fmt: skip
    """Batches of `dataset`, shuffled (when asked) in an order fixed by `seed`, so runs with the same seed
    see the same batches (whatever the number of workers); memory is pinned for fast host-to-GPU copies when
    CUDA is available; workers (`loader_workers`) are kept between epochs and validations.

    An evaluation loader (shuffle=False) in a multi-process run gives each process every world_size-th
    example, none twice (`UnrepeatedDistributedSampler`): the DistributedSampler Lightning would add pads
    the last batches with repeated examples, which then count twice in every metric."""
    if dataset is None:
        raise RuntimeError("call setup() before asking for a dataloader")
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    sampler = None
    if not shuffle and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        sampler = UnrepeatedDistributedSampler(dataset, shuffle=False)  # Lightning keeps a DistributedSampler
    workers = loader_workers(num_workers)
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler, generator=generator,
        collate_fn=collate_fn, num_workers=workers, pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )  # fmt: skip
