"""Every task module class, imported (the registry's dotted paths resolved): for callers that need the classes
themselves. Which parameters are encodings is read from lightning_modules/registry.py without importing them."""

import importlib

from lightning_modules.registry import TASK_MODULE_PATHS


def _load(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


TASK_MODULES = tuple(_load(path) for path in TASK_MODULE_PATHS.values())  # the registry's classes, imported
CLASS_PATHS = dict(zip(TASK_MODULE_PATHS.values(), TASK_MODULES))  # dotted class path -> class
