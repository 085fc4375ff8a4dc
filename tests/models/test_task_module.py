"""The architecture config and the declared encodings every task module shares (no training)."""

import os

import pytest
import torch

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import PRESETS, build_encoding
from lightning_modules.registry import ENCODING_ARGS, TASK_MODULE_PATHS, encoding_parameters, run_encoding_of
from lightning_modules.synthetic_model import SyntheticTaskModel
from lightning_modules.task_modules import TASK_MODULES
from lightning_modules.translation import TranslationModel
from pe_sweeps.layout import new_run_dir, parent_run_dir

TINY = ArchConfig("alibi", dim=16, depth=1, num_heads=2, vocab_size=12, max_length=8)


def test_hparams_keep_the_architecture_as_plain_data_and_load_back(tmp_path):
    model = SyntheticTaskModel(TINY, causal=False)
    assert model.hparams["arch"] == TINY.as_dict() and isinstance(model.hparams["arch"], dict)
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, path)
    saved = torch.load(path, weights_only=True)["hyper_parameters"]  # plain data only
    again = SyntheticTaskModel(**saved)
    assert again.arch == TINY and again.arch.first_difference(TINY) is None
    assert ArchConfig.from_hparams(saved) == TINY
    legacy = TINY.as_dict() | {"lr": 1e-3}  # hyper-parameters written before `arch` existed
    assert ArchConfig.from_hparams(legacy) == TINY
    assert TINY.first_difference(ArchConfig(**(TINY.as_dict() | {"dim": 32}))) == "dim"


def test_every_task_module_declares_its_encodings():
    assert all(m.ENCODING_ARGS for m in TASK_MODULES)
    # each class declares what the registry (read without importing torch) says it does
    assert {m.__name__: m.ENCODING_ARGS for m in TASK_MODULES} == {n: ENCODING_ARGS[n] for n in TASK_MODULE_PATHS}
    assert {"model.arch.encoding", "model.init_args.arch.encoding", "model.decoder_encoding"} <= encoding_parameters()
    assert not {p for p in encoding_parameters() if p.endswith("_options")}
    args = {"arch": {"encoding": "learned", "encoding_options": {"init_scale": 1.0}}, "decoder_encoding": "rope"}
    assert TranslationModel.declared_encodings(args) == {
        "arch.encoding": ("learned", {"init_scale": 1.0}),
        "decoder_encoding": ("rope", {}),
    }
    assert TranslationModel.encoding_of(args) == "learned+rope"
    assert SyntheticTaskModel(TINY).run_encoding == "alibi"
    config = {"model": {"class_path": "lightning_modules.translation.TranslationModel", "init_args": args}}
    assert run_encoding_of(config) == "learned+rope" and run_encoding_of({"model": {"class_path": "x.Y"}}) is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_is_its_encoding_with_other_defaults(name):
    base, defaults = PRESETS[name]
    common = {"dim": 16, "num_heads": 2, "max_length": 8, "causal": False, "cls_first": True}
    preset = build_encoding(name, **common)
    assert type(preset) is type(build_encoding(base, **common))
    assert all(getattr(preset, key) == value for key, value in defaults.items())


def test_ddp_ranks_find_the_run_folder_of_the_process_that_started_them(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    made = new_run_dir(tmp_path, "copy-rope-s0")
    made.mkdir(parents=True)
    monkeypatch.setattr(os, "getppid", lambda: 4242)
    assert parent_run_dir(tmp_path, "copy-rope-s0") == made
    monkeypatch.setattr(os, "getppid", lambda: 1)
    assert parent_run_dir(tmp_path, "copy-rope-s0") is None
