"""Every task module, for the callers that ask which of a run's parameters are encodings (compare, reseed)."""

from lightning_modules.causal_lm import CausalLMModel
from lightning_modules.classifier import SequenceClassifier
from lightning_modules.masked_lm import MaskedLMModel
from lightning_modules.synthetic_model import SyntheticTaskModel
from lightning_modules.translation import TranslationModel

TASK_MODULES = (SyntheticTaskModel, CausalLMModel, MaskedLMModel, SequenceClassifier, TranslationModel)


def encoding_parameters() -> set[str]:
    """The sweep / config keys that name an encoding in some task module, in both spellings jsonargparse
    accepts (`model.arch.encoding`, `model.init_args.arch.encoding`, `model.decoder_encoding`, ...)."""
    paths = {name for module in TASK_MODULES for name, _ in module.ENCODING_ARGS.values()}
    return {f"model.{p}" for p in paths} | {f"model.init_args.{p}" for p in paths}


CLASS_PATHS = {f"{m.__module__}.{m.__qualname__}": m for m in TASK_MODULES}  # dotted class path -> class


def run_encoding_of(config: dict) -> str | None:
    """A run's encoding read from its resolved config (`model.class_path` and `init_args`), as its task
    module declares it; None for a model class that is not one of ours."""
    model = config.get("model") or {}
    module = CLASS_PATHS.get(model.get("class_path"))
    return module.encoding_of(model.get("init_args") or {}) if module else None
