"""Parity of `rope_clipped` (lightning_modules/encodings/rope_clipped.py) with the reference CoPE code
(hrlics/CoPE, modeling_cope.py's `LlamaRotaryEmbedding` with use_cope / use_hardclip, and its
`apply_rotary_pos_emb`), at Llama 3's head dim 128 and base 500000 with the reference's clip_low_n = 20.

    git --git-dir /work/.mirror/hrlics+CoPE/repo show HEAD:modeling_cope.py > /tmp/modeling_cope.py
    .venv/bin/python scripts/parity_rope_clipped.py /tmp/modeling_cope.py

Prints, per mode, the max abs difference of the inverse frequencies and of the rotated q and k (the reference's
rotate_half pairs d, d + D/2 permuted to ours, 2d, 2d + 1). transformers 5 dropped the "default" rope init the
reference looks up; its formula (1 / base^(2i/D), attention scaling 1) stands in for it.
"""

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402

HEAD_DIM, HEADS, BASE, LENGTH = 128, 2, 500000.0, 300


def default_rope(config, device=None, **_):
    """transformers 4.50's `_compute_default_rope_parameters`."""
    dim = config.head_dim
    return 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="path of the reference modeling_cope.py")
    path = parser.parse_args().reference
    ref = load_definitions(path, ["LlamaRotaryEmbedding", "rotate_half", "apply_rotary_pos_emb"],
                           {"torch": torch, "nn": nn, "ROPE_INIT_FUNCTIONS": {"default": default_rope},
                            "LlamaConfig": object})  # fmt: skip
    torch.manual_seed(0)
    positions = torch.arange(LENGTH)
    q, k = torch.randn(2, HEADS, LENGTH, HEAD_DIM), torch.randn(2, HEADS, LENGTH, HEAD_DIM)
    perm = torch.stack((torch.arange(HEAD_DIM // 2), torch.arange(HEAD_DIM // 2) + HEAD_DIM // 2), -1).flatten()
    for label, cope, hard, ours in (("soft clip (CoPE)", True, False, {"clipped": 20}),
                                    ("hard clip (HardClip)", False, True, {"clipped": 20, "clip_mode": "hard"}),
                                    ("default share (20 of 64)", True, False, {}),
                                    ("no clip (RoPE)", False, False, {"clipped": 0})):  # fmt: skip
        config = SimpleNamespace(rope_scaling=None, max_position_embeddings=LENGTH, rope_theta=BASE,
                                 head_dim=HEAD_DIM, use_cope=cope, use_hardclip=hard)  # fmt: skip
        rotary = ref["LlamaRotaryEmbedding"](config)
        cos, sin = rotary(q, positions[None])
        q_ref, k_ref = ref["apply_rotary_pos_emb"](q, k, cos, sin)
        enc = build_encoding("rope_clipped", dim=HEAD_DIM * HEADS, num_heads=HEADS, max_length=LENGTH,
                             causal=True, base=BASE, **ours)  # fmt: skip
        q_ours, k_ours = enc.rotate(q[..., perm], k[..., perm], positions)
        freq = (enc.inv_freq - rotary.inv_freq).abs().max().item()
        rotated = max((q_ours - q_ref[..., perm]).abs().max().item(), (k_ours - k_ref[..., perm]).abs().max().item())
        print(f"{label:26s} max |inv_freq diff| {freq:.3g}   max |rotated q, k diff| {rotated:.3g}")


if __name__ == "__main__":
    main()
