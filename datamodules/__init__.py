"""Data modules: synthetic length-generalisation tasks."""

from datamodules.synthetic import TASKS, SyntheticDataModule

__all__ = ["TASKS", "SyntheticDataModule"]
