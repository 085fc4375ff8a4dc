"""Data modules: synthetic length-generalisation tasks, text corpora (causal and masked LM), GLUE, Multi30k.

Every one is a `TaskDataModule` (datamodules/base.py), listed in datamodules/registry.py. Importing the package
imports none of them (the registry is read by processes that never load data): `CORPORA`, `TASKS`,
`SyntheticDataModule` and `TextDataModule` are imported when first asked for."""

import importlib

LAZY = {"CORPORA": "datamodules.text", "TextDataModule": "datamodules.text", "TASKS": "datamodules.synthetic",
        "SyntheticDataModule": "datamodules.synthetic"}  # fmt: skip
__all__ = list(LAZY)


def __getattr__(name: str):
    if name not in LAZY:
        raise AttributeError(f"module 'datamodules' has no attribute {name!r}")
    return getattr(importlib.import_module(LAZY[name]), name)
