"""Checks of the trainer arguments, the seed and the linked model arguments, run once after parsing (cli.py), so
a bad value is one line before anything is built, seeded or written. The model's own ranges are declared with
its options (`Annotated` types from pe_sweeps/ranges.py) and checked by the parser."""

from pe_sweeps.errors import ConfigError

LINKED = {
    "arch.max_length": "data.max_seq_len (the data's longest sequence)",
    "arch.vocab_size": "the data's vocabulary",
}


def check_trainer_args(trainer_args: dict, fit: bool = True) -> None:
    """A run that would train for zero steps is a mistake, not a finished run (-1 / None: no limit). A `fit`
    with no limit at all (max_steps -1, max_epochs and max_time unset) would train Lightning's 1000 epochs."""
    steps = trainer_args.get("max_steps")
    if steps is not None and steps != -1 and (not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"--trainer.max_steps must be >= 1 (or -1 for no step limit), got {steps!r}")
    epochs = trainer_args.get("max_epochs")
    if epochs is not None and epochs != -1 and (not isinstance(epochs, int) or epochs < 1):
        raise ConfigError(f"--trainer.max_epochs must be >= 1 (or -1 for no epoch limit), got {epochs!r}")
    if fit and steps in (None, -1) and epochs is None and trainer_args.get("max_time") is None:
        raise ConfigError(
            f"--trainer.max_steps={steps} (no step limit) needs --trainer.max_epochs N (or -1: until stopped) or "
            "--trainer.max_time; without them Lightning would train 1000 epochs"
        )
    check_val_interval(trainer_args.get("val_check_interval"))


def check_val_interval(interval) -> None:
    """An integer >= 1 (training batches) or a fraction in (0, 1] of an epoch; 0 divided by zero in Lightning.
    A time ("DD:HH:MM:SS", a dict or timedelta) is left to Lightning."""
    if not isinstance(interval, (int, float)):
        return
    if isinstance(interval, bool) or (interval < 1 if isinstance(interval, int) else not 0 < interval <= 1):
        raise ConfigError(
            "--trainer.val_check_interval must be an integer >= 1 (training batches) or a fraction in (0, 1] "
            f"of an epoch, got {interval!r}"
        )


def check_seed(seed) -> None:
    """--seed_everything: an integer numpy can seed with (0 to 2**32 - 1), or true for a random one."""
    from lightning_fabric.utilities.seed import max_seed_value, min_seed_value

    if isinstance(seed, int) and not isinstance(seed, bool) and not min_seed_value <= seed <= max_seed_value:
        raise ConfigError(
            f"--seed_everything must be an integer in [{min_seed_value}, {max_seed_value}] (or true for a random "
            f"seed), got {seed}"
        )


def given_arch_keys(argv: list[str]) -> set[str]:
    """The `--model.arch.*` fields given on the command line (`--model.arch.dim=64`, `--model.arch '{dim: 64}'`)."""
    import yaml

    keys = set()
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        for prefix in ("--model.arch", "--model.init_args.arch"):
            if key.startswith(prefix + "."):
                keys.add(key[len(prefix) + 1 :].split(".")[0])
            elif key == prefix:
                value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                try:
                    loaded = yaml.safe_load(value)
                except yaml.YAMLError:
                    loaded = None
                keys |= set(loaded) if isinstance(loaded, dict) else set()
    return keys


def check_not_linked(argv: list[str]) -> None:
    """Model arguments the data sets (cli.py's links) would silently replace a value given on the line."""
    from dataclasses import fields

    from lightning_modules.arch import ArchConfig

    moved = {f.name for f in fields(ArchConfig)}
    for arg in argv:
        key = arg.split("=", 1)[0].removeprefix("--model.").removeprefix("init_args.")
        if arg.startswith("--model.") and key in moved:  # the keys before ArchConfig existed
            raise ConfigError(f"--model.{key} is now --model.arch.{key} (one architecture config: --model.help CLASS)")
        for key, source in LINKED.items():
            if arg.split("=", 1)[0] in (f"--model.{key}", f"--model.init_args.{key}"):
                raise ConfigError(f"--model.{key} is set from {source} and cannot be given; change the data instead")
