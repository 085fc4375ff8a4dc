"""benchmarks/throughput.py's rows for the 2026 encodings and options (issue 46): each has an x-transformers twin
(ratio reported) or a note saying why not, and the option rows (sinks, QK-norm, continuous positions) build the
models they name on both sides."""

from pathlib import Path

import pytest
import torch
from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]
WAVE_2026 = ["grape_m", "grape_m_ctx", "grape_a", "grape_ap", "rope_clipped", "fope", "rope_decoupled", "comrope",
             "liere", "cable", "nope_head_scale", "rope_global"]  # fmt: skip
OPTION_ROWS = ["rope+sinks", "rope+qk_norm", "rope+continuous"]


throughput = load_module("benchmarks/throughput.py")
TINY = "--dim 16 --depth 1 --heads 2 --length 8 --batch 2 --device cpu --threads 1".split()


@pytest.mark.parametrize("name", WAVE_2026 + OPTION_ROWS)
def test_a_2026_row_has_a_twin_or_says_why_not(name):
    args = throughput.parse_args([*TINY, "--encodings", name])
    assert args.encodings == [name]
    assert throughput.xt_kwargs(name, 8) is not None or throughput.note(name, 8), name


def test_the_option_rows_build_what_they_name():
    args = throughput.parse_args([*TINY, "--encodings", ",".join(OPTION_ROWS)])
    names = {row: {n for n, _ in throughput.build("ours", row, args).named_parameters()} for row in OPTION_ROWS}
    assert any(n.endswith("attn.sinks") for n in names["rope+sinks"])
    assert any(n.endswith("attn.q_norm.weight") for n in names["rope+qk_norm"])
    continuous = throughput.build("ours", "rope+continuous", args).transformer
    assert any(e.continuous_positions and e.randomize_positions == 16 for e in continuous.modules()
               if hasattr(e, "continuous_positions"))  # fmt: skip
    theirs = {n for n, _ in throughput.build("x-transformers", "rope+sinks", args).named_parameters()}
    assert any(n.endswith("head_attn_sink") for n in theirs)
    theirs = {n for n, _ in throughput.build("x-transformers", "rope+qk_norm", args).named_parameters()}
    assert any(n.endswith("qk_norm_q_scale") for n in theirs)
    tokens = torch.randint(0, throughput.VOCAB, (2, 8))
    for row in OPTION_ROWS:  # one training-mode forward each: the options run together with the encoding
        assert throughput.build("ours", row, args).train()(tokens).shape == (2, 8, throughput.VOCAB)


def test_rope_global_s_twin_has_base_1e6():
    args = throughput.parse_args([*TINY, "--encodings", "rope_global"])
    twin = throughput.build("x-transformers", "rope_global", args)
    dim_head = args.dim // args.heads
    expected = 1.0 / 1e6 ** (torch.arange(0, dim_head, 2).float() / dim_head)
    torch.testing.assert_close(twin.attn_layers.rotary_pos_emb.inv_freq, expected)
