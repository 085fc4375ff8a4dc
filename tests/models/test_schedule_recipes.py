"""Per-layer RoPE base and window in the layer schedule: Gemma 3's local:global recipe and SWAN-GPT's interleave.

Claims covered here:
- "`rope_global` is rope with base 1M (Gemma 3's global layers)": test_gemma3_schedule_reads_back_base_and_window
- "configs/gemma3_local_global.yaml and configs/swan_gpt.yaml build and train": test_recipe_config_trains
"""

from pathlib import Path

import pytest
import torch
import yaml
from test_transformer import DIM, HEADS, MAX_LEN, VOCAB

from lightning_modules.arch import ArchConfig
from lightning_modules.transformer import Transformer

ROOT = Path(__file__).resolve().parents[2]


def test_gemma3_schedule_reads_back_base_and_window():
    """6 layers, 5 local (window 1024, base 10k) : 1 global (full, base 1M), read back from the built model."""
    arch = ArchConfig("rope5.rope_global", dim=DIM, depth=6, num_heads=HEADS, vocab_size=VOCAB,
                      max_length=MAX_LEN, window=[1024] * 5 + [None])  # fmt: skip
    model = Transformer(arch, causal=True)
    bases = [model.layer_encoding(i).base for i in range(6)]
    assert bases == [10_000.0] * 5 + [1_000_000.0] and model.windows == [1024] * 5 + [None]
    local, glob = model.layer_encoding(0), model.layer_encoding(5)
    torch.testing.assert_close(glob.inv_freq, 1_000_000.0 ** (-torch.arange(0, 8, 2).float() / 8))
    assert local is model.layer_encoding(4) and local is not glob  # one instance per distinct base


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("config, encoding", [("gemma3_local_global.yaml", "rope5.rope_global"),
                                              ("swan_gpt.yaml", "rope3.none")])  # fmt: skip
def test_recipe_config_trains(config, encoding, tiny_fit_args):
    from helpers import fit

    arch = yaml.safe_load((ROOT / "configs" / config).read_text())["model"]["init_args"]["arch"]
    record = fit([*tiny_fit_args, f"--config=configs/{config}", "--model.arch.dim=32", "--model.arch.num_heads=4"])
    assert record.status == "finished" and record.encoding == encoding
    resolved = record.config["model"]["init_args"]["arch"]
    assert (resolved["depth"], resolved["window"]) == (arch["depth"], arch["window"])
