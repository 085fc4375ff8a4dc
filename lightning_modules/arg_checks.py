"""Checks of the trainer arguments, the seed and the linked model arguments, run once after parsing (cli.py), so
a bad value is one line before anything is built, seeded or written. The model's own ranges are declared with
its options (`Annotated` types from pe_core/ranges.py) and checked by the parser."""

from pe_core.errors import ConfigError

LINKED = {
    "arch.max_length": "data.max_seq_len (the data's longest sequence)",
    "arch.vocab_size": "the data's vocabulary",
}


MAX_COUNT = 10**9  # steps, epochs, accumulated batches: far beyond any run, far below an overflow


def check_count(option: str, value, unlimited: str | None = None) -> None:
    """An integer in [1, MAX_COUNT] (or -1 where `unlimited` says what -1 means)."""
    if value is None or (unlimited and value == -1 and not isinstance(value, bool)):
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_COUNT:
        or_unlimited = f" (or -1 for {unlimited})" if unlimited else ""
        raise ConfigError(f"--trainer.{option} must be an integer in [1, {MAX_COUNT}]{or_unlimited}, got {value!r}")


def check_trainer_args(trainer_args: dict, fit: bool = True) -> None:
    """A run that would train for zero steps is a mistake, not a finished run (-1 / None: no limit). A `fit`
    with no limit at all (max_steps -1, max_epochs and max_time unset) would train Lightning's 1000 epochs."""
    steps = trainer_args.get("max_steps")
    check_count("max_steps", steps, "no step limit")
    check_count("max_epochs", trainer_args.get("max_epochs"), "no epoch limit")
    check_count("accumulate_grad_batches", trainer_args.get("accumulate_grad_batches"))  # 0: ZeroDivisionError
    if fit and steps in (None, -1) and trainer_args.get("max_epochs") is None and trainer_args.get("max_time") is None:
        raise ConfigError(
            f"--trainer.max_steps={steps} (no step limit) needs --trainer.max_epochs N (or -1: until stopped) or "
            "--trainer.max_time; without them Lightning would train 1000 epochs"
        )
    check_val_interval(trainer_args.get("val_check_interval"), trainer_args.get("check_val_every_n_epoch", 1))


def check_val_interval(interval, every_n_epochs=1) -> None:
    """An integer >= 1 (training batches) or a fraction in (0, 1] of an epoch; 0 divided by zero in Lightning.
    A fraction needs epochs (`check_val_every_n_epoch` not null: Lightning refuses it otherwise). A time
    ("DD:HH:MM:SS", a dict or timedelta) is left to Lightning."""
    if not isinstance(interval, (int, float)):
        return
    if isinstance(interval, float) and every_n_epochs is None:
        raise ConfigError(
            "--trainer.val_check_interval must be an integer >= 1 (training batches) when "
            "--trainer.check_val_every_n_epoch is null; a fraction of an epoch needs check_val_every_n_epoch >= 1, "
            f"got {interval!r}"
        )
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
