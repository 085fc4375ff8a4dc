"""Data modules: synthetic length-generalisation tasks and text corpora for causal LM."""

from datamodules.synthetic import TASKS, SyntheticDataModule
from datamodules.text import CORPORA, TextDataModule

__all__ = ["CORPORA", "TASKS", "SyntheticDataModule", "TextDataModule"]
