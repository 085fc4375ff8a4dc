"""What every data module is to the models and the CLI (`TaskDataModule`), the options they share, declared once
with their types and ranges, and the one message for a data set the Hugging Face hub cannot give."""

from typing import Literal

import pytorch_lightning as pl

from pe_sweeps.errors import ConfigError
from pe_sweeps.ranges import NonNegativeInt, PositiveInt, check_ranges

# The options the data modules share, one declaration each: a data module's signature spells them with these
# types (jsonargparse reads each signature: `--data.batch_size` etc. stay flat) and `TaskDataModule.check_args`
# holds every module to the ranges they declare.
BatchSize = PositiveInt
Seed = int | None  # None: the run's seed_everything (set by cli.py); 0 outside the CLI
Workers = NonNegativeInt | None  # loader processes; None: 2 on CUDA, 0 on the CPU (datamodules/loaders.py)
Limit = PositiveInt | None  # keep the first N examples / blocks / tokens (tests, quick runs); None: all
VocabLimit = PositiveInt  # the tokenizer's vocabulary size at most
DataDir = str | None  # None: the data root (pe_sweeps/layout.py data_root)
HubName = str | None  # load from the Hugging Face hub instead of data_dir (online)
Tokenizer = Literal["auto", "char", "word", "bpe"]  # auto: the corpus's default


def data_seed(seed: int | None) -> int:
    """A data module's seed: `cli.py` fills a null `data.seed` with the run's `seed_everything`, so data and
    initialisation vary together over seeds (an integer keeps the data fixed); 0 when built outside the CLI."""
    return 0 if seed is None else seed


class TaskDataModule(pl.LightningDataModule):
    """The contract between a data module, the task modules and the CLI (every class in datamodules/registry.py).

    Known after `__init__` (cli.py links them into the model before it is built, and names the run by `task`):
    `task` (the run's task name), `vocab_size`, `max_seq_len` (the longest sequence any split feeds: the
    model's `arch.max_length`), `train_seq_len` (the longest training input, or None: positions past it are
    never trained; TaskModule.setup warns about encoding parameters it leaves untrained), and the loader options
    `batch_size`, `seed` (an integer, `data_seed`) and `num_workers`. A module may add more attributes that
    cli.py links when present (`classifier_task`, `num_labels`, `label_names`; SyntheticDataModule's
    `train_max_len`, which SyntheticTaskModel reads).

    `check_args(**init_args)` is run by cli.py on the parsed arguments before anything is built: the ranges the
    signature declares (`check_ranges`), then the module's own cheap checks (`check_options`: registry names,
    combinations of options); a module's `__init__` runs it too, so direct construction fails the same way.
    """

    task: str
    vocab_size: int
    max_seq_len: int
    train_seq_len: int | None = None
    batch_size: int
    seed: int
    num_workers: int | None

    def __init__(self, batch_size: BatchSize, seed: Seed, num_workers: Workers):
        super().__init__()
        self.batch_size, self.seed, self.num_workers = batch_size, data_seed(seed), num_workers

    @classmethod
    def check_args(cls, **init_args) -> None:
        """One-line ConfigError for an argument outside its declared range or a bad name or combination."""
        check_ranges(cls.__init__, init_args, "--data.")
        cls.check_options(**init_args)

    @staticmethod
    def check_options(**init_args) -> None:
        """The module's own cheap checks (names, combinations of options); none by default."""


def hub_error(hub_name: str, error: BaseException, instead: str) -> ConfigError:
    """The one-line error for a data set the Hugging Face hub could not give (offline, a wrong name, ...):
    its first line, and `instead`, how to read local files."""
    reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
    return ConfigError(f"cannot load {hub_name!r} from the Hugging Face hub ({reason}); {instead}")
