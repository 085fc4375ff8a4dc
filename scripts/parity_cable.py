"""Parity of `cable` (lightning_modules/encodings/cable.py) with the reference CABLE attention
(axiomlab/Cable, src/Cable.py's `CausalSelfAttention`).

    git --git-dir /work/.mirror/axiomlab+Cable/repo show HEAD:src/Cable.py > /tmp/Cable.py
    .venv/bin/python scripts/parity_cable.py /tmp/Cable.py

Our slopes read the keys, the reference's the layer input x: the reference's key projection is set to the
identity (k = x), so both read the same vectors with the same weights (`h_attn` copied into our `slopes`). The
reference scales the logits by 1 (q / sqrt(C / n_embd) . k / sqrt(C / n_embd)), ours by 1/sqrt(D): the
attention below is run at the reference's scale. Prints the max abs difference of the bias (its causal part)
and of the whole attention output (after the reference's output projection, relative to its largest value), at
random weights (N(0, 0.3^2): logits of order 100 at width 768, the reference's scale being 1).
"""

import argparse
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402


def compare(path: str, dim: int, heads: int, length: int, batch: int = 2) -> tuple[float, float]:
    """Max abs difference of the bias, and of the attention output relative to its largest value, between ours
    and the reference at one shape."""
    ref_ns = load_definitions(path, ["CausalSelfAttention"], {"torch": torch, "nn": nn, "F": F, "math": math})
    torch.manual_seed(0)
    ref = ref_ns["CausalSelfAttention"](SimpleNamespace(n_embd=dim, n_head=heads, block_size=length))
    ref.device = "cpu"
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.3)
        ref.c_attn.weight[dim : 2 * dim] = torch.eye(dim)  # k = x
        ref.c_attn.bias[dim : 2 * dim] = 0
    ours = build_encoding("cable", dim=dim, num_heads=heads, max_length=length, causal=True)
    ours.slopes.load_state_dict(ref.h_attn.state_dict())
    x = torch.randn(batch, length, dim)
    with torch.no_grad():
        want = ref(x)
        q, k, v = (t.view(batch, length, heads, dim // heads).transpose(1, 2) for t in ref.c_attn(x).split(dim, 2))
        bias = ours.content_bias(q, k, torch.arange(length))
        b_ref = torch.cumsum(-F.softplus(ref.h_attn(x)), dim=1).permute(0, 2, 1)
        bias_ref = b_ref[..., :, None] - b_ref[..., None, :]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        mask = bias.masked_fill(~causal, float("-inf"))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)  # the reference's scale
        got = ref.c_proj(y.transpose(1, 2).reshape(batch, length, dim))
    scale = float(want.abs().max())
    return float((bias - bias_ref)[..., causal].abs().max()), float((got - want).abs().max()) / scale


def main() -> None:
    """Print the differences at a small shape and at GPT-2 small's head layout with a short sequence."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", help="path to the reference src/Cable.py")
    args = parser.parse_args()
    for dim, heads, length in [(32, 4, 16), (768, 12, 128)]:
        bias, out = compare(args.reference, dim, heads, length)
        print(
            f"dim={dim} heads={heads} L={length}: max|bias diff| {bias:.3e}  max|output diff| / max|output| {out:.3e}"
        )


if __name__ == "__main__":
    main()
