"""The training loader every data module hands out (datamodules/loaders.py) is resumable: restored from the state
it had mid-epoch, it gives the rest of that epoch and the next epochs as a loader never stopped does.

Claims of docs/training.md covered here:
- "a fit resumed from a checkpoint continues its data where it stopped (torchdata's StatefulDataLoader), whatever
  the number of loader workers": test_a_restored_training_loader_continues_where_it_stopped
"""

import pytest
import torch
from torch.utils.data import TensorDataset

from datamodules.loaders import EpochShuffle, seeded_loader


def epochs(loader, start_epoch: int, count: int) -> list[list[int]]:
    """The batches (as lists of example ids) of `count` epochs from `start_epoch`, as Lightning runs them."""
    batches = []
    for epoch in range(start_epoch, start_epoch + count):
        loader.sampler.set_epoch(epoch)  # Lightning calls it at every epoch's start
        batches += [batch[0].tolist() for batch in loader]
    return batches


def make_loader(num_workers: int):
    data = TensorDataset(torch.arange(40))
    return seeded_loader(data, batch_size=4, shuffle=True, seed=3, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_restored_training_loader_continues_where_it_stopped(num_workers):
    """Stopped after 3 of 10 batches (its state_dict is what Lightning puts in a checkpoint): a fresh loader given
    that state yields batches 4-10, then the next epoch, as the uninterrupted loader does (a plain DataLoader
    started the epoch again from its first batch)."""
    straight = epochs(make_loader(num_workers), 0, 2)
    stopped = make_loader(num_workers)
    stopped.sampler.set_epoch(0)
    iterator = iter(stopped)
    seen = [next(iterator)[0].tolist() for _ in range(3)]
    state = stopped.state_dict()
    del iterator
    resumed = make_loader(num_workers)
    resumed.load_state_dict(state)
    assert seen + epochs(resumed, 0, 2) == straight
    assert sorted(i for batch in straight[:10] for i in batch) == list(range(40))  # each example once an epoch
    assert straight[:10] != straight[10:]  # a new order each epoch


def test_the_order_depends_on_seed_and_epoch_only():
    """The same (seed, epoch), the same order, however many epochs came before; another seed, another order."""
    data = TensorDataset(torch.arange(40))
    late = EpochShuffle(data, seed=3)
    for epoch in range(5):
        late.set_epoch(epoch)
        list(late)
    late.set_epoch(2)
    early = EpochShuffle(data, seed=3)
    early.set_epoch(2)
    assert list(late) == list(early)
    other = EpochShuffle(data, seed=4)
    other.set_epoch(2)
    assert list(other) != list(early)
