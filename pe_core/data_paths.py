"""Where the data modules read their files and keep their tokenizers: the two environment variables they honour
and the data root they fall back to."""

import os
from pathlib import Path

from pe_core.errors import ConfigError

DATA_ROOT_ENV = "PE_DATA_ROOT"  # default of every data module's --data.data_dir (`data_root`)
TOKENIZER_CACHE_ENV = "PE_TOKENIZER_CACHE"  # overrides the tokenizer cache folder (datamodules/text.py)
CHECKOUT = Path(__file__).resolve().parents[1]  # a source checkout's root


def data_root() -> Path:
    """Where data modules look for their files unless given --data.data_dir: $PE_DATA_ROOT, else the
    `shared/data` folder beside a source checkout (the layout CI uses); one line naming both when neither is set."""
    if os.environ.get(DATA_ROOT_ENV):
        return Path(os.environ[DATA_ROOT_ENV]).expanduser()
    beside = CHECKOUT.parent / "shared" / "data"
    if beside.is_dir():
        return beside
    raise ConfigError(
        f"no data folder: set {DATA_ROOT_ENV} or --data.data_dir to the folder holding the data sets "
        f"(the checkout's default, {beside}, does not exist)"
    )
