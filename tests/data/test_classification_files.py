"""Classification files read through `datasets`' builders (issue 45.10): PE-Study's real SentEval files give the
examples an independent parse gives (same order, labels and texts in every split), `label text` lines (TREC's
.all files) are a format of their own, and a malformed or unknown file is one line naming the file, the line and
the formats.
"""

from pathlib import Path

import pytest
from sklearn.model_selection import StratifiedKFold, train_test_split

from datamodules import text
from datamodules.text_classification import SENTEVAL_SEED, TextClassificationDataModule
from pe_core.data_paths import data_root
from pe_core.errors import ConfigError

SMALL = {"vocab_size_limit": 300, "max_length": 32, "batch_size": 4}
LOCAL = {"mr": "MR", "cr": "CR", "subj": "SUBJ", "mpqa": "MPQA"}
TREC_LINES = [  # harvardnlp/sent-conv-torch data/TREC.train.all's layout: a coarse class id, a space, the question
    "5 How far is it from Denver to Aspen ?",
    "4 What county is Modesto , California in ?",
    "3 Who was Galileo ?",
    "0 What is an atom ?",
    "12 What   is  spacing kept ?",
    "2 What does I.V. stand for ?",
]


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))


def examples(dm, split: str) -> list[tuple[int, str, str]]:
    """(id, label, text) of every example of a split: its id is its index, what per-example outcomes key on."""
    texts, ids = dm.splits[split]
    return [(i, dm.label_names[int(y)], t[0]) for i, (t, y) in enumerate(zip(texts, ids))]


def senteval_rows(path: Path) -> tuple[list[str], list[str]]:
    """(texts, labels) of a SentEval all.tsv by plain string splitting (SOURCES.md: a header, one tab a line)."""
    header, *lines = path.read_text(encoding="utf-8").split("\n")
    assert header == "sentence\tlabel"
    rows = [line.split("\t") for line in lines if line]
    assert all(len(row) == 2 for row in rows)
    return [t for t, _ in rows], [y for _, y in rows]


@pytest.mark.parametrize("preset", LOCAL)
def test_senteval_files_give_the_examples_of_an_independent_parse(preset):
    texts, labels = senteval_rows(Path(data_root()) / "pe_study_cls" / LOCAL[preset] / "all.tsv")
    # SentEval's protocol rebuilt here with sklearn: fold 0 of 10 stratified folds (seed 1111) is the test set,
    # a stratified 10 % of the other nine (the fixed cut: val_seed split_seed) the validation set
    rest, test = next(iter(StratifiedKFold(10, shuffle=True, random_state=SENTEVAL_SEED).split(texts, labels)))
    rest, val = train_test_split(rest, test_size=0.1, random_state=SENTEVAL_SEED, stratify=[labels[i] for i in rest])
    dm = TextClassificationDataModule(preset=preset, val_seed="split_seed", max_train_examples=50, **SMALL)
    for split, rows in (("test", test), ("val", val), ("train", rest[:50])):
        assert examples(dm, split) == [(k, labels[i], texts[i]) for k, i in enumerate(rows)], split


@pytest.mark.parametrize("suffix, fmt", [(".all", None), (".txt", "label_text")])
def test_label_space_text_lines_are_a_format(tmp_path, suffix, fmt):
    """TREC's .all files needed `sed` into a TSV: now the .all suffix or --data.format=label_text reads them."""
    path = tmp_path / f"TREC.train{suffix}"
    path.write_bytes(("\r\n".join(TREC_LINES) + "\r\n").encode())  # CRLF ends read as line ends
    dm = TextClassificationDataModule(train_file=str(path), val_file=str(path), test_file=str(path), format=fmt,
                                      **SMALL)  # fmt: skip
    assert dm.label_names == ["0", "2", "3", "4", "5", "12"]  # integer labels in numeric order
    expected = [(k, line.split(" ", 1)[0], line.split(" ", 1)[1].strip()) for k, line in enumerate(TREC_LINES)]
    assert examples(dm, "test") == expected
    assert examples(dm, "test")[4][2] == "What   is  spacing kept ?"  # spacing inside the text kept


def test_label_text_names_its_columns_by_the_label_and_text_options(tmp_path):
    path = tmp_path / "topics.all"
    path.write_text("sports match won\npolitics vote today\nsports goal\npolitics law passed\n", encoding="utf-8")
    dm = TextClassificationDataModule(train_file=str(path), val_file=str(path), test_file=str(path),
                                      text_column="question", label_column="coarse", **SMALL)  # fmt: skip
    assert examples(dm, "val")[:2] == [(0, "sports", "match won"), (1, "politics", "vote today")]


FORMATS = "formats (--data.format): tsv (tab-separated, unquoted), csv (comma-separated, quoted), jsonl"


@pytest.mark.parametrize(
    "name, content, kwargs, message",
    [
        ("train.all", "5 fine question ?\n4\n3 ok ?\n", {}, r"train.all: line 2: not a label, a space and a text"),
        ("train.all", "5 fine question ?\n\n3 ok ?\n", {}, r"train.all: line 2: not a label, a space and a text"),
        ("train.csv", "text,label\nfine,a\nbad,b,extra\n", {}, r"train.csv: row 2: 3 fields, expected 2 \(csv file\)"),
        ("train.tsv", "text\tlabel\nfine\ta\nbad\tb\textra\n", {}, r"train.tsv: row 2: 3 fields, expected 2"),
        ("train.jsonl", '{"text": "a", "label": 1}\n{"text": "b" "label": 2}\n', {}, r"train.jsonl: row 2: malformed"),
        ("train.data", "fine,a\n", {}, r"train.data: cannot tell the format from the suffix '.data'"),
        ("train.all", "5 a\n4 b\n", {"text_pair_column": "b"}, r"train.all: a label_text file holds one text a line"),
    ],
)
def test_malformed_files_are_one_line_naming_file_line_and_formats(tmp_path, name, content, kwargs, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as error:
        TextClassificationDataModule(train_file=str(path), text_column="text", **SMALL, **kwargs)
    assert "\n" not in str(error.value)
    if "text_pair_column" not in kwargs:
        assert FORMATS in str(error.value) and "label_text (a label, a space, the text" in str(error.value)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match=rf"^data file not found: {tmp_path / 'TREC.train.all'}$"):
        TextClassificationDataModule(train_file=str(tmp_path / "TREC.train.all"), **SMALL)
