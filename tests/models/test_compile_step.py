"""`compile_step` (issue 47.2): a training step's forward + loss compiled as one graph, CUDA graphs only on CUDA.

Claims: the compiled step's loss and gradients equal eager's (tiny model, backend "eager": dynamo's capture and
AOTAutograd's backward without code generation); asking for CUDA graphs (`mode="reduce-overhead"`) off CUDA is one
ConfigError naming the choices, and `fixed_shapes` picks CUDA graphs on CUDA only.
"""

import pytest
import torch

from lightning_modules.arch import ArchConfig
from lightning_modules.compiling import compile_step
from lightning_modules.synthetic_model import SyntheticTaskModel
from pe_core.errors import ConfigError


def tiny(seed: int = 0) -> SyntheticTaskModel:
    torch.manual_seed(seed)
    return SyntheticTaskModel(ArchConfig(encoding="rope", dim=16, depth=1, num_heads=2, vocab_size=12, max_length=10))


def batch() -> dict:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, 12, (2, 8), generator=generator)
    return {"tokens": tokens, "targets": tokens.roll(-1, 1), "padding_mask": torch.ones(2, 8, dtype=torch.bool)}


def test_reduce_overhead_off_cuda_is_a_config_error():
    with pytest.raises(ConfigError, match="reduce-overhead.*needs a CUDA device.*choose from"):
        compile_step(lambda b: b, "cpu", mode="reduce-overhead")


def test_fixed_shapes_pick_cuda_graphs_on_cuda_only(monkeypatch):
    modes = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, **options: modes.append((mode, options)) or fn)
    compile_step(lambda b: b, "cpu", fixed_shapes=True)
    compile_step(lambda b: b, "cuda", fixed_shapes=True)
    compile_step(lambda b: b, "cuda")
    assert modes == [(None, {"dynamic": False}), ("reduce-overhead", {"dynamic": False}), (None, {})]


@pytest.mark.slow
def test_compiled_step_matches_eager():
    torch.compiler.reset()
    eager, compiled = tiny(), tiny()
    step = compile_step(lambda b: compiled.loss(compiled(b), b["targets"]), "cpu", backend="eager")
    losses = []
    for fn in (lambda b: eager.loss(eager(b), b["targets"]), step):
        loss = fn(batch())
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1])
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
