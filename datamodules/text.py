"""Causal language modelling on text corpora, with evaluation at longer contexts (length extrapolation).

Protocol (PE-Study, Wang & Chen 2020, section LM: block size 128; Press et al. 2022, ALiBi: train at
context L, evaluate perplexity at L, 2L, 4L with non-overlapping windows and, with `eval_stride`, with
their sliding window too). Data comes through Hugging
Face `datasets` from local files (the `text` builder, cached in datasets' cache) or, with `hub_name`, from
the hub; tokenizers come from the `tokenizers` library, are trained on the training split only and are
cached to a JSON file.

Splits (deterministic):
- tinyshakespeare: input.txt cut by character fraction, first 90 % train, next 5 % validation, last 5 %
  test (each cut moved forward to the next line break).
- wikitext2: only the *valid* and *test* files of WikiText-2 exist offline (the official 10.8 MB train
  split is NOT available), so: valid.txt's first 90 % (by characters, cut at a line break) = train, its
  last 10 % = validation, test.txt = test. Numbers are therefore not comparable with published
  WikiText-2 perplexities (far less training data).

Without `--data.data_dir` the files are read under one data root ($PE_DATA_ROOT, else the checkout's
../shared/data), whatever the current directory.
Shape legend: B batch, L window (context) length.
"""

import hashlib
import os
import re
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from datamodules.base import FileDataModule, Limit, Tokenizer, data_options_help, hub_error
from pe_core.data_paths import TOKENIZER_CACHE_ENV as CACHE_ENV
from pe_core.data_paths import data_root
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt
from pe_core.vocab import IGNORE_INDEX, SPECIAL_TOKENS  # noqa: F401 - IGNORE_INDEX: a context-only token's target

TOKENIZERS = ("auto", "char", "word", "bpe")
# the tokenizers hold a whole line in memory (about 400 bytes per character at character level; a 1 GB line
# aborted the process): a longer line is refused
MAX_LINE_BYTES = 1_000_000
TRAIN_FRACTION, VAL_FRACTION = 0.90, 0.05  # tinyshakespeare; the test split is the rest (5 %)
WIKITEXT_TRAIN_FRACTION = 0.90  # of valid.txt; the rest is validation


# ---------------------------------------------------------------------------------------------------------
# Corpora: name -> folder, files and how they become (train, validation, test) text.


def _cut(text: str, fraction: float) -> int:
    """Character index at `fraction` of text, moved forward to just after the next line break."""
    index = int(len(text) * fraction)
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def split_tinyshakespeare(files: dict[str, str]) -> tuple[str, str, str]:
    text = files["input"]
    a, b = _cut(text, TRAIN_FRACTION), _cut(text, TRAIN_FRACTION + VAL_FRACTION)
    return text[:a], text[a:b], text[b:]


def split_wikitext2(files: dict[str, str]) -> tuple[str, str, str]:
    valid = files["valid"]
    a = _cut(valid, WIKITEXT_TRAIN_FRACTION)
    return valid[:a], valid[a:], files["test"]


# task -> (folder under data_dir, {name: file}, split function, default tokenizer)
CORPORA = {
    "tinyshakespeare": ("tinyshakespeare", {"input": "input.txt"}, split_tinyshakespeare, "char"),
    "wikitext2": ("wikitext-2", {"valid": "valid.txt", "test": "test.txt"}, split_wikitext2, "word"),
}


def check_tokenizer(tokenizer: str) -> None:
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}")


def resolve_dir(data_dir: str | None) -> Path:
    """`--data.data_dir` as given (relative to the current folder), or the data root when not given
    ($PE_DATA_ROOT, else the checkout's ../shared/data: pe_core/data_paths.py `data_root`)."""
    return data_root() if data_dir is None else Path(data_dir).expanduser()


def corpus_paths(task: str, data_dir: str) -> dict[str, Path]:
    """{name: path} of the task's local files; a missing file is a one-line ConfigError."""
    folder, files, _, _ = CORPORA[task]
    paths = {name: resolve_dir(data_dir) / folder / file for name, file in files.items()}
    for path in paths.values():
        if not path.is_file():
            raise ConfigError(f"data file not found: {path}; point --data.data_dir at the folder holding {folder}/")
    return paths


def read_local(paths: dict[str, Path]) -> dict[str, str]:
    """Each file as one document through datasets' `text` builder (cached in datasets' cache)."""
    import datasets

    data_files = {name: str(path) for name, path in paths.items()}
    loaded = datasets.load_dataset("text", data_files=data_files, sample_by="document")
    return {name: "".join(loaded[name]["text"]) for name in data_files}


def _hub_args(hub_name: str) -> tuple[str, str | None]:
    """ "path:config", "wikitext/wikitext-2-v1" (config named after its dataset) or a plain dataset path."""
    if ":" in hub_name:
        path, config = hub_name.split(":", 1)
        return path, config
    first, _, rest = hub_name.partition("/")
    if rest and "/" not in rest and rest.startswith(first):
        return first, rest
    return hub_name, None


def read_hub(hub_name: str, data_dir: str) -> tuple[str, str, str]:
    """(train, validation, test) text of a hub data set; unreachable -> one-line ConfigError."""
    try:
        import datasets

        loaded = datasets.load_dataset(*_hub_args(hub_name))
        rows = lambda split: "".join(r if r.endswith("\n") else r + "\n" for r in loaded[split]["text"])
        return rows("train"), rows("validation"), rows("test")
    except Exception as error:  # noqa: BLE001 - any failure to reach or read the hub is a config problem
        instead = "to use local files drop --data.hub_name and set --data.data_dir"
        instead += f" (now {data_dir!r}, needs the task's folder)"
        raise hub_error(hub_name, error, instead) from None


def files_stamp(paths) -> str:
    """Cache key part that changes when any of the files does (sizes and modification times)."""
    return "-".join(f"{p.stat().st_size}-{int(p.stat().st_mtime)}" for p in paths)


def check_text_file(path: Path, data: bytes) -> None:
    """UTF-8 text whose lines are at most MAX_LINE_BYTES long; a one-line ConfigError otherwise."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"data file {path} is not UTF-8 text (byte {error.start}); a corpus is a plain text file"
        ) from None
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    lengths = np.diff(breaks, prepend=-1, append=len(data)) - 1  # bytes of each line, without its line break
    over = np.flatnonzero(lengths > MAX_LINE_BYTES)
    if len(over):
        raise ConfigError(
            f"data file {path}: line {over[0] + 1} is {lengths[over[0]]:,} bytes; a line is at most "
            f"{MAX_LINE_BYTES:,} (the tokenizer holds a whole line in memory): break the text into lines"
        )


def read_corpus(task: str, data_dir: str, hub_name: str | None) -> tuple[tuple[str, str, str], str]:
    """((train, validation, test) text, cache key of the source), from the hub or local files."""
    if hub_name:
        return read_hub(hub_name, data_dir), "hub-" + re.sub(r"[^\w.-]", "_", hub_name)
    paths = corpus_paths(task, data_dir)
    for path in paths.values():
        data = path.read_bytes()
        if not data.strip():
            raise ConfigError(
                f"data file {path} is empty; --data.task={task} needs its text there (or set --data.data_dir)"
            )
        check_text_file(path, data)
    texts = CORPORA[task][2](read_local(paths))
    for split, text in zip(("train", "validation", "test"), texts):
        if not text.strip():
            raise ConfigError(f"the {split} split of --data.task={task} under {data_dir} is empty; check its files")
    return texts, f"{task}-{files_stamp(paths.values())}"


# ---------------------------------------------------------------------------------------------------------
# Tokenizers


TRAIN_COUNT = {"n": 0}  # tokenizers trained by this process (tests check the cache is used)


def tokenizer_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "pe_tokenizers"


def new_tokenizer(kind: str, vocab_size_limit: int):
    """(untrained Tokenizer, trainer): character-level, whitespace word-level or byte-level BPE."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size_limit, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet
        )
        return tokenizer, trainer
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    if kind == "char":
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    else:  # WikiText is pre-tokenized: split on whitespace, a line break is the <eos> token
        tokenizer.normalizer = normalizers.Replace("\n", " <eos> ")
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer, trainers.WordLevelTrainer(vocab_size=vocab_size_limit, special_tokens=SPECIAL_TOKENS)


def chunks(text: str, size: int = 1 << 16) -> list[str]:
    """Text as line-aligned pieces of about `size` characters (keeps every character)."""
    lines = text.splitlines(keepends=True)
    out, piece, n = [], [], 0
    for line in lines:
        piece.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(piece))
            piece, n = [], 0
    return out + (["".join(piece)] if piece else [])


def load_or_train_tokenizer(kind: str, vocab_size_limit: int, train_text: str, source: str):
    """(tokenizer, its cache file): the one cached for this source (a key naming the data and its version),
    kind and vocabulary limit under `tokenizer_cache_dir()`, or one trained on `train_text` and saved there."""
    from tokenizers import Tokenizer

    cache_file = tokenizer_cache_dir() / f"{source}-{kind}-{vocab_size_limit}.json"
    if cache_file.is_file():
        return Tokenizer.from_file(str(cache_file)), cache_file
    tokenizer, trainer = new_tokenizer(kind, vocab_size_limit)
    tokenizer.train_from_iterator(chunks(train_text), trainer=trainer)
    TRAIN_COUNT["n"] += 1
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(str(partial))
    partial.replace(cache_file)  # atomic: concurrent runs never read a half-written file
    return tokenizer, cache_file


def encode(tokenizer, text: str) -> Tensor:
    """(N,) token ids of `text` (encoded in line-aligned pieces, no special tokens added)."""
    ids = [i for e in tokenizer.encode_batch(chunks(text), add_special_tokens=False) for i in e.ids]
    return torch.tensor(ids, dtype=torch.long)


def encode_cached(tokenizer, text: str, tokenizer_file: Path) -> Tensor:
    """`encode`, cached as .npy next to the tokenizer file, keyed by a hash of the tokenizer and the text:
    repeated runs and sweep trials on the same data skip tokenisation."""
    digest = hashlib.sha1(tokenizer.to_str().encode() + text.encode()).hexdigest()[:16]
    cache_file = tokenizer_file.with_name(f"{tokenizer_file.stem}-{digest}.ids.npy")
    if cache_file.is_file():
        return torch.from_numpy(np.load(cache_file)).long()
    ids = encode(tokenizer, text)
    partial = cache_file.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(partial, ids.numpy().astype(np.int32))
    partial.replace(cache_file)  # atomic: concurrent runs never read a half-written file
    return ids


# ---------------------------------------------------------------------------------------------------------
# Windows


class Windows(Dataset):
    """Non-overlapping windows of a token stream: window i has inputs ids[i*L : (i+1)*L] and targets
    ids[i*L+1 : (i+1)*L+1] (stride = L, each token is predicted once; the trailing remainder is dropped).
    Items are dicts tokens (L,), targets (L,)."""

    def __init__(self, ids: Tensor, length: int, limit: int | None = None):
        count = (len(ids) - 1) // length
        count = count if limit is None else min(count, limit)
        self.length = length
        self.inputs = ids[: count * length].view(count, length)  # (N, L)
        self.targets = ids[1 : count * length + 1].view(count, length)  # (N, L)

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {"tokens": self.inputs[i], "targets": self.targets[i]}


class SlidingWindows(Dataset):
    """Press et al. 2022's sliding-window evaluation (HF's perplexity guide, "strided"): windows of `length`
    tokens moved by `stride`; the first window scores all its predictions, every later one only those not
    scored yet (its last `stride`, or fewer for the last window), so each of them has length - stride or
    more tokens of context before it. The predictions scored are exactly `Windows(ids, length)`'s, the first
    (len(ids) - 1) // length * length, each once; with stride = length the two are the same windows.
    Items: tokens (L,), targets (L,) with IGNORE_INDEX at the context-only positions, stride ()."""

    def __init__(self, ids: Tensor, length: int, stride: int):
        last = (len(ids) - 1) // length * length  # one past the last prediction scored
        ends = list(range(length, last + 1, stride))
        if ends and ends[-1] < last:
            ends.append(last)  # a last window flush with `last`, scoring the remainder (< stride)
        self.ids, self.length, self.stride = ids, length, stride
        self.ends = torch.tensor(ends, dtype=torch.long)
        self.first_scored = torch.cat([torch.zeros(1, dtype=torch.long), self.ends[:-1]]) - (self.ends - length)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        start = int(self.ends[i]) - self.length
        targets = self.ids[start + 1 : start + self.length + 1].clone()
        targets[: int(self.first_scored[i])] = IGNORE_INDEX
        return {"tokens": self.ids[start : start + self.length], "targets": targets,
                "stride": torch.tensor(self.stride)}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# DataModule


Corpus = Literal[tuple(CORPORA)]  # the corpora's names: --help lists them, a wrong one is refused when parsed


@data_options_help(
    task="the text corpus (its files under data_dir, or hub_name)",
    causal="linked from --model.causal; a causal LM needs causal attention (true)",
    tokenizer="auto (char for tinyshakespeare, word for wikitext2), char, word or bpe (byte-level BPE), learned "
    "on the training split",
    block_size="training context in tokens (the inputs of one training block)",
    eval_factors="evaluation contexts as multiples of block_size, one validation loader each; null: [1, 2, 4]",
    max_eval_tokens="keep the first N tokens of each evaluation stream (at least one window of the longest "
    "context + 1); null: all",
    eval_stride="sliding-window evaluation stride S in [1, block_size], one more loader per context (logged as "
    "val/ppl_ctx_<n>_stride_<S>); null: non-overlapping windows only",
)
class TextDataModule(FileDataModule):
    """Causal language modelling on a text corpus, evaluated at contexts longer than the training blocks.

    Training uses packed blocks of `block_size`; perplexity is evaluated at contexts block_size * f for every f
    in `eval_factors` (Press et al. 2022's extrapolation protocol).

    Training blocks: the training token stream cut into non-overlapping windows of `block_size` inputs
    (targets = inputs shifted by one, so a window reads block_size + 1 tokens), shuffled per epoch with a
    generator seeded by `seed`. Evaluation: for every factor f, the validation (test) stream cut into
    NON-OVERLAPPING windows of block_size * f (stride = window, no sliding window), every token scored
    once; `val_dataloader()`/`test_dataloader()` return one loader per factor in `eval_factors` order
    (dataloader_idx i -> context `eval_contexts[i]`; a batch's context is also its width).
    `eval_stride` S in [1, block_size] (default null: non-overlapping only, i.e. stride = window): one more
    loader per factor follows them, over `SlidingWindows` of the same contexts and stride S (Press et al.'s
    sliding evaluation; the same tokens scored, each with at least window - S tokens of context; at a
    window equal to S, the non-overlapping windows again); its batches carry `stride`, and the model logs
    them under their own names (`val/ppl_ctx_<n>_stride_<S>`).
    `max_train_blocks` keeps the first N training blocks; `max_eval_tokens` keeps the first N tokens of
    each evaluation stream (raised to one window of the longest context + 1 when smaller).
    Tokenizer "auto": char for tinyshakespeare, word for wikitext2. The tokenizer is trained on the
    training split only and cached under `tokenizer_cache_dir()` keyed by task, tokenizer, vocabulary
    limit and the data files' sizes and mtimes. `vocab_size` and `max_seq_len` (= block_size *
    max(eval_factors)) are known after `__init__` (for argument linking).
    """

    @staticmethod
    def check_options(tokenizer: str = "auto", block_size: int = 128, eval_stride: int | None = None, **_) -> None:
        """Cheap check of names and the stride, run by cli.py before anything is instantiated."""
        check_tokenizer(tokenizer)
        if eval_stride is not None and not 1 <= eval_stride <= block_size:
            raise ConfigError(f"eval_stride must be in [1, block_size={block_size}] (the training window; "
                              f"null = non-overlapping only), got {eval_stride}")  # fmt: skip

    def __init__(
        self,
        task: Corpus = "tinyshakespeare",
        causal: bool = True,
        tokenizer: Tokenizer = "auto",
        block_size: PositiveInt = 128,
        eval_factors: list[int] | None = None,
        max_train_blocks: Limit = None,
        max_eval_tokens: Limit = None,
        eval_stride: int | None = None,
        **kwargs,  # data_dir, hub_name, vocab_size_limit (FileDataModule); batch_size, seed, num_workers
    ):
        super().__init__(**kwargs)
        self.eval_stride = eval_stride
        eval_factors = [1, 2, 4] if eval_factors is None else list(eval_factors)
        _check_sizes(causal, eval_factors, self.vocab_size_limit)
        self.task, self.causal = task, causal
        self.tokenizer_kind = CORPORA[task][3] if tokenizer == "auto" else tokenizer
        self.block_size, self.eval_factors = block_size, eval_factors
        self.train_seq_len = block_size  # training inputs: positions past it are never trained
        self.eval_contexts = [block_size * f for f in eval_factors]
        self.max_train_blocks, self.max_eval_tokens = max_train_blocks, max_eval_tokens
        self.max_seq_len = max(self.eval_contexts)
        self.texts, key = read_corpus(task, self.data_dir, self.hub_name)
        self.tokenizer, self.tokenizer_file = load_or_train_tokenizer(
            self.tokenizer_kind, self.vocab_size_limit, self.texts[0], key
        )
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.val_sets = self.test_sets = None

    def _eval_sets(self, text: str) -> list[Windows | SlidingWindows]:
        ids = encode_cached(self.tokenizer, text, self.tokenizer_file)
        if self.max_eval_tokens is not None:
            ids = ids[: max(self.max_eval_tokens, self.max_seq_len + 1)]
        sliding = [SlidingWindows(ids, n, self.eval_stride) for n in self.eval_contexts] if self.eval_stride else []
        return [Windows(ids, n) for n in self.eval_contexts] + sliding

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            train_ids = encode_cached(self.tokenizer, self.texts[0], self.tokenizer_file)
            self.train_set = Windows(train_ids, self.block_size, self.max_train_blocks)
        if stage in (None, "fit", "validate") and self.val_sets is None:
            self.val_sets = self._eval_sets(self.texts[1])
        if stage in (None, "test") and self.test_sets is None:
            self.test_sets = self._eval_sets(self.texts[2])

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(s, shuffle=False) for s in self.val_sets or [None]]

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(s, shuffle=False) for s in self.test_sets or [None]]


def _check_sizes(causal: bool, eval_factors: list[int], vocab_size_limit: int) -> None:
    if not causal:
        raise ConfigError("TextDataModule is a causal LM; set --model.causal=true")
    if vocab_size_limit < len(SPECIAL_TOKENS) + 1:
        raise ConfigError(f"vocab_size_limit must be > {len(SPECIAL_TOKENS)}, got {vocab_size_limit}")
    if not eval_factors or min(eval_factors) < 1 or 1 not in eval_factors:
        raise ConfigError(f"eval_factors must be positive integers including 1, got {eval_factors}")
