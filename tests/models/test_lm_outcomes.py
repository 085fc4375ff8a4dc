"""Per-example outcomes of the language-model kinds (issue 44.1): the causal LM keeps one row per evaluation
window, the masked LM one per block, translation one per sentence, each with `nll` (mean token NLL), `tokens`
(scored tokens) and `tok_acc`; the run's record points to the file and `compare --save_runs` carries it.

Claims covered here:
- "a causal LM's table has one row per window of every evaluation loader (each context, non-overlapping and
  sliding), ids 0..N-1; the token-weighted mean of `nll` per (context, stride) is val/loss and val/ppl_ctx_<n>
  (_stride_<S>)": test_fit_keeps_outcomes_that_reproduce_the_logged_loss[lm]
- "a masked LM's table has one row per evaluation block; token-weighted `nll` is val/loss, `tok_acc` val/acc":
  test_fit_keeps_outcomes_that_reproduce_the_logged_loss[mlm]
- "a translation model's table has one row per sentence; token-weighted `nll` is val/loss":
  test_fit_keeps_outcomes_that_reproduce_the_logged_loss[translation]
- "compare --save_runs carries the table (pack / unpack round trip)": the same test
- "a context an encoding cannot serve keeps its rows, with nll inf": test_unservable_windows_keep_their_rows
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import fit
from torch.utils.data import DataLoader

from datamodules import text
from lightning_modules.arch import ArchConfig
from lightning_modules.causal_lm import CausalLMModel
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.saved_runs import read_saved_runs
from pe_sweeps.runs.outcomes import outcome_table, read_table

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.max_steps=2",
         "--trainer.val_check_interval=2", "--model.arch.dim=32", "--model.arch.depth=1", "--model.arch.num_heads=4",
         "--model.arch.ffn_mult=2"]  # fmt: skip
HALF = 2.5e-4  # float16's rounding (2^-12 relative at most): the files keep the NLLs and accuracies in float16
KINDS = {
    # 256 tokens: windows of 16, 32, 64 (15 + 7 + 3) and sliding ones of stride 8 (29 + 25 + 17) = 96 rows
    "lm": (
        [
            "--config=configs/lm_tinyshakespeare.yaml",
            "--data.block_size=16",
            "--data.max_eval_tokens=256",
            "--data.eval_stride=8",
            "--data.batch_size=8",
        ],
        96,
    ),  # fmt: skip
    "mlm": (
        [
            "--config=configs/mlm_wikitext2.yaml",
            "--data.task=tinyshakespeare",
            "--data.vocab_size_limit=300",
            "--data.block_size=16",
            "--data.max_train_blocks=64",
            "--data.max_eval_blocks=7",
            "--data.batch_size=4",
        ],
        7,
    ),  # fmt: skip
    "translation": (
        [
            "--config=configs/translation_multi30k.yaml",
            "--data.vocab_size_limit=500",
            "--data.max_length=128",
            "--data.max_train_examples=200",
            "--data.max_eval_examples=15",
            "--data.batch_size=4",
            "--model.decoder_depth=1",
            "--model.val_bleu_batches=1",
            "--model.max_decode_len=4",
            "--model.warmup_steps=0",
        ],
        15,
    ),  # fmt: skip
}


@pytest.fixture(autouse=True)
def _quiet(tmp_path_factory, monkeypatch):
    """One tokenizer cache for this module, never the user's; W&B off."""
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.delenv("PE_OUT_ROOT", raising=False)


def weighted_nll(table: dict, where=None) -> float:
    """The token-weighted mean of the per-example mean NLL: the mean over every scored token."""
    where = np.ones(len(table["id"]), bool) if where is None else where
    return float(np.average(table["nll"][where].astype(np.float64), weights=table["tokens"][where]))


@pytest.mark.slow  # three seconds-long fits
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fit_keeps_outcomes_that_reproduce_the_logged_loss(kind, tmp_path):
    args, examples = KINDS[kind]
    record = fit(["fit", *args, *QUIET, f"--run.out_dir={tmp_path / 'runs'}"])
    pointer = record.outcomes["val"]
    assert pointer["path"] == "outcomes/val-step2.npz" and pointer["examples"] == examples
    table = read_table(Path(record.run_dir) / pointer["path"])
    assert {"id", "hash", "nll", "tokens", "tok_acc"} <= set(table)
    assert table["id"].tolist() == list(range(examples))
    # the digests tell the examples apart; a context's first sliding window is its first non-overlapping one
    assert len(set(table["hash"].tolist())) == examples - (3 if kind == "lm" else 0)
    assert ((table["tok_acc"] >= 0) & (table["tok_acc"] <= 1)).all() and (table["tokens"] >= 0).all()
    final = record.final
    if kind == "lm":  # val/loss: the token mean over the non-overlapping windows of the training context
        for (context, stride), rows in {(16, 0): 15, (32, 0): 7, (64, 0): 3, (16, 8): 29, (32, 8): 25,
                                        (64, 8): 17}.items():  # fmt: skip
            at = (table["context"] == context) & (table["stride"] == stride)
            assert at.sum() == rows, (context, stride)
            name = f"val/ppl_ctx_{context}" + (f"_stride_{stride}" if stride else "")
            assert weighted_nll(table, at) == pytest.approx(math.log(final[name]), rel=HALF), name
        in_distribution = (table["context"] == 16) & (table["stride"] == 0)
        assert weighted_nll(table, in_distribution) == pytest.approx(final["val/loss"], rel=HALF)
        assert table["tokens"][in_distribution].tolist() == [16] * 15  # every target scored once
    else:  # val/loss: the token mean over every scored (masked / target) token
        assert weighted_nll(table) == pytest.approx(final["val/loss"], rel=HALF)
    if kind == "mlm":  # val/acc: micro accuracy over the masked tokens
        accuracy = np.average(table["tok_acc"].astype(np.float64), weights=table["tokens"])
        assert accuracy == pytest.approx(final["val/acc"], abs=HALF)

    saved = tmp_path / "saved.json"
    compare_main([f"--out_dir={tmp_path / 'runs'}", "--metric=val/loss",
                  f"--save_runs={saved}"])  # fmt: skip
    (carried,) = read_saved_runs(str(saved)).records
    back = outcome_table(carried)
    assert back.keys() == table.keys() - {"hash"}
    assert back["id"].tolist() == table["id"].tolist() and back["tokens"].tolist() == table["tokens"].tolist()
    assert back["nll"] == pytest.approx(table["nll"], rel=1e-3)
    assert back["tok_acc"] == pytest.approx(table["tok_acc"], abs=1e-3)
    packed = json.loads(saved.read_text())["records"][0]["outcomes"]["val"]["table"]
    assert packed["columns"]["id"] == {"range": examples} and packed["columns"]["nll"]["kind"] == "float16"
    assert len(json.dumps(packed)) < 200 + 12 * examples  # compact: float16, 1-byte integers, base64


def test_unservable_windows_keep_their_rows():
    """A context beyond a learned table is logged as inf; its windows keep their rows (the same ids and digests
    as for any other encoding on this evaluation set), with nll inf."""
    model = CausalLMModel(ArchConfig("learned", dim=16, depth=1, num_heads=2, vocab_size=11, max_length=8))
    ids = torch.randint(0, 11, (50,), generator=torch.Generator().manual_seed(0))
    loaders = [DataLoader(text.Windows(ids, n), batch_size=2) for n in (8, 16)]  # 6 + 3 windows
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.warns(UserWarning, match="serves 8 positions, not 16"):
        (logged, _) = trainer.validate(model, dataloaders=loaders, verbose=False)
    table = model.evaluation_outcomes["val"]
    assert table["id"].tolist() == list(range(9)) and table["context"].tolist() == [8] * 6 + [16] * 3
    assert np.isfinite(table["nll"][:6]).all() and np.isinf(table["nll"][6:]).all()
    assert table["tokens"].tolist() == [8] * 6 + [16] * 3 and len(set(table["hash"].tolist())) == 9
    assert math.exp(weighted_nll(table, table["context"] == 8)) == pytest.approx(logged["val/ppl_ctx_8"], rel=1e-4)
