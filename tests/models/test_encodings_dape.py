"""DAPE (Zheng et al. 2024): parity with the official forward, transcribed below, with the same weights.

The reference: github.com/chuanyang-Zheng/DAPE, DAPE.py at commit bde344a844f2bd1f498b2bac70240dcda41c50c1
(Apache License 2.0), `AliBi_DAPE.forward` and `ParallelKerpleLog_DAPE.forward`, transcribed without their
caches, the model-parallel slicing and the one-query inference branch: x (B, H, L, L) are the scaled, unmasked
logits q.k / sqrt(D) (GPT-NeoX's `attention_scores`, which the official transformer.py hands them).

Claims of docs/encodings.md covered here:
- "dape_alibi, dape_kerple | ... logits + bias + MLP([logits, bias]) ...": test_dape_matches_official_forward
- the MLP's PyTorch Linear init (init_reference): tests/models/test_encodings_contract.py (registry-wide)
"""

import math

import pytest
import torch
from encoding_helpers import DIM, HEAD_DIM, HEADS, MAX_LEN, qk
from helpers import randomize_
from torch import nn

from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.alibi import alibi_slopes

# ------------------------------------------------------------------ the official forward (DAPE.py, transcribed)


def official_alibi_matrix(slopes: torch.Tensor, seq_len: int) -> torch.Tensor:
    """`AliBi_DAPE.forward`'s bias: -tril(i - j) * slope, 0 above the diagonal."""
    a = -torch.tril(
        torch.arange(seq_len).view(seq_len, 1).repeat(1, seq_len) + torch.arange(0, -seq_len, -1)
    )  # fmt: skip
    return a.to(torch.float32) * slopes.view(slopes.shape[0], 1, 1)


def official_kerple_bias(bias_p: torch.Tensor, bias_a: torch.Tensor, seq_len: int) -> torch.Tensor:
    """`ParallelKerpleLog_DAPE.forward`'s bias: -p log(1 + a tril(i - j)); p, a (H, 1, 1) clamped >= 0.01."""
    diff = torch.tril(torch.arange(seq_len).view(seq_len, 1).repeat(1, seq_len) + torch.arange(0, -seq_len, -1))
    diff = diff.to(torch.float32)
    return -bias_p.clamp(min=1e-2) * torch.log(1 + bias_a.clamp(min=1e-2) * diff)


def official_dape(x: torch.Tensor, a: torch.Tensor, mlp2: nn.Sequential) -> torch.Tensor:
    """The shared tail of both forwards: x + a + mlp2(cat(x, a) over the heads)."""
    x_a_bias = torch.cat((x, torch.tile(a, (x.shape[0], 1, 1, 1))), dim=1)
    x_a_bias = torch.permute(x_a_bias, (0, 2, 3, 1))
    x_a_bias = mlp2(x_a_bias)
    x_a_bias = torch.permute(x_a_bias, (0, 3, 1, 2))
    return x + a + x_a_bias


# ------------------------------------------------------------------ tests


def official_slopes(n: int) -> list[float]:
    """`AliBi_DAPE._get_slopes` for a power of two."""
    start = 2 ** (-(2 ** -(math.log2(n) - 3)))
    return [start * start**i for i in range(n)]


@pytest.mark.parametrize("name", ["dape_alibi", "dape_kerple"])
def test_dape_matches_official_forward(name):
    """Our logits (q.k / sqrt(D) + bias + content_bias) equal the official forward's on and below the diagonal
    (above it the official bias is 0 and ours the symmetric |i - j|; the causal mask hides both)."""
    enc = randomize_(build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)).eval()
    mlp2 = nn.Sequential(nn.Linear(2 * HEADS, 32), nn.LeakyReLU(), nn.Linear(32, HEADS))
    mlp2.load_state_dict(enc.mlp.state_dict())
    q, k = qk(B=2, L=12)
    positions = torch.arange(12)
    with torch.no_grad():
        x = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        if name == "dape_alibi":
            assert alibi_slopes(HEADS) == official_slopes(HEADS)
            a = official_alibi_matrix(torch.tensor(official_slopes(HEADS)), 12)
        else:
            a = official_kerple_bias(enc.r1.detach()[:, None, None], enc.r2.detach()[:, None, None], 12)
        want = official_dape(x, a, mlp2)
        got = x + enc.bias(positions) + enc.content_bias(q, k, positions)
    lower = torch.ones(12, 12, dtype=torch.bool).tril()
    diff = (got - want)[..., lower].abs().max().item()
    assert diff <= 1e-5, diff


def test_dape_defaults():
    enc = build_encoding("dape_kerple", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
    first, act, last = enc.mlp
    assert (first.in_features, first.out_features, last.out_features) == (2 * HEADS, 32, HEADS)
    assert isinstance(act, nn.LeakyReLU) and act.negative_slope == 0.01
    assert not enc.flex and not enc.flex_capable
