"""What every data module is to the models and the CLI (`TaskDataModule`), the options they share, each declared
once with its type and range in the base class that holds it (`TaskDataModule`, `FileDataModule`), and the one
message for a data set the Hugging Face hub cannot give."""

from typing import Literal

import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

from datamodules.loaders import seeded_loader
from pe_core.errors import ConfigError
from pe_core.help_text import document_options
from pe_core.ranges import NonNegativeInt, PositiveInt, check_ranges

# The options the data modules share, one type each, and each a parameter of ONE base class below (TaskDataModule:
# the loader options; FileDataModule: where the text comes from and the tokenizer's size). A data module takes them
# through `**kwargs` (jsonargparse follows `super().__init__(**kwargs)`, so `--data.batch_size` etc. stay flat) and
# declares one itself only to give it another default (TranslationDataModule's and SyntheticDataModule's batch_size).
# jsonargparse reads that call from the source file: a process that imported a module before its file was edited
# (a sweep's warm-start server, sweep/warm_start.py) may no longer see them (`Option 'batch_size' is not accepted`).
BatchSize = PositiveInt
Seed = int | None  # None: the run's seed_everything (set by cli.py); 0 outside the CLI
Workers = NonNegativeInt | None  # loader processes; None: 2 on CUDA, 0 on the CPU (datamodules/loaders.py)
DataDir = str | None  # None: the data root (pe_core/data_paths.py data_root)
HubName = str | None  # load from the Hugging Face hub instead of data_dir (online)
VocabLimit = PositiveInt  # the tokenizer's vocabulary size at most

# Types of options that several modules have, each under its own name or with its own default
Limit = PositiveInt | None  # keep the first N examples / blocks / tokens (tests, quick runs); None: all
Tokenizer = Literal["auto", "char", "word", "bpe"]  # auto: the corpus's default

# What --help says of the options several data modules share (`data_options_help`); a module's own are added there.
DATA_OPTIONS = {
    "batch_size": "examples per batch (per process under DDP)",
    "seed": "seed of the data (generation, splits, shuffling); null: the run's seed_everything, so data and "
    "initialisation vary together over seeds",
    "num_workers": "data-loader worker processes; null: 2 on CUDA, 0 on the CPU",
    "data_dir": "folder holding the data files; null: the data root ($PE_DATA_ROOT, else the checkout's "
    "../shared/data)",
    "hub_name": "load this Hugging Face hub data set instead of the files under data_dir (online); null: the files",
    "vocab_size_limit": "the tokenizer's vocabulary size at most (learned on the training split)",
    "tokenizer": "bpe (byte-level BPE), char or word (whitespace-split; auto is word here), learned on the training "
    "split",
    "max_length": "longest tokenised sequence kept; longer ones are truncated",
    "max_train_examples": "keep the first N training examples (tests, quick runs); null: all",
    "max_eval_examples": "keep the first N validation and test examples (tests, quick runs); null: all",
    "max_train_blocks": "keep the first N training blocks (tests, quick runs); null: all",
}


def data_seed(seed: int | None) -> int:
    """A data module's seed: `cli.py` fills a null `data.seed` with the run's `seed_everything`, so data and
    initialisation vary together over seeds (an integer keeps the data fixed); 0 when built outside the CLI."""
    return 0 if seed is None else seed


def data_options_help(**own: str):
    """Class decorator: an `Args:` section on `__init__` describing each of its options (DATA_OPTIONS and `own`),
    which jsonargparse shows in `--help`; an option left undescribed is an error at import."""
    return document_options(DATA_OPTIONS, own)


@data_options_help()
class TaskDataModule(pl.LightningDataModule):
    """The contract between a data module, the task modules and the CLI (every class in datamodules/registry.py),
    and the loader options every data module shares, declared here once.

    Options (`--data.batch_size`, `--data.seed`, `--data.num_workers`): a subclass passes them on with
    `super().__init__(**kwargs)` and declares one itself only to change its default. `__init__` records the
    options of the whole chain of constructors (`save_hyperparameters` reads every `__init__` frame, so
    `hparams` holds each option, given or default) and checks them (`check_args`) before a subclass reads a file.

    Known after `__init__` (cli.py links them into the model before it is built, and names the run by `task`):
    `task` (the run's task name), `vocab_size`, `max_seq_len` (the longest sequence any split feeds: the
    model's `arch.max_length`), `train_seq_len` (the longest training input, or None: positions past it are
    never trained; TaskModule.setup warns about encoding parameters it leaves untrained), and the loader options
    `batch_size`, `seed` (an integer, `data_seed`) and `num_workers`. A module may add more attributes that
    cli.py links when present (`classifier_task`, `num_labels`, `label_names`; SyntheticDataModule's
    `train_max_len`, which SyntheticTaskModel reads).

    Loaders: seeded loaders (datamodules/loaders.py) over `train_set`, `val_set` and `test_set`, which `setup`
    fills, batched by `collate_fn` (a staticmethod, or None for the default collation); a module with other
    evaluation sets (TextDataModule: one per context) overrides them.

    `check_args(**init_args)` is run by cli.py on the parsed arguments before anything is built: the ranges the
    signatures declare (`check_ranges`, every class of the chain), then the module's own cheap checks
    (`check_options`: registry names, combinations of options).
    """

    task: str
    vocab_size: int
    max_seq_len: int
    train_seq_len: int | None = None
    batch_size: int
    seed: int
    num_workers: int | None
    collate_fn = None

    def __init__(self, batch_size: BatchSize = 32, seed: Seed = None, num_workers: Workers = None):
        super().__init__()
        self.save_hyperparameters()
        self.check_args(**self.hparams)
        self.batch_size, self.seed, self.num_workers = batch_size, data_seed(seed), num_workers
        self.train_set = self.val_set = self.test_set = None

    @classmethod
    def check_args(cls, **init_args) -> None:
        """One-line ConfigError for an argument outside its declared range or a bad name or combination."""
        for klass in cls.__mro__:  # the module's own options first, then those of its bases
            if issubclass(klass, TaskDataModule) and "__init__" in vars(klass):
                check_ranges(klass.__init__, init_args, "--data.")
        cls.check_options(**init_args)

    @staticmethod
    def check_options(**init_args) -> None:
        """The module's own cheap checks (names, combinations of options); none by default."""

    def _loader(self, dataset: Dataset | None, shuffle: bool) -> DataLoader:
        return seeded_loader(
            dataset, batch_size=self.batch_size, shuffle=shuffle, seed=self.seed, num_workers=self.num_workers,
            collate_fn=self.collate_fn,
        )  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)


@data_options_help()
class FileDataModule(TaskDataModule):
    """The options every data module of text (datamodules/text.py, masked_lm.py, glue.py, text_classification.py,
    translation.py) shares, declared here once: its files lie under `data_dir` (None: the data root,
    pe_core/data_paths.py `data_root`) unless `hub_name` names a Hugging Face hub data set to load instead, and
    its tokenizer, learned on the training split, keeps at most `vocab_size_limit` tokens. Options a module
    has under its own name or default (`tokenizer`, `max_length`, `max_train_*`, `max_eval_*`) stay its own."""

    def __init__(self, data_dir: DataDir = None, hub_name: HubName = None, vocab_size_limit: VocabLimit = 8000,
                 **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.data_dir, self.hub_name, self.vocab_size_limit = data_dir, hub_name, vocab_size_limit


def hub_error(hub_name: str, error: BaseException, instead: str) -> ConfigError:
    """The one-line error for a data set the Hugging Face hub could not give (offline, a wrong name, ...):
    its first line, and `instead`, how to read local files."""
    reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
    return ConfigError(f"cannot load {hub_name!r} from the Hugging Face hub ({reason}); {instead}")
