"""The DataLoader every data module hands out."""

import torch
from torch.utils.data import DataLoader, Dataset


def seeded_loader(dataset: Dataset | None, *, batch_size: int, shuffle: bool, seed: int, num_workers: int,
                  collate_fn=None) -> DataLoader:  # fmt: skip
    """Batches of `dataset`, shuffled (when asked) in an order fixed by `seed`, so runs with the same seed
    see the same batches; memory is pinned for fast host-to-GPU copies when CUDA is available."""
    if dataset is None:
        raise RuntimeError("call setup() before asking for a dataloader")
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=collate_fn,
        num_workers=num_workers, pin_memory=torch.cuda.is_available(),
    )  # fmt: skip
