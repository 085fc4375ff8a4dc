"""Every task module, by its short name (`--model=SyntheticTaskModel`): the one list that task_modules.py's
classes, cli.py's short class names and the sweep fork server's preloaded modules (tracking/warm_start.py) are
derived from. Dotted paths, so reading the registry imports no model; a new task module is one line here."""

TASK_MODULE_PATHS = {
    "SyntheticTaskModel": "lightning_modules.synthetic_model.SyntheticTaskModel",
    "CausalLMModel": "lightning_modules.causal_lm.CausalLMModel",
    "MaskedLMModel": "lightning_modules.masked_lm.MaskedLMModel",
    "SequenceClassifier": "lightning_modules.classifier.SequenceClassifier",
    "TranslationModel": "lightning_modules.translation.TranslationModel",
}


def modules_of(paths) -> tuple[str, ...]:
    """The modules defining these dotted class paths, in order."""
    return tuple(dict.fromkeys(path.rpartition(".")[0] for path in paths))
