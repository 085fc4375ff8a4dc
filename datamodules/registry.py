"""Every data module, by its short name (`--data=GLUEDataModule`): the one list cli.py's short class names and
the sweep fork server's preloaded modules (sweep/warm_start.py) are derived from. Dotted paths, so reading
the registry imports no data module; a new data module (a `TaskDataModule`) is one line here."""

DATA_MODULES = {
    "SyntheticDataModule": "datamodules.synthetic.SyntheticDataModule",
    "TextDataModule": "datamodules.text.TextDataModule",
    "MaskedLMDataModule": "datamodules.masked_lm.MaskedLMDataModule",
    "GLUEDataModule": "datamodules.glue.GLUEDataModule",
    "TextClassificationDataModule": "datamodules.text_classification.TextClassificationDataModule",
    "TranslationDataModule": "datamodules.translation.TranslationDataModule",
}
