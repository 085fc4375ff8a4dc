"""The options the data modules share (datamodules/base.py): declared once, in `TaskDataModule` (batch_size, seed,
num_workers) and `FileDataModule` (data_dir, hub_name, vocab_size_limit), taken by every module through
`**kwargs`, and still offered by the CLI with the same names and defaults, checked against their ranges and recorded
in the module's hparams (checkpoints and run records read them)."""

import inspect
from pydoc import locate

import pytest
from jsonargparse import ArgumentParser

from datamodules import text
from datamodules.base import FileDataModule, TaskDataModule
from datamodules.registry import DATA_MODULES
from pe_core.errors import ConfigError

LOADER_OPTIONS = {"batch_size": 32, "seed": None, "num_workers": None}  # TaskDataModule's
FILE_OPTIONS = {"data_dir": None, "hub_name": None, "vocab_size_limit": 8000}  # FileDataModule's
FILE_MODULES = {"TextDataModule", "MaskedLMDataModule", "GLUEDataModule", "TextClassificationDataModule",
                "TranslationDataModule"}  # fmt: skip
OWN_BATCH_SIZE = {"SyntheticDataModule": 64, "TranslationDataModule": 64}  # the modules that change its default

# cheap constructions (the shared options left at their defaults unless named in GIVEN)
BUILD = {
    "SyntheticDataModule": {},
    "TextDataModule": {},
    "GLUEDataModule": {"task": "mrpc", "max_train_examples": 40},
    "TextClassificationDataModule": {"preset": "mr", "max_train_examples": 40},
    "TranslationDataModule": {"max_train_examples": 8, "vocab_size_limit": 300, "seed": 5},
}


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    """One tokenizer cache for this module, never the user's."""
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))


def expected_shared(name: str) -> dict:
    """{option: default} of the shared options the CLI must offer for data module `name`."""
    options = {**LOADER_OPTIONS, **(FILE_OPTIONS if name in FILE_MODULES else {})}
    return {**options, "batch_size": OWN_BATCH_SIZE.get(name, 32)}


def init_parameters(cls) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(cls.__init__).parameters)


def test_the_bases_declare_the_shared_options_with_these_defaults():
    assert {k: p.default for k, p in init_parameters(TaskDataModule).items() if k != "self"} == LOADER_OPTIONS
    file_options = {k: p.default for k, p in init_parameters(FileDataModule).items() if k not in ("self", "kwargs")}
    assert file_options == FILE_OPTIONS


@pytest.mark.parametrize("name", DATA_MODULES)
def test_the_cli_offers_every_shared_option_with_its_default(name):
    cls = locate(DATA_MODULES[name])
    assert issubclass(cls, FileDataModule) == (name in FILE_MODULES)
    parser = ArgumentParser()
    parser.add_class_arguments(cls, "data")
    defaults = vars(parser.get_defaults().data)
    assert {k: defaults.get(k, "missing") for k in expected_shared(name)} == expected_shared(name)


@pytest.mark.parametrize("name", DATA_MODULES)
def test_a_module_declares_a_shared_option_only_to_change_its_default(name):
    own = init_parameters(locate(DATA_MODULES[name]))
    shared = {**LOADER_OPTIONS, **FILE_OPTIONS}
    assert {k: own[k].default for k in shared if k in own} == (
        {"batch_size": OWN_BATCH_SIZE[name]} if name in OWN_BATCH_SIZE else {}
    )
    assert "kwargs" in own and own["kwargs"].kind is inspect.Parameter.VAR_KEYWORD  # the rest, from the bases


@pytest.mark.parametrize("name", BUILD)
def test_hparams_record_every_shared_option(name):
    module = locate(DATA_MODULES[name])(**BUILD[name])
    expected = {**expected_shared(name), **{k: v for k, v in BUILD[name].items() if k in expected_shared(name)}}
    assert {k: module.hparams.get(k, "missing") for k in expected} == expected
    assert (module.batch_size, module.seed, module.num_workers) == (expected["batch_size"], expected["seed"] or 0,
                                                                    None)  # fmt: skip
    if name in FILE_MODULES:
        assert (module.data_dir, module.hub_name, module.vocab_size_limit) == tuple(expected[k] for k in FILE_OPTIONS)


@pytest.mark.parametrize(
    "name, option, value",
    [("SyntheticDataModule", "batch_size", 0), ("TextDataModule", "num_workers", -1),
     ("GLUEDataModule", "vocab_size_limit", 0), ("TranslationDataModule", "batch_size", 0)],
)  # fmt: skip
def test_a_shared_option_out_of_range_is_one_line(name, option, value):
    cls = locate(DATA_MODULES[name])
    with pytest.raises(ConfigError, match=rf"^--data\.{option} must be an integer >= \d, got {value}$"):
        cls.check_args(**{option: value})
    with pytest.raises(ConfigError, match=rf"^--data\.{option} must be"):
        cls(**{option: value})  # built directly: the same check, before any file is read
