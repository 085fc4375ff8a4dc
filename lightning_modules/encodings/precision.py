"""Position terms computed in fp32 and cast once to the dtype attention runs in.

A position MLP fed raw distances (dynamic position bias) or normalised log-distances (FIRE) loses them in bf16:
bf16 keeps 8 significant bits, so distances past 256 round to even numbers and FIRE's inputs near 1 to steps
of 1/256 (its bias over 1024 positions takes about 100 distinct values). Under bf16 autocast (`bf16-mixed`)
Linear layers run in bf16, and under `bf16-true` the weights themselves are bf16: `fp32_mlp` runs such an MLP
in fp32 either way, and `compute_dtype` names the dtype its output is cast to (once, before it is expanded to
L x L pairs).
"""

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def compute_dtype(parameter: Tensor) -> torch.dtype:
    """The dtype attention runs in: autocast's where it is on for the parameter's device, else the parameter's."""
    device = parameter.device.type
    if torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return parameter.dtype


def fp32_mlp(mlp: nn.Sequential, x: Tensor) -> Tensor:
    """`mlp(x)` in fp32: autocast off, Linear weights upcast (gradients flow back to them in their dtype)."""
    device = x.device.type
    with torch.autocast(device, enabled=False) if torch.amp.is_autocast_available(device) else nullcontext():
        x = x.float()
        for layer in mlp:
            if isinstance(layer, nn.Linear):
                x = F.linear(x, layer.weight.float(), None if layer.bias is None else layer.bias.float())
            else:
                x = layer(x)
    return x
