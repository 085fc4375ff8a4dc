"""GLUE sentence and sentence-pair tasks (Wang et al. 2019): SST-2, CoLA, MRPC, RTE, STS-B.

Read from the GLUE TSV files (`<data_dir>/glue/<folder>/{train,dev}.tsv`) through `datasets`' csv
builder, or from the hub (`glue:<config>`) when `hub_name` is set. The labelled dev set is the
validation set (and the test set: GLUE's test labels are not public). Inputs are `[CLS] a [SEP]` or
`[CLS] a [SEP] b [SEP]`, truncated longest-first to `max_length`, so [CLS] sits at position 0 as in
BERT and TUPE; there are no segment embeddings (the [SEP] marks the boundary).

Tokenizer: with `init_from` (a MaskedLMModel checkpoint) the tokenizer saved in that checkpoint, so
fine-tuning reads text exactly as pre-training did, and `max_seq_len` becomes the checkpoint's
`max_length` so every position table has the pre-trained shape. Without it (training from scratch, the
PE-Study setting) a tokenizer trained on the task's training sentences and cached.
Shape legend: B batch, L padded length.
"""

import csv
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from datamodules.base import FileDataModule, Limit, Tokenizer, data_options_help, hub_error
from datamodules.text import (
    SPECIAL_TOKENS,
    check_tokenizer,
    files_stamp,
    load_or_train_tokenizer,
    resolve_dir,
    tokenizer_cache_dir,
)
from lightning_modules.arch import ArchConfig
from lightning_modules.checkpoint_io import load_checkpoint
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt

PAD, CLS, SEP = (SPECIAL_TOKENS.index(t) for t in ("[PAD]", "[CLS]", "[SEP]"))


@dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task's text and label live in its TSV files."""

    folder: str
    text_columns: tuple[str, ...]
    label_column: str
    labels: tuple[str, ...] | None  # class names in id order; None = regression (STS-B)
    column_names: tuple[str, ...] | None = None  # for files without a header (CoLA)
    hub_config: str = ""


GLUE_TASKS = {
    "sst2": GlueTask("SST-2", ("sentence",), "label", ("0", "1"), hub_config="sst2"),
    "cola": GlueTask("CoLA", ("sentence",), "label", ("0", "1"), ("source", "label", "mark", "sentence"), "cola"),
    "mrpc": GlueTask("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), hub_config="mrpc"),
    "rte": GlueTask("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"), hub_config="rte"),
    "stsb": GlueTask("STS-B", ("sentence1", "sentence2"), "score", None, hub_config="stsb"),
}


def read_split(path: Path, spec: GlueTask) -> tuple[list[tuple[str, ...]], list[float]]:
    """(texts, labels) of one TSV split: texts as 1- or 2-tuples, labels as class ids or scores."""
    import datasets

    kwargs = {"sep": "\t", "quoting": csv.QUOTE_NONE, "encoding": "utf-8-sig", "keep_default_na": False}
    if spec.column_names:
        kwargs |= {"header": None, "names": list(spec.column_names)}
    columns = [*spec.text_columns, spec.label_column]
    expected = f"expected a {spec.folder} TSV with columns {', '.join(columns)}"
    if not path.read_bytes().strip():
        raise ConfigError(f"{path} is empty; {expected}")
    try:
        table = datasets.load_dataset("csv", data_files={"split": str(path)}, split="split", **kwargs)
        texts = list(zip(*([str(v).strip() for v in table[c]] for c in spec.text_columns)))
        raw = [str(v).strip() for v in table[spec.label_column]]
    except Exception as error:  # noqa: BLE001 - ragged rows, missing columns: pandas and datasets raise many kinds
        cause = error.__cause__ or error  # datasets' "An error occurred while generating the dataset" names none
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[-1][:160]
        raise ConfigError(f"{path} cannot be read ({reason}); {expected}") from None
    if not raw:
        raise ConfigError(f"{path} has no rows; {expected}")
    return texts, [label_value(v, spec, path, row) for row, v in enumerate(raw, start=1)]


def label_value(value: str, spec: GlueTask, path: Path, row: int) -> float:
    """A class id (classification) or a score (STS-B); anything else is a one-line error naming the row."""
    try:
        return float(value) if spec.labels is None else float(spec.labels.index(value))
    except ValueError:
        accepted = "a number" if spec.labels is None else ", ".join(spec.labels)
        raise ConfigError(
            f"{path} row {row}: label {value!r} in column {spec.label_column!r}; accepted: {accepted}"
        ) from None


def read_hub_task(spec: GlueTask, hub_name: str, data_dir: str):
    """{split: (texts, labels)} from the hub; unreachable -> a one-line ConfigError."""
    try:
        import datasets

        path, _, config = hub_name.partition(":")
        loaded = datasets.load_dataset(path, config or spec.hub_config)
        columns = ["sentence"] if len(spec.text_columns) == 1 else ["sentence1", "sentence2"]
        return {
            split: (list(zip(*(loaded[name][c] for c in columns))), [float(v) for v in loaded[name]["label"]])
            for split, name in (("train", "train"), ("dev", "validation"))
        }
    except Exception as error:  # noqa: BLE001 - any failure to reach or read the hub is a config problem
        instead = "to use local files drop --data.hub_name and set --data.data_dir"
        instead += f" (now {data_dir!r}, needs glue/{spec.folder}/)"
        raise hub_error(hub_name, error, instead) from None


def checkpoint_tokenizer(path: str):
    """(tokenizer, max_length) saved in a MaskedLMModel checkpoint; a clear error otherwise."""
    from tokenizers import Tokenizer

    from lightning_modules.masked_lm import TOKENIZER_KEY

    # memory-mapped, so reading the tokenizer does not load the weights
    checkpoint = load_checkpoint(path)
    if TOKENIZER_KEY not in checkpoint:
        raise ConfigError(f"init_from: {path!r} holds no tokenizer; fine-tune from a MaskedLMModel checkpoint")
    return Tokenizer.from_str(checkpoint[TOKENIZER_KEY]), ArchConfig.from_hparams(
        checkpoint["hyper_parameters"]
    ).max_length


def join_segments(segments: list[list[int]], max_length: int) -> list[int]:
    """[CLS] a [SEP] (b [SEP]) from token id lists, the longest truncated first until it fits."""
    budget = max_length - 1 - len(segments)  # room left after [CLS] and one [SEP] per segment
    if budget < len(segments):
        raise ConfigError(f"max_length={max_length} is too short for {len(segments)} segment(s)")
    segments = [list(s) for s in segments]
    while sum(map(len, segments)) > budget:
        max(segments, key=len).pop()
    ids = [CLS]
    for segment in segments:
        ids += segment + [SEP]
    return ids


def encode_examples(tokenizer, texts: list[tuple[str, ...]], max_length: int) -> list[list[int]]:
    """Every example's input ids (segments tokenized in batches: fast tokenizers run in Rust threads)."""
    columns = [tokenizer.encode_batch(list(column), add_special_tokens=False) for column in zip(*texts)]
    return [join_segments([e.ids for e in row], max_length) for row in zip(*columns)]


def encode_examples_cached(tokenizer, texts: list[tuple[str, ...]], max_length: int) -> list[list[int]]:
    """`encode_examples`, cached under the tokenizer cache keyed by a hash of the tokenizer, the texts and
    max_length (flat ids + offsets in one .npz): repeated runs and sweep trials skip tokenisation."""
    key = hashlib.sha1(f"{tokenizer.to_str()}{texts!r}{max_length}".encode()).hexdigest()[:16]
    cache_file = tokenizer_cache_dir() / f"glue-ids-{key}.npz"
    if cache_file.is_file():
        stored = np.load(cache_file)
        flat, offsets = stored["ids"].tolist(), stored["offsets"].tolist()
        return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    ids = encode_examples(tokenizer, texts, max_length)
    offsets = np.cumsum([0] + [len(row) for row in ids])
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(partial, ids=np.fromiter((i for row in ids for i in row), dtype=np.int32), offsets=offsets)
    partial.replace(cache_file)  # atomic: concurrent runs never read a half-written file
    return ids


class Examples(torch.utils.data.Dataset):
    """Token id lists and labels; `collate` pads a batch to its longest example."""

    def __init__(self, ids: list[list[int]], labels: list[float]):
        self.ids, self.labels = ids, labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[list[int], float]:
        return self.ids[i], self.labels[i]

    @staticmethod
    def collate(items: list[tuple[list[int], float]]) -> dict[str, Tensor]:
        width = max(len(ids) for ids, _ in items)
        tokens = torch.full((len(items), width), PAD, dtype=torch.long)  # (B, L)
        for row, (ids, _) in enumerate(items):
            tokens[row, : len(ids)] = torch.tensor(ids)
        labels = torch.tensor([label for _, label in items])
        return {"tokens": tokens, "padding_mask": tokens != PAD, "labels": labels}


GlueTaskName = Literal[tuple(GLUE_TASKS)]  # --help lists them, a wrong one is refused when parsed


@data_options_help(
    task="the GLUE task (files under <data_dir>/glue/, or hub_name)",
    init_from="linked from model.init_from: a MaskedLMModel checkpoint whose tokenizer and max_length are used",
    tokenizer="without init_from: bpe (byte-level BPE), char or word (whitespace-split; auto is word here), learned "
    "on the task's training sentences",
    max_length="longest input in tokens, [CLS] and [SEP] included (texts truncated longest-first)",
)
class GLUEDataModule(FileDataModule):
    """A GLUE task as batches `tokens` (B, L), `padding_mask` (B, L) True = real, `labels` (B,).

    `num_labels` (2, or 1 for STS-B's regression), `vocab_size`, `max_seq_len` and `task` are known after
    `__init__` for the CLI's links. `max_train_examples` / `max_eval_examples` keep the first N examples.
    `hub_name`: e.g. "glue" (the config named by the task) or "glue:sst2". The test loader is the dev set's.
    """

    collate_fn = staticmethod(Examples.collate)

    @staticmethod
    def check_options(tokenizer: str = "bpe", **_) -> None:
        check_tokenizer(tokenizer)

    def __init__(
        self,
        task: GlueTaskName = "sst2",
        init_from: str | None = None,
        tokenizer: Tokenizer = "bpe",
        max_length: PositiveInt = 128,
        max_train_examples: Limit = None,
        max_eval_examples: Limit = None,
        **kwargs,  # data_dir, hub_name, vocab_size_limit (FileDataModule); batch_size, seed, num_workers
    ):
        super().__init__(**kwargs)
        self.task = self.classifier_task = task  # classifier_task: the source of cli.py's link to the classifier
        self.spec, self.max_length = GLUE_TASKS[task], max_length
        self.num_labels = 1 if self.spec.labels is None else len(self.spec.labels)
        self.label_names = None if self.spec.labels is None else list(self.spec.labels)  # linked to the model
        self.splits = self._read(self.data_dir, self.hub_name, max_train_examples, max_eval_examples)
        self.max_seq_len = max_length
        if init_from:
            self.tokenizer, self.max_seq_len = checkpoint_tokenizer(init_from)
            if max_length > self.max_seq_len:
                raise ConfigError(
                    f"--data.max_length={max_length} exceeds the pre-trained model's max_length={self.max_seq_len}"
                )
        else:
            train_text = "\n".join(" ".join(t) for t in self.splits["train"][0]) + "\n"
            source = f"glue-{task}-{self.stamp}"
            self.tokenizer, _ = load_or_train_tokenizer(tokenizer, self.vocab_size_limit, train_text, source)
        self.vocab_size = self.tokenizer.get_vocab_size()

    def _read(self, data_dir: str, hub_name: str | None, max_train: int | None, max_eval: int | None) -> dict:
        if hub_name:
            splits, self.stamp = read_hub_task(self.spec, hub_name, data_dir), "hub"
        else:
            folder = resolve_dir(data_dir) / "glue" / self.spec.folder
            paths = {split: folder / f"{split}.tsv" for split in ("train", "dev")}
            for path in paths.values():
                if not path.is_file():
                    folder = f"glue/{self.spec.folder}/"
                    raise ConfigError(
                        f"data file not found: {path}; point --data.data_dir at the folder holding {folder}"
                    )
            splits = {split: read_split(path, self.spec) for split, path in paths.items()}
            self.stamp = files_stamp(paths.values())
        limits = {"train": max_train, "dev": max_eval}
        return {s: (texts[: limits[s]], labels[: limits[s]]) for s, (texts, labels) in splits.items()}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set, self.val_set = (
                Examples(encode_examples_cached(self.tokenizer, texts, self.max_length), labels)
                for texts, labels in (self.splits[split] for split in ("train", "dev"))
            )
            self.test_set = self.val_set  # GLUE's test labels are not public: the dev set again
