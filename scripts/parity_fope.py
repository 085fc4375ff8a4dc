"""Parity of `fope` (lightning_modules/encodings/fope.py) with the reference FoPE code
(TsinghuaC3I/Fourier-Position-Embedding, olmo/model.py's `FourierEmbedding` on `RotaryEmbedding`), with the
paper's configs' settings (rope_clamp_floor_freq, rope_clamp_floor_to_zero, fourier_separate_basis,
fourier_separate_head, fourier_ignore_zero, eye_xavier_norm at gain 0.3), OLMo's config defaults otherwise.

    git --git-dir /work/.mirror/TsinghuaC3I+Fourier-Position-Embedding/repo show HEAD:olmo/model.py > /tmp/olmo_model.py
    .venv/bin/python scripts/parity_fope.py /tmp/olmo_model.py

Copies the reference's coefficients into ours and prints the max abs difference of the kept frequencies and
of the rotated q and k (the reference's rotate_half pairs d, d + D/2 permuted to ours, 2d, 2d + 1), for the
60M config's shape (d_model 512, 8 heads, length 512) and a small one, plus the control: ours with
free_pairs=identity against the reference (nonzero: the reference's position-free pairs differ).
"""

import argparse
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402

OLMO_DEFAULTS = dict(  # olmo/config.py ModelConfig defaults of the fields RotaryEmbedding / FourierEmbedding read
    rope_theta=10_000,
    rope_init_distribution="exponential",
    rope_no_pos=False,
    rope_no_repetition=False,
    rope_full_precision=True,
    rope_learnable=False,
    rope_include_neg_freq=False,
    rope_init_upper_freq=1.0,
    rope_init_floor_freq=0.0,
    rope_floor_freq_ratio=1.0,
    rope_upper_freq_ratio=1.0,
    rope_clamp_upper_freq=False,
    rope_clamp_upper_to_zero=True,
    rope_zero_freq_ratio=-1.0,
    rope_clamp_to_linear=False,
    rope_clamp_to_linear_mode="ceil",
    fourier_dim=0,
    fourier_learnable=False,
    fourier_norm=False,
    len_extra=False,
    len_extra_before_clamp=False,
    init_device="cpu",
)
PAPER = dict(  # configs/*/ce-fourier/*.yaml
    rope_clamp_floor_freq=True,
    rope_clamp_floor_to_zero=True,
    fourier=True,
    fourier_init="eye_xavier_norm",
    fourier_init_norm_gain=0.3,
    fourier_separate_basis=True,
    fourier_separate_head=True,
    fourier_ignore_zero=True,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="path of the reference olmo/model.py")
    path = parser.parse_args().reference
    ref = load_definitions(path, ["RotaryEmbedding", "FourierEmbedding"],
                           {"torch": torch, "nn": nn, "F": F, "math": __import__("math"), "Optional": typing.Optional,
                            "Tuple": tuple, "ModelConfig": object, "BufferCache": dict,
                            "_non_meta_init_device": lambda config: torch.device("cpu")})  # fmt: skip
    for d_model, heads, length in ((512, 8, 512), (64, 2, 64)):
        torch.manual_seed(0)
        config = SimpleNamespace(**OLMO_DEFAULTS, **PAPER, d_model=d_model, n_heads=heads, max_sequence_length=length)
        fourier = ref["FourierEmbedding"](config, {})
        D = d_model // heads
        q, k = torch.randn(2, heads, length, D), torch.randn(2, heads, length, D)
        q_ref, k_ref = fourier(q, length), fourier(k, length)
        perm = torch.stack((torch.arange(D // 2), torch.arange(D // 2) + D // 2), -1).flatten()
        for free in ("reference", "identity"):
            enc = build_encoding("fope", dim=d_model, num_heads=heads, max_length=length, causal=True,
                                 free_pairs=free)  # fmt: skip
            enc.sin_coef.copy_(fourier.sin_coef.detach())
            enc.cos_coef.copy_(fourier.cos_coef.detach())
            q_ours, k_ours = enc.rotate(q[..., perm], k[..., perm], torch.arange(length))
            freq = (enc.basis_freq - fourier.inv_freq.flatten()).abs().max().item()
            rotated = max((q_ours - q_ref[..., perm]).abs().max().item(),
                          (k_ours - k_ref[..., perm]).abs().max().item())  # fmt: skip
            print(f"d_model {d_model:3d} heads {heads} length {length:3d} free_pairs={free:9s} "
                  f"M={enc.basis_freq.numel():2d} d_out={enc.fourier_pairs:2d}  max |freq diff| {freq:.3g}  "
                  f"max |rotated q, k diff| {rotated:.3g}")  # fmt: skip


if __name__ == "__main__":
    main()
