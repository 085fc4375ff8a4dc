"""Text classification from TSV / CSV / JSON-lines files: classes, quoting, unicode, header-less files, splits,
PE-Study's presets, one-line errors naming file and row, multi-class metrics and a CLI run.

Claims of docs/tasks.md covered here:
- "Files: TSV (read unquoted), CSV (standard quoting) or JSON lines, by suffix or data.format; a text column,
  optionally data.text_pair_column for pairs, and a label column with any number of string or integer classes":
  test_every_format_reads_the_same_rows_and_classes, test_header_less_file_integer_labels_and_pairs
- "Header-less files: data.header=false with data.column_names (else columns are named 0, 1, ...)":
  test_header_less_file_integer_labels_and_pairs
- "The label set is the training split's, sorted (numerically when all are integers); its names go to the
  classifier's labels, so the checkpoint's hparams and the run record keep them":
  test_header_less_file_integer_labels_and_pairs, test_cli_trains_three_classes_and_saves_the_label_set,
  test_classifier_refuses_label_names_of_the_wrong_count
- "Splits: data.val_file / data.test_file, or cut from the training file with data.split_seed, stratified ...: the
  test set a data.test_fraction or fold data.fold of data.folds (stratified K-fold), the validation set a
  data.val_fraction of the rest": test_seeded_and_kfold_splits_are_disjoint_stratified_and_reproducible
- "Metrics (torchmetrics): val/acc, val/macro_f1 over all classes and val/score = accuracy; the test split with
  python cli.py test --config ... --ckpt_path <run>/checkpoints/last.ckpt": test_multiclass_metrics_equal_scikit_learn,
  test_cli_trains_three_classes_and_saves_the_label_set
- "Bad files stop with one line naming the file and the row (rows count from 1 after the header): empty file,
  missing column, malformed row, empty value, a label the training split does not have (exit 2)":
  test_bad_training_file_is_one_line_naming_file_and_row, test_unseen_label_and_malformed_json_name_the_row,
  test_cli_bad_file_exits_2_with_one_line
- "Presets: mr, cr, subj, mpqa read ../shared/data/pe_study_cls/<NAME>/all.tsv (... 10 stratified folds with seed
  1111, data.fold 0-9 is the test fold; the validation set is a stratified 10 % of the other nine folds)":
  test_local_presets_read_senteval_files_with_10_fold_protocol
- "trec (6 classes) and sst (binary, sentence level) have no local copy: offline, pass --data.train_file /
  --data.test_file ..., as the error says": test_presets_without_local_copy_say_what_to_pass
- "Online, data.hub_name loads a set from the hub instead": test_unreachable_hub_is_one_line
"""

import json
from pathlib import Path

import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score

from datamodules import text
from datamodules.glue import CLS
from datamodules.text_classification import PRESETS, TextClassificationDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.classifier import SequenceClassifier, task_metrics
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main

SMALL = {"vocab_size_limit": 300, "max_length": 32, "batch_size": 4}
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ROWS = [  # three classes, quoting-worthy text, unicode
    ("a plain sentence", "sports"),
    ('she said "hello", then left', "politics"),
    ("crème brûlée — déjà vu…", "food"),
    ("emoji 🙂 and 中文", "sports"),
    ("commas, inside, text", "politics"),
    ("naïve café", "food"),
]


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))
    monkeypatch.setenv("WANDB_MODE", "disabled")


def write_csv(path: Path, rows, header=("text", "label")) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return path


def write_tsv(path: Path, rows, header=("text", "label")) -> Path:
    lines = (["\t".join(header)] if header else []) + ["\t".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def texts_and_labels(dm, split):
    texts, ids = dm.splits[split]
    return [t[0] for t in texts], [dm.label_names[int(i)] for i in ids]


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_every_format_reads_the_same_rows_and_classes(fmt, tmp_path):
    rows = ROWS if fmt != "tsv" else [(t.replace('"', ""), y) for t, y in ROWS]  # TSVs are read unquoted
    if fmt == "csv":
        train = write_csv(tmp_path / "train.csv", rows)
    elif fmt == "tsv":
        train = write_tsv(tmp_path / "train.tsv", rows)
    else:
        train = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": y} for t, y in rows])
    dm = TextClassificationDataModule(train_file=str(train), val_file=str(train), test_file=str(train),
                                      text_column="text", **SMALL)  # fmt: skip
    assert dm.label_names == ["food", "politics", "sports"] and dm.num_labels == 3
    assert texts_and_labels(dm, "test") == ([t for t, _ in rows], [y for _, y in rows])
    assert dm.task == dm.classifier_task == "cls-train"
    dm.setup()
    batch = next(iter(dm.test_dataloader()))
    assert (batch["tokens"][:, 0] == CLS).all() and batch["labels"].tolist() == [2.0, 1.0, 0.0, 2.0]


def test_files_as_they_come_latin1_bom_and_crlf(tmp_path):
    """Issue 29.7: TREC as distributed (ISO-8859-1, one non-UTF-8 row) ended `fit` in a 90-line traceback."""
    rows = [("caf\u00e9 opens", "food"), ("match won", "sports"), ("vote today", "politics"), ("soup hot", "food")]
    lines = ["text\tlabel", *("\t".join(r) for r in rows)]
    latin = tmp_path / "trec.tsv"
    latin.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    with pytest.raises(ConfigError) as error:
        TextClassificationDataModule(train_file=str(latin), text_column="text", **SMALL)
    assert str(error.value) == (
        f"{latin}: line 2 is not utf-8 text (byte 0xe9 at offset 14); set --data.encoding to the file's encoding "
        "(e.g. latin-1, cp1252) or re-save it as UTF-8 (tsv file)"
    )
    dm = TextClassificationDataModule(train_file=str(latin), val_file=str(latin), test_file=str(latin),
                                      text_column="text", encoding="latin-1", **SMALL)  # fmt: skip
    assert texts_and_labels(dm, "test")[0][0] == "caf\u00e9 opens"
    windows = tmp_path / "bom_crlf.csv"  # a spreadsheet's export: a byte-order mark and CRLF line ends
    windows.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(["text,label", *(",".join(r) for r in rows)]).encode() + b"\r\n")
    dm = TextClassificationDataModule(train_file=str(windows), val_file=str(windows), test_file=str(windows),
                                      text_column="text", **SMALL)  # fmt: skip
    assert texts_and_labels(dm, "test") == ([t for t, _ in rows], [y for _, y in rows])  # no "\ufeff", no "\r"
    with pytest.raises(ConfigError, match="^--data.encoding 'klingon' is not a text encoding; e.g. utf-8"):
        TextClassificationDataModule(train_file=str(windows), text_column="text", encoding="klingon", **SMALL)


def test_header_less_file_integer_labels_and_pairs(tmp_path):
    rows = [(10, "first a", "first b"), (2, "second a", "second b"), (10, "third a", "third b"), (2, "x", "y")]
    train = write_tsv(tmp_path / "pairs.tsv", rows, header=None)
    dm = TextClassificationDataModule(train_file=str(train), val_file=str(train), test_file=str(train),
                                      header=False, column_names=["y", "a", "b"], text_column="a",
                                      text_pair_column="b", label_column="y", **SMALL)  # fmt: skip
    assert dm.label_names == ["2", "10"]  # integers sort numerically, not as strings
    texts, ids = dm.splits["train"]
    assert texts[0] == ("first a", "first b") and ids == [1.0, 0.0, 1.0, 0.0]
    numbered = TextClassificationDataModule(train_file=str(train), val_file=str(train), test_file=str(train),
                                            header=False, text_column="1", label_column="0", **SMALL)  # fmt: skip
    assert numbered.splits["train"][0][1] == ("second a",)


def test_seeded_and_kfold_splits_are_disjoint_stratified_and_reproducible(tmp_path):
    rows = [(f"sentence number {i}", ["a", "b", "c"][i % 3]) for i in range(90)]
    train = write_csv(tmp_path / "all.csv", rows)
    make = lambda **kw: TextClassificationDataModule(train_file=str(train), text_column="text", **SMALL, **kw)
    seeded = make(split_seed=3)
    parts = {s: set(texts_and_labels(seeded, s)[0]) for s in ("train", "val", "test")}
    assert sum(map(len, parts.values())) == 90 and len(set.union(*parts.values())) == 90
    assert len(parts["test"]) == 9 and sorted(texts_and_labels(seeded, "test")[1]).count("a") == 3
    assert texts_and_labels(make(split_seed=3), "test") == texts_and_labels(seeded, "test")
    assert texts_and_labels(make(split_seed=4), "test") != texts_and_labels(seeded, "test")
    tests = [set(texts_and_labels(make(folds=5, fold=k), "test")[0]) for k in range(5)]
    assert all(len(t) == 18 for t in tests) and len(set.union(*tests)) == 90  # the folds partition the rows


@pytest.mark.parametrize(
    "content, kwargs, message",
    [
        ("", {}, r"train.csv: empty file"),
        ("text,label\n", {}, r"train.csv: no data rows"),
        ("text,lbl\nfine,a\n", {}, r"train.csv: no column 'label'; columns: text, lbl"),
        ("text,label\nfine,a\nbad,b,extra\n", {}, r"train.csv: row 2: 3 fields, expected 2"),
        ("text,label\nfine,a\nshort\n", {}, r"train.csv: row 2: empty or missing 'label'"),
        ("text,label\nfine,a\n\nok,b\n", {}, r"train.csv: row 2: empty or missing 'text'"),
    ],
)
def test_bad_training_file_is_one_line_naming_file_and_row(content, kwargs, message, tmp_path):
    path = tmp_path / "train.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as error:
        TextClassificationDataModule(train_file=str(path), val_file=str(path), test_file=str(path),
                                     text_column="text", **SMALL, **kwargs)  # fmt: skip
    assert "\n" not in str(error.value)


def test_unseen_label_and_malformed_json_name_the_row(tmp_path):
    train = write_csv(tmp_path / "train.csv", ROWS)
    dev = write_csv(tmp_path / "dev.csv", [("ok", "food"), ("new class", "weather")])
    with pytest.raises(ConfigError, match=r"dev.csv: row 2: label 'weather' does not occur in the training split"):
        TextClassificationDataModule(train_file=str(train), val_file=str(dev), test_file=str(train),
                                     text_column="text", **SMALL)  # fmt: skip
    broken = tmp_path / "train.jsonl"
    broken.write_text('{"text": "a", "label": 1}\n{"text": "b" "label": 2}\n')
    with pytest.raises(ConfigError, match=r"train.jsonl: row 2: malformed JSON") as error:
        TextClassificationDataModule(train_file=str(broken), text_column="text", **SMALL)
    assert "\n" not in str(error.value)


def test_cli_bad_file_exits_2_with_one_line(tmp_path, capsys):
    path = write_csv(tmp_path / "train.csv", [("fine", "a"), ("also", "b")], header=("text", "lbl"))
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config=configs/pe_study_cls.yaml", "--data.preset=null", f"--data.train_file={path}",
                  "--data.text_column=text", f"--run.out_dir={tmp_path}"])  # fmt: skip
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "train.csv: no column 'label'; columns: text, lbl" in line


@pytest.mark.parametrize("preset", [p for p, spec in PRESETS.items() if spec.local])
def test_local_presets_read_senteval_files_with_10_fold_protocol(preset):
    dm = TextClassificationDataModule(preset=preset, max_train_examples=64, **SMALL)
    sizes = {s: len(dm.splits[s][0]) for s in ("val", "test")}
    total = {"mr": 10662, "cr": 3771, "subj": 10000, "mpqa": 10603}[preset]
    assert dm.folds == 10 and dm.num_labels == 2 and abs(sizes["test"] - total / 10) <= 1
    assert dm.split_seed == 1111 and dm.fold == 0 and dm.val_fraction == 0.1  # SentEval's seed; 10 % validation
    assert set(dm.label_names) in ({"neg", "pos"}, {"objective", "subjective"})
    assert set(dm.splits["train"][1]) == {0.0, 1.0}  # the files list one class first: a cut subset has both


@pytest.mark.parametrize("preset", [p for p, spec in PRESETS.items() if not spec.local])
def test_presets_without_local_copy_say_what_to_pass(preset):
    with pytest.raises(ConfigError, match="has no local copy: offline pass --data.train_file") as error:
        TextClassificationDataModule(preset=preset, **SMALL)
    assert "\n" not in str(error.value)


def test_unreachable_hub_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="cannot load 'no-such/set' from the Hugging Face hub.*offline:") as error:
        TextClassificationDataModule(preset="trec", hub_name="no-such/set", **SMALL)
    assert "\n" not in str(error.value) and "--data.train_file" in str(error.value)


def test_multiclass_metrics_equal_scikit_learn():
    generator = torch.Generator().manual_seed(0)
    preds, labels = torch.randint(0, 5, (300,), generator=generator), torch.randint(0, 5, (300,), generator=generator)
    values = task_metrics("trec", 5)(preds, labels)
    assert set(values) == {"acc", "macro_f1"}
    assert values["acc"].item() == pytest.approx(accuracy_score(labels, preds), abs=1e-6)
    assert values["macro_f1"].item() == pytest.approx(f1_score(labels, preds, average="macro"), abs=1e-6)


def test_classifier_refuses_label_names_of_the_wrong_count():
    with pytest.raises(ConfigError, match="num_labels=3 but 2 class names"):
        SequenceClassifier(
            ArchConfig(dim=32, num_heads=4, vocab_size=50, max_length=16), num_labels=3, labels=["a", "b"]
        )


@pytest.mark.slow
def test_cli_trains_three_classes_and_saves_the_label_set(tmp_path):
    rows = [(f"{word} number {i}", word) for i in range(30) for word in ("alpha", "beta", "gamma")]
    train = write_csv(tmp_path / "train.csv", rows)
    cli_main([
        "fit", "--config=configs/pe_study_cls.yaml", "--model.arch.dim=32", "--model.arch.num_heads=4", *QUIET,
        "--data.preset=null", f"--data.train_file={train}", "--data.text_column=text", "--data.vocab_size_limit=300",
        "--data.max_length=16", "--data.batch_size=8", "--trainer.max_steps=3", "--trainer.max_epochs=null",
        "--trainer.val_check_interval=3", f"--run.out_dir={tmp_path}", "--run.name=cls",
    ])  # fmt: skip
    (record,) = (tmp_path / "runs").glob("cls-*/record.json")
    record = json.loads(record.read_text())
    assert record["task"] == "cls-train" and record["status"] == "finished"
    assert record["config"]["model"]["init_args"]["labels"] == ["alpha", "beta", "gamma"]
    assert {"val/acc", "val/macro_f1", "val/score", "val/loss"} <= set(record["final"])
    assert record["final"]["val/score"] == record["final"]["val/acc"]
    (checkpoint,) = (tmp_path / "runs").glob("cls-*/checkpoints/last.ckpt")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["hyper_parameters"]
    assert saved["labels"] == ["alpha", "beta", "gamma"] and saved["num_labels"] == 3 and saved["task"] == "cls-train"
    cli_main([  # docs/tasks.md's test command: the same data options and the run's checkpoint
        "test", "--config=configs/pe_study_cls.yaml", "--model.arch.dim=32", "--model.arch.num_heads=4", *QUIET,
        "--data.preset=null", f"--data.train_file={train}", "--data.text_column=text", "--data.vocab_size_limit=300",
        "--data.max_length=16", "--data.batch_size=8", f"--ckpt_path={checkpoint}", f"--run.out_dir={tmp_path}",
        "--run.name=cls-test",
    ])  # fmt: skip
    (tested,) = (tmp_path / "runs").glob("cls-test-*/record.json")
    tested = json.loads(tested.read_text())
    assert tested["status"] == "finished" and {"test/acc", "test/macro_f1"} <= set(tested["final"])
