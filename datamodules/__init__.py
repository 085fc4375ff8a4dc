"""Data modules: synthetic length-generalisation tasks, text corpora (causal and masked LM), GLUE, Multi30k."""

from datamodules.synthetic import TASKS, SyntheticDataModule
from datamodules.text import CORPORA, TextDataModule

__all__ = ["CORPORA", "TASKS", "SyntheticDataModule", "TextDataModule"]
