"""Parity of liere and comrope (lightning_modules/encodings/liere.py, comrope.py) with their reference code, loaded by
path with the same weights: LieRE (StanfordMIMI/LieRE, models/rope_vit.py: `LierePositionEncoder` with phase_type
"learned", per-head generators, and `FlexibleAttention.apply_transforms`) and ComRoPE (Longin-Yu/ComRoPE, model.py:
`ComRoPELDAttention`, `ComRoPEAPAttention` and their base's `get_rotation_matrix`).

    git --git-dir /work/.mirror/StanfordMIMI+LieRE/repo show HEAD:models/rope_vit.py > /tmp/liere_rope_vit.py
    git --git-dir /work/.mirror/Longin-Yu+ComRoPE/repo show HEAD:model.py > /tmp/comrope_model.py
    .venv/bin/python scripts/parity_lie_rotation.py /tmp/liere_rope_vit.py /tmp/comrope_model.py

The references are 2-D / 3-D: LieRE runs with input_dimensionality 1; ComRoPE (2 or 3 axes only) runs with 2 axes,
LD with positions (p, 0) (axis 1's angle matrices theta_1j (P_j - P_j^T), ours with theta_j = theta_1j) and AP with
positions (p, p) (its blocks alternate between the axes; with equal coordinates every block turns by p, our 1-D AP).
Prints the max abs difference of the rotated queries and of the attention logits q^T R(m)^T R(n) k, at token-index
positions (position_scale 1: angles of hundreds of radians at the references' init, where float32 exponentials
differ by ~1e-4) and at the references' [0, 1] positions (position_scale 1 / L).
"""

import argparse
import math
import sys
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Optional  # the ComRoPE reference's annotations use it

import torch
from einops import rearrange
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402

HEADS, HEAD_DIM, LENGTH, BATCH = 4, 64, 48, 2  # LieRE's FlexibleAttention supports head dim 64 only


class CLIPAttention(nn.Module):
    """Stand-in for transformers' CLIPAttention: the sizes ComRoPE's attention reads (its projections are unused)."""

    def __init__(self, config):
        super().__init__()
        self.config, self.embed_dim, self.num_heads = config, config.hidden_size, config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads


def report(label: str, ours_q: torch.Tensor, ref_q: torch.Tensor, ours_k: torch.Tensor, ref_k: torch.Tensor):
    logits = (ours_q @ ours_k.mT - ref_q @ ref_k.mT).abs().max().item()
    print(f"{label}: max |q diff| {(ours_q - ref_q).abs().max().item():.3g}, max |logit diff| {logits:.3g}")


def liere_parity(path: str, block_size: int, q, k, positions, scale: float) -> None:
    names = ["PositionEncoderBase", "ExponentiationMethod", "LierePositionEncoder", "FlexibleAttention"]
    ns = load_definitions(path, names, {"torch": torch, "nn": nn, "math": math, "Enum": Enum,
                                        "Iterable": Iterable, "rearrange": rearrange})  # fmt: skip
    torch.manual_seed(1)
    ref = ns["LierePositionEncoder"](image_size=LENGTH, patch_size=1, dim=HEADS * HEAD_DIM, phase_type="learned",
                                     position_sequencing_type="sequential", heads=HEADS, input_dimensionality=1,
                                     generator_dim=block_size, depth=1, rotary_embedding_per_layer=False,
                                     rotary_embedding_per_head=True, cls_token=False)  # fmt: skip
    attention = ns["FlexibleAttention"](HEADS * HEAD_DIM, HEADS, HEAD_DIM, 0.0, rotary_embedding_per_head=True)
    ours = build_encoding("liere", dim=HEADS * HEAD_DIM, num_heads=HEADS, max_length=LENGTH, causal=False,
                          block_size=block_size, position_scale=scale)  # fmt: skip
    with torch.no_grad():  # raw (axes, layers, heads * blocks, b, b), heads major as apply_transforms views it
        ours.generator_raw.copy_(ref.generator_raw_params[0, 0].view_as(ours.generator_raw))
        transforms = ref(
            None, torch.float32, positions=positions.float()[None, :, None] * scale
        )  # (1, L, 1, H n, b, b)
        ref_q, ref_k = attention.apply_transforms(q, transforms), attention.apply_transforms(k, transforms)
        ours_q, ours_k = ours.rotate(q, k, positions)
    report(f"liere block_size={block_size} position_scale={scale:.3g}", ours_q, ref_q, ours_k, ref_k)


def comrope_parity(path: str, variant: str, q, k, positions, scale: float) -> None:
    names = ["RoPESelfAttentionBase", "ComRoPELDAttention", "ComRoPEAPAttention"]
    ns = load_definitions(path, names, {"torch": torch, "nn": nn, "Optional": Optional, "Tuple": tuple,
                                        "CLIPAttention": CLIPAttention,
                                        "CustomVITConfig": SimpleNamespace})  # fmt: skip
    config = SimpleNamespace(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, block_size=2, init_std=1.0,
                             num_axes=2)  # fmt: skip
    torch.manual_seed(2)
    ref = ns["ComRoPELDAttention" if variant == "ld" else "ComRoPEAPAttention"](config)
    ours = build_encoding("comrope", dim=HEADS * HEAD_DIM, num_heads=HEADS, max_length=LENGTH, causal=False,
                          variant=variant, position_scale=scale)  # fmt: skip
    p = positions.float() * scale
    with torch.no_grad():
        ours.angle_base.copy_(ref.freqs[:, 0])  # (H, n, b, b)
        if variant == "ld":
            ours.multiplier.copy_(ref.multiplier[0, 0, :, 0, 0])  # axis 1's theta_1j
        ref.set_positions(torch.stack((p, torch.zeros_like(p) if variant == "ld" else p), -1)[None])
        rotation = ref.get_rotation_matrix().transpose(1, 2)  # (1, H, L, D, D)
        ref_q, ref_k = (rotation @ q[..., None])[..., 0], (rotation @ k[..., None])[..., 0]
        ours_q, ours_k = ours.rotate(q, k, positions)
    report(f"comrope variant={variant} position_scale={scale:.3g}", ours_q, ref_q, ours_k, ref_k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("liere_path", help="the LieRE reference's models/rope_vit.py")
    parser.add_argument("comrope_path", help="the ComRoPE reference's model.py")
    args = parser.parse_args()
    torch.manual_seed(0)
    q, k = torch.randn(BATCH, HEADS, LENGTH, HEAD_DIM), torch.randn(BATCH, HEADS, LENGTH, HEAD_DIM)
    positions = torch.arange(LENGTH)
    for scale in (1.0, 1 / LENGTH):  # token indices, and the references' positions in [0, 1]
        for block_size in (2, 8, HEAD_DIM):
            liere_parity(args.liere_path, block_size, q, k, positions, scale)
        for variant in ("ld", "ap"):
            comrope_parity(args.comrope_path, variant, q, k, positions, scale)


if __name__ == "__main__":
    main()
