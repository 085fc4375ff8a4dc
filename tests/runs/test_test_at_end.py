"""`fit --run.test_at_end=true` reports the untouched test fold as the run ends (issue 44.1): the final model's
test/... metrics and per-example test outcomes in the fit's own record, the same numbers as `cli.py test` of its
last checkpoint; without the option a fit never touches the test split."""

import csv
from pathlib import Path

import pytest

from pe_sweeps.cli import cli_main
from pe_sweeps.runs.records import load_records

SMALL = ["--config=configs/pe_study_cls.yaml", "--model.arch.dim=32", "--model.arch.num_heads=4",
         "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--data.preset=null",
         "--data.text_column=text", "--data.vocab_size_limit=300", "--data.max_length=16", "--data.batch_size=8",
         "--data.test_fraction=0.2"]  # fmt: skip


def runs(out_dir: Path) -> dict:
    return {r.subcommand: r for r in load_records(out_dir)}


@pytest.fixture
def train_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("PE_TOKENIZER_CACHE", str(tmp_path / "tokenizers"))
    path = tmp_path / "train.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((f"{word} number {i}", word) for i in range(20) for word in ("alpha", "beta", "gamma"))
    return path


@pytest.mark.slow  # trains a model twice and tests it once
def test_the_test_fold_is_reported_at_the_end_of_a_fit(train_file, tmp_path):
    data = [*SMALL, f"--data.train_file={train_file}"]
    cli_main(["fit", *data, "--trainer.max_steps=3", "--trainer.max_epochs=null", "--trainer.val_check_interval=3",
              f"--run.out_dir={tmp_path / 'a'}", "--run.test_at_end=true"])  # fmt: skip
    fit = runs(tmp_path / "a")["fit"]
    assert fit.status == "finished" and {"test/acc", "test/macro_f1", "val/acc"} <= set(fit.final)
    assert set(fit.outcomes) == {"val", "test"}  # the test fold's per-example outcomes, for compare's resampling
    checkpoint = Path(fit.run_dir) / "checkpoints" / "last.ckpt"
    cli_main(["test", *data, f"--ckpt_path={checkpoint}", f"--run.out_dir={tmp_path / 'a'}"])
    tested = runs(tmp_path / "a")["test"]
    assert tested.final["test/acc"] == pytest.approx(fit.final["test/acc"])
    assert tested.final["test/macro_f1"] == pytest.approx(fit.final["test/macro_f1"])
    cli_main(["fit", *data, "--trainer.max_steps=3", "--trainer.max_epochs=null", "--trainer.val_check_interval=3",
              f"--run.out_dir={tmp_path / 'b'}"])  # fmt: skip
    plain = runs(tmp_path / "b")["fit"]
    assert not [k for k in plain.final if k.startswith("test/")] and "test" not in plain.outcomes
