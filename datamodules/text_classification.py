"""Text classification from TSV, CSV, JSON-lines or `label text` files, any number of classes; PE-Study's six sets
as presets.

A file has a text column (optionally a second one for sentence pairs) and a label column; labels are
strings or integers, the label set is the training split's (sorted: numerically when every label is an
integer, else as strings; id = index) and is linked to the classifier (`labels` in its hparams, so the
checkpoint and the run record keep it). Splits: given as files (`val_file`, `test_file`), or cut from the
training file with `split_seed` (stratified, sklearn): the test set either a `test_fraction` or, with
`folds` = K, fold `fold` of a stratified K-fold (SentEval's protocol for sets without a split; SentEval
picks its regulariser by an inner K-fold, a neural model needs one validation set instead: a stratified
`val_fraction` of the remaining folds). The validation cut is drawn by `val_seed`: by default the run's data
seed (`data_seed`: with `data.seed: null`, the run's seed_everything), so each seed is scored on its own cut and
the spread over seeds includes the evaluation set's sampling; `val_seed: split_seed` (or an integer) keeps one
cut for every seed, as the reproduction sweeps (sweeps/repro_pe_study_cls*.yaml) declare. The test fold stays
`split_seed`'s: the protocol's untouched test set, reported at the end (`cli.py test`, `--run.test_at_end`),
never selected on. (The other data modules: the synthetic tasks draw every split from the data seed, masked-LM
evaluation masks follow it; language modelling, GLUE and translation score the data set's own validation split
or a fixed contiguous cut of one text, which a random cut would leak into, so theirs stays fixed.)

Files go through `datasets`' csv/json builders (cached there); a `label_text` file (`LABEL TEXT` a line, no
header: TREC's `.all` files) through its text builder and `.map`.

Presets (`preset`): PE-Study's (Wang & Chen 2020) MR, CR, SUBJ, MPQA, TREC, SST. MR, CR, SUBJ and MPQA read
`<data_dir>/pe_study_cls/<NAME>/all.tsv` (SentEval's files, no official split: 10-fold CV, SentEval's
seed 1111); TREC and SST have no local copy (their `offline` line says what to pass). With `hub_name`
set (e.g. the preset's `hub`, not verified offline) the set comes from the Hugging Face hub instead:
its train / validation / test splits where present, the missing ones cut as above.

Bad files are one-line ConfigErrors naming the file and the row (rows count from 1 after the header):
empty file, missing column, malformed row, empty value, a label the training split does not have.
Inputs are `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` as in datamodules/glue.py. Shape legend: B batch, L length.
"""

import codecs
import csv
import hashlib
import json
import logging
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from datamodules.base import FileDataModule, Limit, Tokenizer, data_options_help, hub_error
from datamodules.glue import Examples, encode_examples_cached
from datamodules.text import check_tokenizer, load_or_train_tokenizer, resolve_dir
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt

FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".all": "label_text"}
# what each format is, for the errors that list them
FORMAT_HELP = (
    "formats (--data.format): tsv (tab-separated, unquoted), csv (comma-separated, quoted), jsonl (a JSON object a "
    "line), label_text (a label, a space, the text, no header: TREC's .all files)"
)
SENTEVAL_SEED = 1111  # SentEval's k-fold seed


@dataclass(frozen=True)
class Preset:
    """Where a named set lives and how it is split."""

    local: str | None  # file under data_dir, or None (no local copy)
    hub: str  # suggested --data.hub_name (online only)
    hub_columns: tuple[str, str]  # (text, label) columns of the hub copy
    folds: int | None  # k-fold protocol for a single local file
    offline: str  # what to do offline without a local copy
    text_column: str = "sentence"
    label_column: str = "label"


def _local(name: str) -> str:
    return f"pe_study_cls/{name}/all.tsv"


PRESETS = {
    "mr": Preset(_local("MR"), "cornell-movie-review-data/rotten_tomatoes", ("text", "label"), 10, ""),
    "cr": Preset(_local("CR"), "SetFit/SentEval-CR", ("text", "label"), 10, ""),
    "subj": Preset(_local("SUBJ"), "SetFit/subj", ("text", "label"), 10, ""),
    "mpqa": Preset(_local("MPQA"), "jxm/mpqa", ("sentence", "label"), 10, ""),
    "trec": Preset(None, "CogComp/trec", ("text", "coarse_label"), None,
                   "TREC (6 coarse classes) has no local copy: offline pass --data.train_file=TREC.train.all "
                   "--data.test_file=TREC.test.all (a label, a space, the text a line: --data.format=label_text, "
                   "which the .all suffix selects), or TSVs with columns sentence, label"),
    "sst": Preset(None, "SetFit/sst2", ("text", "label"), None,
                  "SST (binary, sentence level) has no local copy: offline pass --data.train_file, "
                  "--data.val_file and --data.test_file (TSVs with columns sentence, label: train/dev/test)"),
}  # fmt: skip


# ---- reading files --------------------------------------------------------------------------------


def file_format(path: Path, fmt: str | None) -> str:
    if fmt is None:
        fmt = FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise ConfigError(f"{path}: cannot tell the format from the suffix {path.suffix!r}; {FORMAT_HELP}")
    if fmt not in ("tsv", "csv", "jsonl", "label_text"):
        raise ConfigError(f"unknown format {fmt!r}; {FORMAT_HELP}")
    return fmt


def csv_options(fmt: str) -> dict:
    """TSVs are read unquoted (SentEval and GLUE write none); CSVs with standard double-quote quoting."""
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    return {"delimiter": "\t" if fmt == "tsv" else ",", "quoting": quoting}


def python_encoding(encoding: str) -> str:
    """The codec a file is read with: `utf-8` reads a leading byte-order mark as one (utf-8-sig); an unknown
    name is one line."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise ConfigError(f"--data.encoding {encoding!r} is not a text encoding; e.g. utf-8, latin-1, cp1252") from None
    return "utf-8-sig" if name == "utf-8" else name


def decode_error(path: Path, error: UnicodeDecodeError, encoding: str, fmt: str) -> ConfigError:
    """One line naming the file, the line and byte at fault and the encoding tried."""
    raw = path.read_bytes()
    line = raw[: error.start].count(b"\n") + 1
    return ConfigError(
        f"{path}: line {line} is not {encoding} text (byte 0x{raw[error.start]:02x} at offset {error.start}); set "
        f"--data.encoding to the file's encoding (e.g. latin-1, cp1252) or re-save it as UTF-8 ({fmt} file)"
    )


def first_malformed_row(path: Path, fmt: str, width: int | None, header: bool, encoding: str) -> str | None:
    """`row N: problem` of the first row the builders could not parse (found with the standard library), or
    `no data rows`; None when the standard library finds nothing wrong."""
    with open(path, encoding=encoding, newline="") as handle:
        if fmt == "jsonl":
            for n, line in enumerate((x for x in handle if x.strip()), 1):
                try:
                    if not isinstance(json.loads(line), dict):
                        return f"row {n}: not a JSON object"
                except json.JSONDecodeError as error:
                    return f"row {n}: malformed JSON ({error.msg})"
            return None
        rows = csv.reader(handle, **csv_options(fmt))
        if header:
            width = len(next(rows, []))
        n = 0
        for n, row in enumerate(rows, 1):
            if row and len(row) != width:
                return f"row {n}: {len(row)} fields, expected {width}"
    return "no data rows" if n == 0 else None


def read_table(
    path: Path, fmt: str, header: bool, column_names: list[str] | None, encoding: str = "utf-8"
) -> dict[str, list]:
    """{column: values} of one file through datasets' csv/json/text builder, decoded with `encoding` (a BOM and
    CRLF line ends are read as text); a one-line ConfigError naming the file (and the row or line when one is at
    fault, and the formats) when it is missing, empty, malformed or not in that encoding. `label_text` files
    have two columns, named by `column_names` (label first, then text)."""
    import datasets

    if not path.is_file():
        raise ConfigError(f"data file not found: {path}")
    shown, encoding = encoding, python_encoding(encoding)
    try:
        text = path.read_text(encoding=encoding)
    except UnicodeDecodeError as error:
        raise decode_error(path, error, shown, fmt) from None
    if not text.strip():
        raise ConfigError(f"{path}: empty file")
    if fmt == "label_text":
        return read_label_text(path, column_names, encoding)
    if fmt == "jsonl":
        kwargs = {"encoding": encoding}
    else:
        with open(path, encoding=encoding, newline="") as handle:
            first = next(csv.reader(handle, **csv_options(fmt)))
        names = first if header else (column_names or [str(i) for i in range(len(first))])
        strings = datasets.Features({name: datasets.Value("string") for name in names})
        kwargs = {
            "sep": csv_options(fmt)["delimiter"], "quoting": csv_options(fmt)["quoting"], "encoding": encoding,
            "keep_default_na": False, "skip_blank_lines": False, "features": strings,
            **({} if header else {"header": None, "column_names": names}),
        }  # fmt: skip
    try:
        table = load_rows("json" if fmt == "jsonl" else "csv", path, **kwargs)
    except Exception as error:  # noqa: BLE001 - any parse failure becomes one line naming the file
        width = None if fmt == "jsonl" or header else len(kwargs["column_names"])
        where = first_malformed_row(path, fmt, width, header, encoding)
        cause = error.__cause__ or error
        reason = where or (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
        raise ConfigError(f"{path}: {reason} ({fmt} file); {FORMAT_HELP}") from None
    if len(table) == 0:
        raise ConfigError(f"{path}: no data rows")
    return table.to_dict()


@contextmanager
def quiet_datasets():
    """datasets' logging and progress bars off for a while (the builders log their parse errors, ours is the one
    line; a file of a few thousand rows needs no progress bar), then as they were."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    logger = logging.getLogger("datasets")
    level, shown = logger.level, not are_progress_bars_disabled()
    logger.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():  # HF_DATASETS_DISABLE_PROGRESS_BARS=0 keeps them, with a warning
        warnings.simplefilter("ignore")
        disable_progress_bars()
    try:
        yield
    finally:
        logger.setLevel(level)
        if shown:
            enable_progress_bars()


def load_rows(builder: str, path: Path, **kwargs):
    """The rows of one file as a `datasets.Dataset`, read by datasets' `builder` (csv, json, text; cached there)."""
    import datasets

    with quiet_datasets():
        return datasets.load_dataset(builder, data_files={"rows": str(path)}, split="rows", **kwargs)


def read_label_text(path: Path, names: list[str], encoding: str) -> dict[str, list]:
    """{label column: labels, text column: texts} of a file of `LABEL TEXT` lines (TREC's .all files:
    `5 How far is it from Denver to Aspen ?`): read by datasets' text builder (one row a line), each line split
    at its first whitespace by `.map`; a line without a label and a text is one line naming the file and line."""
    label, text = names

    def split(batch: dict[str, list]) -> dict[str, list]:
        parts = [line.split(None, 1) for line in batch["text"]]
        return {label: [p[0] if len(p) == 2 else "" for p in parts], text: [p[1].strip() if len(p) == 2 else ""
                                                                               for p in parts]}  # fmt: skip

    lines = load_rows("text", path, encoding=encoding)
    with quiet_datasets():
        table = lines.map(split, batched=True, remove_columns=["text"])
    rows = table.to_dict()
    for n, (y, x) in enumerate(zip(rows[label], rows[text]), 1):
        if not (y and x):
            raise ConfigError(f"{path}: line {n}: not a label, a space and a text (label_text file); {FORMAT_HELP}")
    return rows


def column(table: dict[str, list], name: str, path: Path) -> list[str]:
    """One column's values as stripped strings; a missing column, a missing or an empty value is one line."""
    if name not in table:
        raise ConfigError(f"{path}: no column {name!r}; columns: {', '.join(table)}")
    values = []
    for n, value in enumerate(table[name], 1):
        text = "" if value is None else str(value).strip()
        if not text:
            raise ConfigError(f"{path}: row {n}: empty or missing {name!r} (malformed row?)")
        values.append(text)
    return values


def sorted_labels(labels: list[str]) -> list[str]:
    """The label set: numeric order when every label is an integer, else string order."""
    unique = set(labels)
    if all(label.lstrip("-").isdigit() for label in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def label_ids(labels: list[str], names: list[str], path: str, train: str) -> list[float]:
    """Class ids of `labels`; a label the training split lacks is one line naming its row."""
    index = {name: i for i, name in enumerate(names)}
    for n, label in enumerate(labels, 1):
        if label not in index:
            raise ConfigError(f"{path}: row {n}: label {label!r} does not occur in the training split ({train}); "
                              f"labels: {', '.join(names)}")  # fmt: skip
    return [float(index[label]) for label in labels]


# ---- splits ---------------------------------------------------------------------------------------


def cut(labels: list[str], rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rest, held out): a stratified `fraction` of `rows` held out, chosen by `seed`."""
    from sklearn.model_selection import train_test_split

    try:
        return train_test_split(rows, test_size=fraction, random_state=seed, stratify=[labels[i] for i in rows])
    except ValueError as error:
        raise ConfigError(f"cannot cut a stratified {fraction:.0%} split: {str(error).splitlines()[0]}") from None


def kfold(labels: list[str], folds: int, fold: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of fold `fold` of a stratified, shuffled K-fold (SentEval's protocol)."""
    from sklearn.model_selection import StratifiedKFold

    try:
        splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels))
    except ValueError as error:
        raise ConfigError(f"cannot cut {folds} stratified folds: {str(error).splitlines()[0]}") from None
    return splits[fold]


# ---- the data module ------------------------------------------------------------------------------


Split = tuple[list[tuple[str, ...]], list[str]]  # texts (1- or 2-tuples), raw labels


PresetName = Literal[tuple(PRESETS)]  # --help lists them, a wrong one is refused when parsed
FileFormat = Literal["tsv", "csv", "jsonl", "label_text"]


@data_options_help(
    preset="one of PE-Study's sets (its files, columns and split protocol); null: give train_file",
    train_file="the training file (tsv, csv or jsonl); with a preset, null: the preset's",
    val_file="the validation file; null: a stratified val_fraction of the training rows",
    test_file="the test file; null: fold `fold` of `folds`, or a stratified test_fraction of the training rows",
    format="the files' format: tsv, csv, jsonl, or label_text (a label, a space, the text a line, no header: "
    "TREC's .all files); null: from the file suffix (.tsv, .csv, .jsonl, .json, .all)",
    header="the files' first row names the columns",
    column_names='header-less files: the column names; null: "0", "1", ...',
    encoding="the files' text encoding, e.g. latin-1 for TREC as distributed (a BOM is read as one)",
    text_column='the column of the text; null: the preset\'s, else "sentence"',
    text_pair_column="the column of a sentence pair's second text; null: single sentences",
    label_column='the column of the label; null: the preset\'s, else "label"',
    folds="K-fold protocol: the test set is fold `fold` of K stratified folds (presets MR, CR, SUBJ, MPQA: 10); "
    "null: the preset's, else test_file or test_fraction",
    fold="which of the `folds` folds is the test set (0 to folds - 1)",
    val_fraction="stratified share of the training rows held out for validation when there is no val_file, in (0, 1)",
    test_fraction="stratified share of the training rows held out for testing without test_file or folds, in (0, 1)",
    split_seed="seed of the test cut and folds (and of a val_seed: split_seed cut); null: 1111 (SentEval's) for "
    "presets, else 0",
    val_seed="seed of the validation cut (no val_file): data_seed (the run's data seed: each seed its own cut), "
    "split_seed (one cut for every seed, PE-Study's) or an integer",
    max_length="longest input in tokens, [CLS] and [SEP] included (texts truncated longest-first)",
)
class TextClassificationDataModule(FileDataModule):
    """Any text-classification set as batches `tokens` (B, L), `padding_mask` (B, L), `labels` (B,).

    `task`, `classifier_task`, `num_labels`, `label_names`, `vocab_size` and `max_seq_len` are known after
    `__init__` for the CLI's links. Column, file and split options left None take the preset's value.
    The tokenizer is trained on the training split only and cached (keyed by that split's text).
    """

    collate_fn = staticmethod(Examples.collate)

    @staticmethod
    def check_options(preset: str | None = None, tokenizer: str = "bpe", train_file: str | None = None,
                   folds: int | None = None, fold: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1,
                   **_) -> None:  # fmt: skip
        check_tokenizer(tokenizer)
        if preset is None and train_file is None:
            raise ConfigError(f"give --data.train_file or a --data.preset ({', '.join(PRESETS)})")
        if folds is not None and not (folds >= 2 and 0 <= fold < folds):
            raise ConfigError(f"need folds >= 2 and 0 <= fold < folds, got folds={folds}, fold={fold}")
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 < value < 1:
                raise ConfigError(f"{name} must be in (0, 1), got {value}")

    def __init__(
        self,
        preset: PresetName | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        format: FileFormat | None = None,
        header: bool = True,
        column_names: list[str] | None = None,
        encoding: str = "utf-8",
        text_column: str | None = None,
        text_pair_column: str | None = None,
        label_column: str | None = None,
        folds: int | None = None,
        fold: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        split_seed: int | None = None,
        val_seed: int | Literal["data_seed", "split_seed"] = "data_seed",
        tokenizer: Tokenizer = "bpe",
        max_length: PositiveInt = 128,
        max_train_examples: Limit = None,
        max_eval_examples: Limit = None,
        **kwargs,  # data_dir, hub_name (e.g. the preset's `hub`), vocab_size_limit; batch_size, seed, num_workers
    ):
        super().__init__(**kwargs)
        spec = PRESETS.get(preset)
        self.text_columns = [text_column or (spec.text_column if spec else "sentence")] + (
            [text_pair_column] if text_pair_column else []
        )
        self.label_column = label_column or (spec.label_column if spec else "label")
        self.folds = folds if folds is not None else (spec.folds if spec and not (test_file or self.hub_name) else None)
        self.fold = fold
        self.split_seed = split_seed if split_seed is not None else (SENTEVAL_SEED if spec else 0)
        self.val_seed = {"data_seed": self.seed, "split_seed": self.split_seed}.get(val_seed, val_seed)
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.max_length = max_length
        if self.hub_name:
            splits, train_source = self._read_hub(self.hub_name, spec, text_column, label_column, self.data_dir)
        else:
            splits, train_source = self._read_files(spec, train_file, val_file, test_file, self.data_dir)
        self.task = preset or "cls-" + Path(train_file).stem
        self.classifier_task = self.task  # source of cli.py's link to the classifier (its metrics)
        self.label_names = sorted_labels(splits["train"][1])
        self.num_labels = len(self.label_names)
        if self.num_labels < 2:
            raise ConfigError(f"{train_source}: the training split has one label ({self.label_names[0]!r}); need 2+")
        limits = {"train": max_train_examples, "val": max_eval_examples, "test": max_eval_examples}
        self.splits = {
            name: (texts[: limits[name]], label_ids(labels, self.label_names, where, train_source)[: limits[name]])
            for name, (texts, labels, where) in splits.items()
        }
        train_text = "\n".join(" ".join(t) for t in self.splits["train"][0]) + "\n"
        key = hashlib.sha1(train_text.encode()).hexdigest()[:12]
        self.tokenizer, _ = load_or_train_tokenizer(
            tokenizer, self.vocab_size_limit, train_text, f"cls-{self.task}-{key}"
        )
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.max_seq_len = max_length

    # -- sources

    def _read_file(self, path: Path, fmt: str | None) -> Split:
        fmt, names = file_format(path, fmt), self.hparams.column_names
        if fmt == "label_text":  # two fields a line: the label, then the text
            if len(self.text_columns) > 1:
                raise ConfigError(f"{path}: a label_text file holds one text a line; drop --data.text_pair_column")
            names = [self.label_column, self.text_columns[0]]
        table = read_table(path, fmt, self.hparams.header, names, self.hparams.encoding)
        texts = list(zip(*(column(table, name, path) for name in self.text_columns)))
        return texts, column(table, self.label_column, path)

    def _read_files(self, spec, train_file, val_file, test_file, data_dir) -> tuple[dict, str]:
        if train_file is None and spec.local is None:
            raise ConfigError(spec.offline)
        train_path = resolve_dir(train_file) if train_file else resolve_dir(data_dir) / spec.local
        if not train_path.is_file():
            hint = "" if train_file else f"; point --data.data_dir at the folder holding {Path(spec.local).parent}/"
            raise ConfigError(f"data file not found: {train_path}{hint}")
        fmt = self.hparams.format
        given = {"train": self._read_file(train_path, fmt)}
        for name, file in (("val", val_file), ("test", test_file)):
            if file:
                given[name] = self._read_file(resolve_dir(file), fmt)
        where = {"train": str(train_path), "val": str(val_file), "test": str(test_file)}
        return self._complete(given, where, str(train_path)), str(train_path)

    def _read_hub(self, hub_name, spec, text_column, label_column, data_dir) -> tuple[dict, str]:
        loaded = load_hub(hub_name, spec, data_dir)
        default_text, default_label = spec.hub_columns if spec and hub_name == spec.hub else ("text", "label")
        texts = [text_column or default_text] + self.text_columns[1:]
        label = label_column or default_label
        given = {}
        for name, options in (("train", ["train"]), ("val", ["validation", "dev"]), ("test", ["test"])):
            split = next((s for s in options if s in loaded), None)
            if split is None:
                continue
            columns = loaded[split].column_names
            for wanted in texts + [label]:
                if wanted not in columns:
                    raise ConfigError(f"{hub_name} ({split}): no column {wanted!r}; columns: {', '.join(columns)}; "
                                      "set --data.text_column / --data.label_column")  # fmt: skip
            feature = loaded[split].features[label]
            raw = loaded[split][label]
            labels = [feature.int2str(v) if hasattr(feature, "int2str") else str(v) for v in raw]
            given[name] = (list(zip(*([str(v) for v in loaded[split][c]] for c in texts))), labels)
        if "train" not in given:
            raise ConfigError(f"{hub_name}: no train split; splits: {', '.join(loaded)}")
        where = {name: f"{hub_name} ({name})" for name in ("train", "val", "test")}
        return self._complete(given, where, where["train"]), where["train"]

    def _complete(self, given: dict[str, Split], where: dict[str, str], source: str) -> dict:
        """{split: (texts, labels, where)}: the given splits, and the missing ones cut from the training rows."""
        texts, labels = given["train"]
        rows = np.arange(len(labels))
        if "test" not in given:
            if self.folds:
                rows, test = kfold(labels, self.folds, self.fold, self.split_seed)
                where["test"] = f"{source} (fold {self.fold} of {self.folds})"
            else:
                rows, test = cut(labels, rows, self.test_fraction, self.split_seed)
                where["test"] = f"{source} (held-out {self.test_fraction:.0%})"
            given["test"] = ([texts[i] for i in test], [labels[i] for i in test])
        if "val" not in given:
            rows, val = cut(labels, rows, self.val_fraction, self.val_seed)
            given["val"] = ([texts[i] for i in val], [labels[i] for i in val])
            where["val"] = f"{source} (held-out {self.val_fraction:.0%} of the training rows)"
        # the cuts return their rows shuffled (by their seeds): keep that order, so `max_train_examples` takes a
        # random subset even of a file sorted by class (SentEval files list one class after the other)
        given["train"] = ([texts[i] for i in rows], [labels[i] for i in rows])
        return {name: (*given[name], where[name]) for name in ("train", "val", "test")}

    # -- batches

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set, self.val_set, self.test_set = (
                Examples(encode_examples_cached(self.tokenizer, texts, self.max_length), labels)
                for texts, labels in (self.splits[name] for name in ("train", "val", "test"))
            )


def load_hub(hub_name: str, spec: Preset | None, data_dir: str):
    """A hub data set (DatasetDict); unreachable -> one line saying how to read local files instead."""
    try:
        import datasets

        return datasets.load_dataset(hub_name)
    except Exception as error:  # noqa: BLE001 - any failure to reach or read the hub is a config problem
        local = (
            spec.offline if spec and spec.local is None else f"drop --data.hub_name to read files under {data_dir!r}"
        )
        raise hub_error(hub_name, error, f"offline: {local}") from None
