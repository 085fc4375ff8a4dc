"""Per-example outcomes of an evaluation (lightning_modules/outcomes.py, TaskModule.record_outcomes), issue 44.1:
every evaluation keeps, per example, its id (the index in the evaluation dataset), a digest of its content and
what the model got (exact match, token accuracy, NLL, the task length), so compare can resample the examples.

Claims covered here:
- "the outcomes agree with the logged metrics: the mean of `correct` per length is val/acc_len_<n>":
  test_synthetic_outcomes_agree_with_the_logged_metrics
- "ids and digests are the same for every model seed and batch size on one evaluation set, and differ with
  data.seed": test_ids_and_digests_are_stable_across_seeds_and_batch_sizes
- "a classifier keeps correct, label and NLL per example": test_classifier_keeps_correct_and_nll_per_example
- "an evaluation loader not in dataset order keeps no outcomes, with one warning":
  test_a_shuffled_evaluation_loader_keeps_none
"""

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from datamodules.synthetic import SyntheticDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.classifier import SequenceClassifier
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.synthetic_model import SyntheticTaskModel


def data(seed: int = 0, batch_size: int = 5) -> SyntheticDataModule:
    return SyntheticDataModule(task="copy", min_len=1, train_max_len=3, eval_max_len=5, num_symbols=4, train_size=64,
                               eval_per_length=5, eval_per_train_length=7, batch_size=batch_size,
                               seed=seed)  # fmt: skip


def model(seed: int = 0) -> SyntheticTaskModel:
    pl.seed_everything(seed)
    dm = data()
    arch = ArchConfig(encoding="rope", dim=16, depth=1, num_heads=2, ffn_mult=2, vocab_size=dm.vocab_size,
                      max_length=dm.max_seq_len)  # fmt: skip
    return SyntheticTaskModel(arch=arch, lr=3e-3)


def trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, **kwargs)  # fmt: skip


def validate(module, datamodule) -> tuple[dict, dict]:
    (logged,) = trainer().validate(module, datamodule=datamodule, verbose=False)
    return logged, module.evaluation_outcomes["val"]


def test_synthetic_outcomes_agree_with_the_logged_metrics():
    pl.seed_everything(0)
    module = model()
    trainer(max_steps=20, limit_val_batches=0).fit(module, datamodule=data())
    logged, table = validate(module, data())
    assert set(table) == {"id", "hash", "correct", "tok_acc", "nll", "length"}
    assert table["id"].tolist() == list(range(31)) and table["correct"].dtype == bool
    assert table["length"].tolist() == [1] * 7 + [2] * 7 + [3] * 7 + [4] * 5 + [5] * 5  # the set's order
    for n in range(1, 6):
        at = table["length"] == n
        assert table["correct"][at].mean() == pytest.approx(logged[f"val/acc_len_{n}"])
        assert table["tok_acc"][at].mean() == pytest.approx(logged[f"val/tok_acc_len_{n}"], abs=1e-6)
    inside = table["length"] <= 3
    # val/loss is the mean over answer tokens (n per example of length n), the NLL column the mean per example
    weights = table["length"][inside]
    assert np.average(table["nll"][inside], weights=weights) == pytest.approx(logged["val/loss"], rel=1e-4)


def test_ids_and_digests_are_stable_across_seeds_and_batch_sizes():
    _, first = validate(model(0), data(seed=0, batch_size=5))
    _, second = validate(model(1), data(seed=0, batch_size=8))
    _, other = validate(model(0), data(seed=1, batch_size=5))
    assert first["id"].tolist() == second["id"].tolist() == other["id"].tolist()
    assert first["hash"].tolist() == second["hash"].tolist()  # same examples whatever the padding
    assert len(set(first["hash"].tolist())) > 20  # it tells examples apart ...
    assert (first["hash"] != other["hash"]).mean() > 0.5  # ... and evaluation sets drawn with another data.seed


def test_classifier_keeps_correct_and_nll_per_example():
    torch.manual_seed(0)
    tokens = torch.randint(3, 50, (13, 6))
    mask = torch.ones(13, 6, dtype=torch.bool)
    mask[::3, 4:] = False
    labels = torch.randint(0, 3, (13,))
    batches = [{"tokens": tokens[i : i + 4], "padding_mask": mask[i : i + 4], "labels": labels[i : i + 4]}
               for i in range(0, 13, 4)]  # fmt: skip
    arch = ArchConfig(encoding="learned", dim=16, depth=1, num_heads=2, ffn_mult=2, vocab_size=50, max_length=8)
    module = SequenceClassifier(arch=arch, task="cls-x", num_labels=3)
    (logged,) = trainer().validate(module, dataloaders=DataLoader(batches, batch_size=None), verbose=False)
    table = module.evaluation_outcomes["val"]
    assert set(table) == {"id", "hash", "label", "nll", "correct"}
    assert table["id"].tolist() == list(range(13)) and table["label"].tolist() == labels.tolist()
    module.eval()
    with torch.no_grad():
        out = module(tokens, mask)
    assert table["correct"].tolist() == (out.argmax(-1) == labels).tolist()
    assert table["nll"] == pytest.approx(F.cross_entropy(out, labels, reduction="none").numpy(), abs=1e-5)
    assert table["correct"].mean() == pytest.approx(logged["val/acc"])


class Shuffled(pl.LightningDataModule):
    """The synthetic validation set behind a shuffling loader (what no data module of ours hands out)."""

    train_max_len = 3

    def val_dataloader(self) -> DataLoader:
        dm = data()
        dm.setup("validate")
        return DataLoader(dm.val_set, batch_size=5, shuffle=True, collate_fn=dm.collate_fn)


def test_a_shuffled_evaluation_loader_keeps_none():
    module = model()
    with pytest.warns(UserWarning, match="per-example outcomes of val are not kept: its loader's sampler Random"):
        trainer().validate(module, datamodule=Shuffled(), verbose=False)
    assert module.evaluation_outcomes["val"] == {}


def test_content_hash_ignores_padding_and_outcome_columns_are_checked():
    a = torch.tensor([[5, 6, 7, 0, 0]])
    b = torch.tensor([[5, 6, 7, 0]])
    assert content_hash((a, a != 0)) == content_hash((b, b != 0))
    assert content_hash((a, a != 0)) != content_hash((a.flip(1), a.flip(1) != 0))
    with pytest.raises(ValueError, match="lack 'id'"):
        ExampleOutcomes(("correct",))
    metric = ExampleOutcomes(("id", "correct"))
    with pytest.raises(ValueError, match="are not the declared"):
        metric.update(id=torch.arange(2))
