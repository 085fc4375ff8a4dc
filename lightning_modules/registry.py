"""Every task module, by its short name (`--model=SyntheticTaskModel`): the one list that task_modules.py's
classes, cli.py's short class names and the sweep fork server's preloaded modules (sweep/warm_start.py) are
derived from. Dotted paths, so reading the registry imports no model; a new task module is one line here.

`ENCODING_ARGS` declares, per task module, which init arguments hold an encoding and its options (per role:
dotted paths into the arguments); the class attribute of the same name is read from here, so compare,
reseed and run naming learn a run's encoding parameters without importing torch."""

TASK_MODULE_PATHS = {
    "SyntheticTaskModel": "lightning_modules.synthetic_model.SyntheticTaskModel",
    "CausalLMModel": "lightning_modules.causal_lm.CausalLMModel",
    "MaskedLMModel": "lightning_modules.masked_lm.MaskedLMModel",
    "SequenceClassifier": "lightning_modules.classifier.SequenceClassifier",
    "TranslationModel": "lightning_modules.translation.TranslationModel",
}

ONE_ENCODING = {"model": ("arch.encoding", "arch.encoding_options")}
ENCODING_ARGS: dict[str, dict[str, tuple[str, str]]] = dict.fromkeys(TASK_MODULE_PATHS, ONE_ENCODING) | {
    "TranslationModel": {  # run encoding "<encoder>+<decoder>"
        "encoder": ("arch.encoding", "arch.encoding_options"),
        "decoder": ("decoder_encoding", "decoder_encoding_options"),
    },
}


def dotted_get(values, path: str):
    """`values["a"]["b"]` for path "a.b", on dicts and jsonargparse Namespaces alike; None where absent."""
    for part in path.split("."):
        values = values.get(part) if hasattr(values, "get") else None
    return values


def encoding_parameters() -> set[str]:
    """The sweep / config keys that name an encoding in some task module, in both spellings jsonargparse
    accepts (`model.arch.encoding`, `model.init_args.arch.encoding`, `model.decoder_encoding`, ...)."""
    paths = {name for roles in ENCODING_ARGS.values() for name, _ in roles.values()}
    return {f"model.{p}" for p in paths} | {f"model.init_args.{p}" for p in paths}


def encoding_keys() -> list[str]:
    """The config paths (without `init_args`) holding an encoding or its options in some task module."""
    return sorted({f"model.{p}" for roles in ENCODING_ARGS.values() for pair in roles.values() for p in pair})


def run_encoding_of(config: dict) -> str | None:
    """A run's encoding read from its resolved config (`model.class_path` and `init_args`), as its task
    module declares it (e.g. "rope", "rope3.none" for a per-layer schedule, "learned+rope" for translation);
    None for a model class not ours."""
    model = config.get("model") or {}
    short = {path: name for name, path in TASK_MODULE_PATHS.items()}.get(model.get("class_path"))
    if short is None:
        return None
    from lightning_modules.schedule_label import encoding_label

    init_args = model.get("init_args") or {}
    arch = dotted_get(init_args, "arch")
    return "+".join(
        encoding_label(dotted_get(init_args, name), arch if name.startswith("arch.") else None)
        for name, _ in ENCODING_ARGS[short].values()
    )


def modules_of(paths) -> tuple[str, ...]:
    """The modules defining these dotted class paths, in order."""
    return tuple(dict.fromkeys(path.rpartition(".")[0] for path in paths))
