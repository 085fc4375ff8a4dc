"""Helpers shared by the tests (not fixtures: those live in conftest.py)."""

import torch
from torch import nn


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter a non-trivial value (LayerNorm near identity, others N(0, 0.3^2))."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            for pname, p in sub.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=gen)
                if isinstance(sub, nn.LayerNorm):
                    p.copy_((1.0 if pname == "weight" else 0.0) + 0.1 * noise)
                else:
                    p.copy_(0.3 * noise)
    return module
