"""The validation cut carved out of a training file follows the run's data seed (issue 44.1): each seed is scored
on its own cut unless `val_seed` keeps one cut for every seed (PE-Study's, which the reproduction sweeps declare);
the test fold stays the protocol's, and no example is in two splits.
"""

from pathlib import Path

import pytest
import yaml

from datamodules import text
from datamodules.text_classification import TextClassificationDataModule

SMALL = {"vocab_size_limit": 300, "max_length": 32, "batch_size": 4}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))


@pytest.fixture
def train_file(tmp_path) -> Path:
    path = tmp_path / "all.tsv"  # 120 distinct sentences, 3 classes, listed class by class as SentEval's files
    rows = [f"sentence {i} of class {c}\t{c}" for c in ("a", "b", "c") for i in range(40)]
    path.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def split_texts(dm) -> dict[str, list[str]]:
    return {split: [t[0] for t in dm.splits[split][0]] for split in ("train", "val", "test")}


@pytest.mark.parametrize("protocol", [{"folds": 5}, {"test_fraction": 0.2}])
def test_the_validation_cut_follows_the_data_seed_unless_fixed(train_file, protocol):
    make = lambda **kw: split_texts(TextClassificationDataModule(train_file=str(train_file), **protocol, **SMALL, **kw))
    by_seed = {seed: make(seed=seed) for seed in (1, 2)}  # the default: val_seed data_seed
    assert set(by_seed[1]["val"]) != set(by_seed[2]["val"])
    assert by_seed[1]["test"] == by_seed[2]["test"]  # the test fold is split_seed's, whatever the data seed
    assert make(seed=1) == by_seed[1]  # and one seed gives one cut
    for fixed in ("split_seed", 7):
        cuts = [make(seed=seed, val_seed=fixed) for seed in (1, 2)]
        assert cuts[0] == cuts[1]
    assert make(seed=1, val_seed="split_seed")["val"] == make(seed=2, val_seed=0)["val"]  # split_seed is 0 here
    for parts in [*by_seed.values(), *cuts]:
        train, val, test = (set(parts[s]) for s in ("train", "val", "test"))
        assert not (train & val or train & test or val & test) and len(train | val | test) == 120
        assert len(val) == 10 or len(val) == 9  # a stratified 10 % of what the test set leaves


def test_a_given_test_file_leaves_the_validation_cut_to_the_data_seed(train_file, tmp_path):
    test_file = tmp_path / "test.tsv"
    test_file.write_text("sentence\tlabel\nheld out a\ta\nheld out b\tb\nheld out c\tc\n", encoding="utf-8")
    make = lambda seed: split_texts(TextClassificationDataModule(train_file=str(train_file), test_file=str(test_file),
                                                                 seed=seed, **SMALL))  # fmt: skip
    assert set(make(1)["val"]) != set(make(2)["val"]) and make(1)["test"] == make(2)["test"]


@pytest.mark.parametrize("name", ["repro_pe_study_cls.yaml", "repro_pe_study_cls_30.yaml"])
def test_the_reproduction_sweeps_declare_the_papers_fixed_cut(name):
    sweep = yaml.safe_load((ROOT / "sweeps" / name).read_text())
    assert "--data.val_seed=split_seed" in sweep["command"]
