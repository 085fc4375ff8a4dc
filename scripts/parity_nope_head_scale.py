"""Parity of `nope_head_scale` (lightning_modules/encodings/nope_head_scale.py) with the reference head scale
(AntNLP/nope_head_scale, models/llama_nope.py's `ScaleMixin.query_scale`, HS and CONST scale types).

    git --git-dir /work/.mirror/AntNLP+nope_head_scale/repo show HEAD:models/llama_nope.py > /tmp/llama_nope.py
    git --git-dir /work/.mirror/AntNLP+nope_head_scale/repo show HEAD:args/model_args.py > /tmp/model_args.py
    .venv/bin/python scripts/parity_nope_head_scale.py /tmp/llama_nope.py /tmp/model_args.py

`ScaleMixin` and `SoftMaxScaleType` are loaded by path; the Llama attention it extends (transformers' old
`LlamaAttention`, whose __init__ only sets the shapes `query_scale` reads) is a stand-in. The reference's
per-head scales (bfloat16, initialised to `softmax_scale`, then set to random values) are copied into ours;
prints the max abs difference of the logits q.k (the reference's scaled queries times the keys, ours the
hooks' logits), for head dim 64 (the reference asserts it), with NoPE (no rotation) on both sides.
"""

import argparse
import math
import sys
import typing
from enum import Enum, auto
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402


class LlamaAttentionShapes(nn.Module):
    """Stand-in for transformers' LlamaAttention: the head count and head dim `query_scale` reads."""

    def __init__(self, config):
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads


@torch.no_grad()
def compare(model_path: str, args_path: str, heads: int, length: int, scale_type: str, scale: float,
            control: bool = False) -> float:  # fmt: skip
    """Max abs difference of the logits between the reference's scale type and ours at one shape; `control`:
    ours keeps its initial scales (the reference's are set at random), which must differ."""
    types = load_definitions(args_path, ["SoftMaxScaleType"], {"Enum": Enum, "auto": auto})
    namespace = {"torch": torch, "math": math, "Optional": typing.Optional,
                 "OriginLlamaAttention": LlamaAttentionShapes, "SoftMaxScaleType": types["SoftMaxScaleType"],
                 "logger": None,
                 "utils": SimpleNamespace(log_once=lambda *a, **k: None)}  # fmt: skip
    mixin = load_definitions(model_path, ["ScaleMixin"], namespace)["ScaleMixin"]
    dim = 64 * heads
    ref = mixin(SimpleNamespace(num_attention_heads=heads, hidden_size=dim), softmax_scale=scale,
                softmax_scale_b=0.0, softmax_scale_type=types["SoftMaxScaleType"][scale_type], QNA=False, KNA=False,
                window_attn=None)  # fmt: skip
    uniform = scale_type == "CONST"
    ours = build_encoding("nope_head_scale", dim=dim, num_heads=heads, max_length=length, causal=True,
                          scale_init=scale, uniform=uniform)  # fmt: skip
    torch.manual_seed(0)
    if not uniform:
        ref.scale_param.copy_(torch.rand(heads) * 3 + 0.5)  # rounded to bfloat16, the reference's dtype
        if not control:
            ours.head_scale.copy_(ref.scale_param.float())
    q, k = torch.randn(2, 2, heads, length, 64).unbind(0)
    want = ref.query_scale(q, torch.arange(length)[None]) @ k.transpose(-1, -2)
    q_ours, k_ours = ours.rotate(q, k, torch.arange(length))
    got = q_ours @ k_ours.transpose(-1, -2) * ours.attention_scale()
    return float((got - want).abs().max())


def main() -> None:
    """Print the differences for the learned per-head scales (HS) and the uniform scale (CONST)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("llama_nope", help="path to the reference models/llama_nope.py")
    parser.add_argument("model_args", help="path to the reference args/model_args.py")
    args = parser.parse_args()
    for scale_type, scale in [("HS", 1.0), ("HS", 1.6), ("CONST", 1.0), ("CONST", 1.6)]:
        diff = compare(args.llama_nope, args.model_args, heads=8, length=256, scale_type=scale_type, scale=scale)
        print(f"{scale_type} softmax_scale={scale}: max|logit diff| {diff:.3e}")
    diff = compare(args.llama_nope, args.model_args, heads=8, length=256, scale_type="HS", scale=1.0, control=True)
    print(f"control (ours at scale 1, the reference's scales random): max|logit diff| {diff:.3e}")


if __name__ == "__main__":
    main()
