"""Per-example outcomes gathered from 2 DDP processes (gloo on CPU, Lightning's ddp_fork) are the 1-process ones:
every example id exactly once, the same digests and values, for the causal LM (several loaders: one per context,
non-overlapping and sliding), the masked LM and translation (issue 44.1). Every evaluation set has an odd size, so a
sampler that evened out the processes by repeating an example (DistributedSampler) would show here as an id twice.

Run by tests/models/test_ddp_outcomes.py in a fresh interpreter (forked ranks deadlock after some earlier tests).
"""

import copy

import numpy as np
import pytest
import pytorch_lightning as pl
from helpers import randomize_

from datamodules import text
from datamodules.masked_lm import MaskedLMDataModule
from datamodules.text import TextDataModule
from datamodules.translation import TranslationDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.causal_lm import CausalLMModel
from lightning_modules.masked_lm import MaskedLMModel
from lightning_modules.translation import TranslationModel

pytestmark = pytest.mark.slow
TINY = {"dim": 16, "depth": 1, "num_heads": 2, "ffn_mult": 2, "dropout": 0.0}


def lm():
    # 90 tokens: windows of 8 and 16 (11 + 5) and sliding ones of stride 4 (21 + 17): 54 rows in 4 loaders
    data = TextDataModule(task="tinyshakespeare", block_size=8, eval_factors=[1, 2], max_eval_tokens=90, eval_stride=4,
                          batch_size=4, seed=0)  # fmt: skip
    arch = ArchConfig("alibi", vocab_size=data.vocab_size, max_length=data.max_seq_len, **TINY)
    return data, CausalLMModel(arch), 54


def mlm():
    data = MaskedLMDataModule(task="tinyshakespeare", vocab_size_limit=300, block_size=16, max_train_blocks=8,
                              max_eval_blocks=7, batch_size=2, seed=0)  # fmt: skip
    arch = ArchConfig("tupe_a", vocab_size=data.vocab_size, max_length=16, post_norm=True, **TINY)
    return data, MaskedLMModel(arch), 7


def translation():
    data = TranslationDataModule(vocab_size_limit=500, max_length=32, max_train_examples=20, max_eval_examples=15,
                                 batch_size=4, seed=0)  # fmt: skip
    arch = ArchConfig("sinusoidal", vocab_size=data.vocab_size, max_length=32, **TINY)
    return data, TranslationModel(arch, decoder_depth=1, val_bleu_batches=1, max_decode_len=3), 15


class KeepOutcomes(pl.Callback):
    """Rank 0 writes the evaluation's gathered table (the module lives in the forked processes)."""

    def __init__(self, path):
        self.path = path

    def on_validation_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            np.savez(self.path, **pl_module.evaluation_outcomes["val"])


def validate(model, data, devices: int | None, path) -> dict[str, np.ndarray]:
    ddp = {} if devices is None else {"strategy": "ddp_fork", "devices": devices}
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[KeepOutcomes(path)], **ddp)  # fmt: skip
    trainer.validate(copy.deepcopy(model), datamodule=data, verbose=False)
    with np.load(path) as table:
        return {name: table[name] for name in table.files}


@pytest.mark.parametrize("kind", [lm, mlm, translation], ids=lambda f: f.__name__)
def test_two_processes_gather_the_one_process_outcomes(kind, tmp_path, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path / "tokenizers"))
    data, model, examples = kind()
    randomize_(model)  # outcomes that differ from example to example
    one = validate(model, data, None, tmp_path / "one.npz")
    two = validate(model, data, 2, tmp_path / "two.npz")
    assert one["id"].tolist() == two["id"].tolist() == list(range(examples))  # each id once: none repeated
    assert one.keys() == two.keys()
    for name in one:
        if one[name].dtype.kind == "f":
            np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            assert two[name].tolist() == one[name].tolist(), name
    assert one["nll"].std() > 0 and one["tokens"].sum() > 0
