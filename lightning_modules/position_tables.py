"""Position tables from files or pre-trained Hugging Face models (PE-Study's probes and transfer setting).

PE-Study (Wang & Chen 2020) probes and transfers the learned absolute position embeddings of BERT,
RoBERTa and GPT-2. `read_table(source)` returns a (positions, width) float32 table from
- a `.npy` array or a `.pt` file holding one tensor (loaded with `weights_only=True`), or
- a Hugging Face model folder or hub name, through `transformers` (safetensors weights are preferred,
  `.bin` ones are read with `weights_only`): GPT-2 `wpe`, BERT `embeddings.position_embeddings`, RoBERTa
  the same table without its first `padding_idx + 1` rows (RoBERTa numbers positions from
  padding_idx + 1, so those rows are never used for a token; 514 rows -> 512 positions).
"""

import logging
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pe_core.errors import ConfigError

TABLE_SUFFIXES = (".pt", ".npy")
# model_type -> attribute path of the position embedding in transformers' AutoModel
HF_TABLES = {
    "gpt2": "wpe",
    "bert": "embeddings.position_embeddings",
    "roberta": "embeddings.position_embeddings",
}
PADDING_OFFSET = ("roberta",)  # families whose positions start at padding_idx + 1


def load_table_file(path: str, option: str = "init_from") -> Tensor:
    """A saved (positions, width) table: a .pt file holding one tensor, or a .npy array; float32."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{option}: no file {path!r}")
    if file.suffix not in TABLE_SUFFIXES:
        raise ConfigError(f"{option}: {path!r} is neither a .pt nor a .npy file")
    try:
        table = torch.from_numpy(np.load(file)) if file.suffix == ".npy" else torch.load(file, weights_only=True)
    except Exception as error:  # noqa: BLE001 - an unreadable or unsafe file is one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ConfigError(f"{option}: cannot read {path!r} as a table ({reason})") from None
    if not isinstance(table, Tensor) or table.dim() != 2:
        raise ConfigError(f"{option}: {path!r} must hold one 2-D (positions, width) table")
    table = table.detach().float().cpu()
    check_finite_rows(table.numpy(), f"{option}: {path!r}")
    return table


def check_finite_rows(table: np.ndarray, what: str) -> None:
    """A position table with NaN or infinite values is a one-line ConfigError naming its first such row."""
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        raise ConfigError(
            f"{what} holds NaN or infinite values (first in row {bad[0][0]}); a position table must be finite"
        )


@contextmanager
def quiet_hub_logs():
    """Only errors from huggingface_hub and transformers while loading (restored afterwards)."""
    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "transformers")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def hf_position_table(name_or_dir: str, option: str = "--hf-model") -> Tensor:
    """The position table (positions, width) of a GPT-2, BERT or RoBERTa model (folder or hub name)."""
    try:
        from transformers import AutoConfig, AutoModel
    except ImportError:
        raise ConfigError(f"{option} needs `transformers`: pip install -e '.[hf]'") from None
    local = Path(name_or_dir).is_dir()
    try:
        with quiet_hub_logs():  # retries and warnings of an unreachable hub would bury the one-line error
            config = AutoConfig.from_pretrained(name_or_dir)
    except Exception as error:  # noqa: BLE001 - unreachable hub or no model there: one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        where = "the folder" if local else "the Hugging Face hub"
        raise ConfigError(f"{option}: cannot load {name_or_dir!r} from {where} ({reason}); pass a local model "
                          "folder (one saved with save_pretrained: config.json and weights)") from None  # fmt: skip
    family = config.model_type
    if family not in HF_TABLES:
        raise ConfigError(f"{option}: {name_or_dir!r} is a {family!r} model; supported: {', '.join(HF_TABLES)}")
    with quiet_hub_logs():
        model = AutoModel.from_pretrained(name_or_dir, config=config)
    table = model.get_submodule(HF_TABLES[family]).weight.detach().float().cpu()
    if family in PADDING_OFFSET:
        table = table[model.embeddings.padding_idx + 1 :]
    return table.clone()


def is_table_file(source: str) -> bool:
    return Path(source).suffix in TABLE_SUFFIXES


def read_table(source: str, option: str = "init_from") -> Tensor:
    """A (positions, width) table from a .pt/.npy file or a Hugging Face model folder or hub name."""
    if is_table_file(source):
        return load_table_file(source, option)
    if Path(source).is_file():
        raise ConfigError(f"{option}: {source!r} is neither a .pt nor a .npy file nor a model folder")
    return hf_position_table(source, option)
