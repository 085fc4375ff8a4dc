"""Multi30k English -> German translation data (PE-Study, Wang & Chen 2020, section MT).

Files: `<data_dir>/multi30k/raw/{train,val,test_2016_flickr}.{en,de}`, one sentence per line, the lines of
the .en and .de files aligned (29000 / 1014 / 1000 pairs: WMT16 multimodal task 1, the test set PE-Study
reports). They are read through Hugging Face `datasets`' `text` builder (one row per line, cached in
datasets' cache) or, with `hub_name` (e.g. "bentrevett/multi30k", columns `en` and `de`), from the hub.

One JOINT byte-level BPE tokenizer is trained on the English and German training sentences together
(`tokenizers`, cached to a JSON file keyed by the training files' sizes and mtimes and the vocabulary
limit), so encoder, decoder and output layer can share one embedding table. Sentences are encoded without
special tokens and truncated to `max_length` tokens (targets to `max_length - 1`, leaving room for BOS/EOS).

Relative `data_dir`s are resolved against the repository root. Shape legend: B batch, S source length,
T target length (decoder input and output; both padded to the batch's longest).
"""

import re
from pathlib import Path
from typing import Annotated

import torch
from annotated_types import Ge
from torch import Tensor
from torch.utils.data import Dataset

from datamodules.base import BatchSize, FileDataModule, Limit, data_options_help, hub_error
from datamodules.text import SPECIAL_TOKENS, load_or_train_tokenizer, resolve_dir
from pe_core.errors import ConfigError
from pe_core.vocab import BOS, EOS, IGNORE_INDEX, PAD  # [CLS] begins a target, [SEP] ends it; padding: no loss

SOURCE, TARGET = "en", "de"
SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}  # split -> file stem
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
FOLDER = Path("multi30k") / "raw"
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)  # byte-level BPE keeps all 256 bytes, plus the special tokens


# ---------------------------------------------------------------------------------------------------------
# Reading: {split: (English lines, German lines)}


def local_paths(data_dir: str) -> dict[str, tuple[Path, Path]]:
    """{split: (en path, de path)}; a missing file is a one-line ConfigError."""
    folder = resolve_dir(data_dir) / FOLDER
    paths = {split: (folder / f"{stem}.{SOURCE}", folder / f"{stem}.{TARGET}") for split, stem in SPLITS.items()}
    for path in [p for pair in paths.values() for p in pair]:
        if not path.is_file():
            files = ", ".join(f"{stem}.{{{SOURCE},{TARGET}}}" for stem in SPLITS.values())
            raise ConfigError(f"data file not found: {path}; --data.data_dir must hold {FOLDER}/ with {files}")
    return paths


def read_local(paths: dict[str, tuple[Path, Path]]) -> dict[str, tuple[list[str], list[str]]]:
    """Each file as its list of lines through datasets' `text` builder (sample_by="line")."""
    import datasets

    data_files = {
        f"{split}_{lang}": str(path) for split, pair in paths.items() for lang, path in zip((SOURCE, TARGET), pair)
    }
    loaded = datasets.load_dataset("text", data_files=data_files, sample_by="line")
    column = lambda name: list(loaded[name]["text"])
    return {split: (column(f"{split}_{SOURCE}"), column(f"{split}_{TARGET}")) for split in paths}


def read_hub(hub_name: str, data_dir: str) -> dict[str, tuple[list[str], list[str]]]:
    """The hub data set's (en, de) columns per split; unreachable -> one-line ConfigError."""
    try:
        import datasets

        loaded = datasets.load_dataset(hub_name)
        return {split: (list(loaded[name][SOURCE]), list(loaded[name][TARGET])) for split, name in HUB_SPLITS.items()}
    except Exception as error:  # noqa: BLE001 - any failure to reach or read the hub is a config problem
        instead = "to use local files drop --data.hub_name and set --data.data_dir"
        instead += f" (now {data_dir!r}, needs {FOLDER}/)"
        raise hub_error(hub_name, error, instead) from None


def check_aligned(pairs: dict[str, tuple[list[str], list[str]]]) -> None:
    for split, (src, tgt) in pairs.items():
        if len(src) != len(tgt):
            raise ConfigError(f"multi30k {split}: {len(src)} {SOURCE} lines but {len(tgt)} {TARGET} lines")


# ---------------------------------------------------------------------------------------------------------
# Dataset and batches


class Pairs(Dataset):
    """Tokenized sentence pairs; item i is (source ids, target ids, raw target sentence)."""

    def __init__(self, tokenizer, src: list[str], tgt: list[str], max_length: int):
        encode = lambda lines, n: [e.ids[:n] for e in tokenizer.encode_batch(lines, add_special_tokens=False)]
        self.src = encode(src, max_length)
        self.tgt = encode(tgt, max_length - 1)  # + BOS (decoder input) or EOS (decoder target)
        self.refs = list(tgt)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], str]:
        return self.src[i], self.tgt[i], self.refs[i]


def pad(rows: list[list[int]], value: int) -> Tensor:
    """(B, N) right-padded rows, N the longest row (at least 1)."""
    out = torch.full((len(rows), max(1, *map(len, rows))), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def collate(items: list[tuple[list[int], list[int], str]]) -> dict:
    """Batch dict: src (B, S) 0-padded, src_mask (B, S) True = real token, tgt_in (B, T) = BOS + target,
    tgt_out (B, T) = target + EOS with -100 at padding, ref: the B raw reference sentences."""
    src, tgt, refs = zip(*items)
    src_ids = pad(list(src), PAD)  # (B, S)
    return {
        "src": src_ids,
        "src_mask": src_ids != PAD,
        "tgt_in": pad([[BOS, *t] for t in tgt], PAD),  # (B, T)
        "tgt_out": pad([[*t, EOS] for t in tgt], IGNORE_INDEX),  # (B, T)
        "ref": list(refs),
    }


# ---------------------------------------------------------------------------------------------------------
# DataModule


@data_options_help(
    max_length="longest source in tokens (longer ones truncated); a target keeps max_length - 1 tokens",
    max_train_examples="keep the first N training pairs (tests, quick runs); null: all",
    max_eval_examples="keep the first N validation and test pairs (tests, quick runs); null: all",
)
class TranslationDataModule(FileDataModule):
    """Multi30k En->De sentence pairs for an encoder-decoder Transformer (PE-Study, Wang & Chen 2020).

    Splits: train (29000 pairs), val (1014), test = test_2016_flickr (1000). Tokenizer: one joint byte-level
    BPE of at most `vocab_size_limit` tokens (ids 0..4 are [PAD] [CLS] [SEP] [MASK] [UNK]; BOS = [CLS],
    EOS = [SEP]) trained on the full English + German training text, whatever `max_train_examples` is, and
    cached under `tokenizer_cache_dir()` ($PE_TOKENIZER_CACHE overrides). Sources are truncated to
    `max_length` tokens, targets to `max_length - 1`. Training batches are reshuffled per epoch with a
    generator seeded by `seed`. `max_train_examples` / `max_eval_examples` keep the first N pairs (tests and
    fast runs). `vocab_size` and `max_seq_len` (= max_length) are known after `__init__` (argument links).
    """

    collate_fn = staticmethod(collate)

    task = "multi30k"

    @staticmethod
    def check_options(vocab_size_limit: int = 8000, **_) -> None:
        """The byte-level BPE's least vocabulary, checked by cli.py before anything is instantiated."""
        if vocab_size_limit < MIN_VOCAB:
            raise ConfigError(
                f"vocab_size_limit must be >= {MIN_VOCAB} (256 bytes + special tokens), got {vocab_size_limit}"
            )

    def __init__(
        self,
        max_length: Annotated[int, Ge(2)] = 64,
        batch_size: BatchSize = 64,
        max_train_examples: Limit = None,
        max_eval_examples: Limit = None,
        **kwargs,  # data_dir, hub_name, vocab_size_limit (FileDataModule); seed, num_workers (TaskDataModule)
    ):
        super().__init__(batch_size=batch_size, **kwargs)
        self.max_length, self.max_seq_len = max_length, max_length
        self.max_train_examples, self.max_eval_examples = max_train_examples, max_eval_examples
        self.pairs, key = self._read(self.hub_name)
        train_text = "\n".join(self.pairs["train"][0] + self.pairs["train"][1]) + "\n"
        self.tokenizer, self.tokenizer_file = load_or_train_tokenizer("bpe", self.vocab_size_limit, train_text, key)
        self.vocab_size = self.tokenizer.get_vocab_size()

    def _read(self, hub_name: str | None) -> tuple[dict[str, tuple[list[str], list[str]]], str]:
        """({split: (en lines, de lines)}, cache key of the source)."""
        if hub_name:
            pairs, key = read_hub(hub_name, self.data_dir), "hub-" + re.sub(r"[^\w.-]", "_", hub_name)
        else:
            paths = local_paths(self.data_dir)
            pairs = read_local(paths)
            stamp = "-".join(f"{p.stat().st_size}-{int(p.stat().st_mtime)}" for p in paths["train"])
            key = f"{self.task}-joint-{stamp}"
        check_aligned(pairs)
        return pairs, key

    def _pairs(self, split: str, limit: int | None) -> Pairs:
        src, tgt = self.pairs[split]
        return Pairs(self.tokenizer, src[:limit], tgt[:limit], self.max_length)

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            self.train_set = self._pairs("train", self.max_train_examples)
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self._pairs("val", self.max_eval_examples)
        if stage in (None, "test") and self.test_set is None:
            self.test_set = self._pairs("test", self.max_eval_examples)

    def detokenize(self, ids: Tensor) -> list[str]:
        """(B, N) generated ids -> B sentences: cut at the first EOS, special tokens dropped."""
        rows = [row[: row.index(EOS)] if EOS in row else row for row in ids.tolist()]
        return self.tokenizer.decode_batch(rows, skip_special_tokens=True)
