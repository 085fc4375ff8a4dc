"""Every task module, for the callers that ask which of a run's parameters are encodings (compare, reseed)."""

import importlib

from lightning_modules.registry import TASK_MODULE_PATHS


def _load(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


TASK_MODULES = tuple(_load(path) for path in TASK_MODULE_PATHS.values())  # the registry's classes, imported


def encoding_parameters() -> set[str]:
    """The sweep / config keys that name an encoding in some task module, in both spellings jsonargparse
    accepts (`model.arch.encoding`, `model.init_args.arch.encoding`, `model.decoder_encoding`, ...)."""
    paths = {name for module in TASK_MODULES for name, _ in module.ENCODING_ARGS.values()}
    return {f"model.{p}" for p in paths} | {f"model.init_args.{p}" for p in paths}


CLASS_PATHS = dict(zip(TASK_MODULE_PATHS.values(), TASK_MODULES))  # dotted class path -> class


def run_encoding_of(config: dict) -> str | None:
    """A run's encoding read from its resolved config (`model.class_path` and `init_args`), as its task
    module declares it; None for a model class that is not one of ours."""
    model = config.get("model") or {}
    module = CLASS_PATHS.get(model.get("class_path"))
    return module.encoding_of(model.get("init_args") or {}) if module else None
