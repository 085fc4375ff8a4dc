"""torch.compile (opt-in `compile=true`): every registered encoding compiles on CPU and matches eager (inductor
for one encoding of each mechanism, dynamo + AOTAutograd with the eager backend for the rest: INDUCTOR_CHECKED).

Tiny models (C 16, 2 layers) so that compiling dominates; `dynamic=True` so one compile serves both
lengths. Dynamo's caches are reset per test: all encodings share the Block code, and past the recompile
limit dynamo would silently fall back to eager.

Claims of docs/benchmarks.md covered here:
- "--compile compiles both models' blocks (torch.compile, opt-in; every task module also takes --model.compile=true,
  and every registered encoding compiles and matches eager)": test_compiled_forward_matches_eager,
  test_compiled_training_step_matches_eager, test_task_modules_compile_flag,
  test_translation_compiles_encoder_and_decoder_blocks, test_compiled_model_keeps_its_state_dict_keys
  (the benchmark's --compile flag: test_presets.py)
"""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

from lightning_modules.arch import ArchConfig
from lightning_modules.causal_lm import CausalLMModel
from lightning_modules.classifier import SequenceClassifier
from lightning_modules.compiling import NOT_COMPILABLE, check_compilable, compile_blocks
from lightning_modules.encodings import ENCODINGS, PRESETS
from lightning_modules.masked_lm import MaskedLMModel
from lightning_modules.synthetic_model import SyntheticTaskModel
from lightning_modules.transformer import Transformer
from lightning_modules.translation import TranslationModel
from pe_core.errors import ConfigError

pytestmark = pytest.mark.slow  # generates and builds C++ kernels: a few seconds per encoding on one core

VOCAB, LENGTHS = 13, (5, 11)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def tiny(name: str, causal: bool = True, **options) -> Transformer:
    torch.manual_seed(0)
    arch = ArchConfig(name, encoding_options=options, dim=16, depth=2, num_heads=2, ffn_mult=2,
                      vocab_size=VOCAB, max_length=16)  # fmt: skip
    return Transformer(arch, causal=causal)


def tokens(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(length))


# Inductor (generated C++ kernels, ~4 s an encoding on a cold CI core) for one encoding of each mechanism: a
# rotation, an SDPA bias, a bucketed table, a matrix exponential, Householder products, an MLP over the logits,
# an attention of its own. Every other encoding goes through dynamo and AOTAutograd with the eager backend
# (`aot_eager`: the same graph capture, functionalisation and decompositions, ~1.5 s), so a graph break, a
# recompile or an untraceable op in any encoding still fails here.
INDUCTOR_CHECKED = ("rope", "alibi", "t5_bias", "liere", "path", "dape_alibi", "stick_breaking")


@pytest.mark.parametrize("name", [n for n in ENCODINGS if n not in PRESETS])  # a preset is its encoding's code
def test_compiled_forward_matches_eager(name):
    if name in NOT_COMPILABLE:
        with pytest.raises(ConfigError, match=name):
            compile_blocks(tiny(name))
        return
    backend = "inductor" if name in INDUCTOR_CHECKED else "aot_eager"
    eager, compiled = tiny(name).eval(), compile_blocks(tiny(name).eval(), dynamic=True, backend=backend)
    with torch.no_grad():
        for length in LENGTHS:
            torch.testing.assert_close(compiled(tokens(length)), eager(tokens(length)), atol=1e-5, rtol=1e-5)
    assert counters["frames"]["ok"] > 0, "nothing was compiled"
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])  # one graph (+ one if dynamic)


@pytest.mark.parametrize(
    ("name", "causal", "options"),
    [("t5_bias", True, {}), ("tupe_r", False, {}), ("shaw", True, {"values": True})],
)
def test_compiled_training_step_matches_eager(name, causal, options):
    """Backward too, through a bias that needs grad (SDPA's math path) and Shaw's own attention."""
    eager, compiled = tiny(name, causal, **options).train(), compile_blocks(tiny(name, causal, **options).train())
    x = tokens(LENGTHS[1])
    for model in (eager, compiled):
        F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    for (key, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=key)


def test_default_options_recompile_once_for_a_new_length():
    """`compile=true` uses torch.compile's defaults: static first, one dynamic recompile at the next length."""
    eager, compiled = tiny("rope").eval(), compile_blocks(tiny("rope").eval())
    with torch.no_grad():
        for length in (*LENGTHS, 7):
            torch.testing.assert_close(compiled(tokens(length)), eager(tokens(length)), atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.parametrize("module", [SyntheticTaskModel, CausalLMModel, MaskedLMModel, SequenceClassifier])
def test_task_modules_compile_flag(module, monkeypatch):
    sizes = {"arch": ArchConfig(dim=16, depth=2, num_heads=2, encoding="rope")}
    plain, compiled = module(**sizes), module(**sizes, compile=True)
    assert all(block._compiled_call_impl is None for block in plain.transformer.blocks)
    assert all(block._compiled_call_impl is not None for block in compiled.transformer.blocks)
    assert compiled.hparams.compile and list(compiled.state_dict()) == list(plain.state_dict())
    monkeypatch.setitem(NOT_COMPILABLE, "rope", "a reason")
    with pytest.raises(ConfigError, match="rope"):
        module(**sizes, compile=True)


def test_translation_compiles_encoder_and_decoder_blocks():
    sizes = {
        "arch": ArchConfig(encoding="sinusoidal", dim=16, depth=1, num_heads=2, vocab_size=300),
        "decoder_depth": 1,
    }
    compiled = TranslationModel(**sizes, compile=True)
    blocks = [*compiled.encoder.blocks, *compiled.decoder.blocks]
    assert len(blocks) == 2 and all(block._compiled_call_impl is not None for block in blocks)
    assert all(block._compiled_call_impl is None for block in TranslationModel(**sizes).encoder.blocks)


def test_compiled_model_keeps_its_state_dict_keys():
    eager, compiled = tiny("rope"), compile_blocks(tiny("rope"))
    assert list(compiled.state_dict()) == list(eager.state_dict())
    compiled.load_state_dict(eager.state_dict())


def test_check_compilable(monkeypatch):
    check_compilable("rope")
    monkeypatch.setitem(NOT_COMPILABLE, "rope", "a reason")
    with pytest.raises(ConfigError, match="cannot serve encoding 'rope' \\(a reason\\)"):
        compile_blocks(tiny("rope"))
