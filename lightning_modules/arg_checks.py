"""Ranges of the model and trainer arguments every task shares, checked once after parsing (cli.py), so
a bad size or rate is one line before anything is built, seeded or written."""

import math

from lightning_modules.errors import ConfigError

AT_LEAST_ONE = ("dim", "num_heads", "depth", "encoder_depth", "decoder_depth", "ffn_mult", "max_length", "beam_size",
                "max_decode_len")  # fmt: skip
NOT_NEGATIVE = ("weight_decay", "warmup_steps", "label_smoothing")
FRACTIONS = ("dropout", "warmup_ratio", "label_smoothing")  # in [0, 1)
LINKED = {"max_length": "data.max_seq_len (the data's longest sequence)", "vocab_size": "the data's vocabulary"}


def _number(option: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"--{option} must be a finite number, got {value!r}")
    return value


def check_model_args(model_args: dict) -> None:
    """Sizes >= 1, rates in range, a finite positive learning rate."""
    for key in AT_LEAST_ONE:
        if model_args.get(key) is not None and (not isinstance(model_args[key], int) or model_args[key] < 1):
            raise ConfigError(f"--model.{key} must be an integer >= 1, got {model_args[key]!r}")
    if model_args.get("lr") is not None and _number("model.lr", model_args["lr"]) <= 0:
        raise ConfigError(f"--model.lr must be a finite number > 0, got {model_args['lr']!r}")
    for key in NOT_NEGATIVE:
        if model_args.get(key) is not None and _number(f"model.{key}", model_args[key]) < 0:
            raise ConfigError(f"--model.{key} must be >= 0, got {model_args[key]!r}")
    for key in FRACTIONS:
        if model_args.get(key) is not None and not 0 <= _number(f"model.{key}", model_args[key]) < 1:
            raise ConfigError(f"--model.{key} must be in [0, 1), got {model_args[key]!r}")


def check_trainer_args(trainer_args: dict) -> None:
    """A run that would train for zero steps is a mistake, not a finished run (-1 / None: no limit)."""
    steps = trainer_args.get("max_steps")
    if steps is not None and steps != -1 and (not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"--trainer.max_steps must be >= 1 (or -1 for no step limit), got {steps!r}")
    epochs = trainer_args.get("max_epochs")
    if epochs is not None and epochs != -1 and (not isinstance(epochs, int) or epochs < 1):
        raise ConfigError(f"--trainer.max_epochs must be >= 1 (or -1 for no epoch limit), got {epochs!r}")


def check_not_linked(argv: list[str]) -> None:
    """Model arguments the data sets (cli.py's links) would silently replace a value given on the line."""
    for arg in argv:
        for key, source in LINKED.items():
            if arg.split("=", 1)[0] in (f"--model.{key}", f"--model.init_args.{key}"):
                raise ConfigError(f"--model.{key} is set from {source} and cannot be given; change the data instead")
