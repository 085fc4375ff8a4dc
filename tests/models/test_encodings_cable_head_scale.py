"""Cable (a learned token-specific ALiBi) and NoPE head-scale (a learned softmax temperature per head).

Claims of docs/encodings.md covered here:
- "cable | ... bias c_i - c_j, c_t = -sum softplus(w.k_s + b) ...; causal only":
  test_cable_bias_is_causal_and_cumulative, test_cable_with_zero_slopes_is_nope,
  test_cable_with_constant_slopes_is_alibi, test_cable_causal_only
- "nope_head_scale | logits s_h q.k / sqrt(D) ...": test_head_scale_one_is_none, test_head_scale_scales_each_head,
  test_head_scale_uniform_is_a_fixed_scale
"""

import math

import pytest
import torch
import torch.nn.functional as F
from encoding_helpers import DIM, HEADS, hook_logits, make_model, make_plain, qk
from helpers import randomize_

from lightning_modules.encodings import build_encoding
from pe_core.errors import ConfigError


def test_cable_bias_is_causal_and_cumulative():
    """bias(i, i) = 0 and bias(i, j) = -sum_{t=j+1}^{i} softplus(w . k_t + b): each key farther back adds its own
    token's slope (a non-negative step), read off the keys of the tokens in between only."""
    enc = randomize_(make_plain("cable"))
    q, k = qk(L=10)
    bias = enc.content_bias(q, k, torch.arange(10))
    B, H, L, D = k.shape
    slopes = F.softplus(enc.slopes(k.transpose(1, 2).reshape(B, L, H * D))).transpose(1, 2)  # (B, H, L)
    for i, j in [(9, 0), (5, 2), (7, 6), (3, 3)]:
        torch.testing.assert_close(bias[..., i, j], -slopes[..., j + 1 : i + 1].sum(-1), atol=1e-5, rtol=1e-5)
    steps = bias[..., 9, 1:] - bias[..., 9, :-1]  # bias(9, j + 1) - bias(9, j) = m_{j+1} > 0
    torch.testing.assert_close(steps, slopes[..., 1:], atol=1e-5, rtol=1e-5)
    k2 = k.clone()
    k2[..., 6:, :] += 1.0  # later tokens change: the rows of earlier queries do not
    torch.testing.assert_close(enc.content_bias(q, k2, torch.arange(10))[..., :6, :6], bias[..., :6, :6])


def test_cable_with_zero_slopes_is_nope():
    enc = make_plain("cable")
    with torch.no_grad():
        enc.slopes.weight.zero_()
        enc.slopes.bias.fill_(-200.0)  # softplus(-200) ~ 1e-87: every slope is 0
    q, k = qk(L=8)
    assert enc.content_bias(q, k, torch.arange(8)).abs().max() == 0
    torch.testing.assert_close(
        hook_logits(enc, q, k, torch.arange(8)), hook_logits(make_plain("none"), q, k, torch.arange(8))
    )


def test_cable_with_constant_slopes_is_alibi():
    """w = 0: every token of head h has slope softplus(b_h), bias(i, j) = -softplus(b_h) (i - j), ALiBi's form;
    at the reference's init (b = 0) the slope is log 2."""
    enc = make_plain("cable")
    with torch.no_grad():
        enc.slopes.weight.zero_()
        enc.slopes.bias.copy_(torch.linspace(-1.0, 1.0, HEADS))
    q, k = qk(L=7)
    i = torch.arange(7)
    want = -F.softplus(enc.slopes.bias)[:, None, None] * (i[:, None] - i[None, :]).float()
    torch.testing.assert_close(enc.content_bias(q, k, i)[0].tril(), want.tril(), atol=1e-6, rtol=1e-6)
    assert math.isclose(float(F.softplus(make_plain("cable").slopes.bias[0])), math.log(2), rel_tol=1e-6)


def test_cable_causal_only():
    with pytest.raises(ConfigError, match="encoding 'cable' is causal-only"):
        make_plain("cable", causal=False)


def test_head_scale_one_is_none():
    """scale 1 (the reference's default init): the whole model's output equals NoPE's with the same weights."""
    ours = make_model("nope_head_scale", causal=True)
    nope = make_model("none", causal=True)
    state = {key: value for key, value in ours.state_dict().items() if "head_scale" not in key}
    nope.load_state_dict(state)
    with torch.no_grad():
        ours.encoding.head_scale.fill_(1.0)
    tokens = torch.randint(0, 10, (2, 9))
    torch.testing.assert_close(ours(tokens), nope(tokens))


def test_head_scale_scales_each_head():
    enc = make_plain("nope_head_scale")
    scales = torch.linspace(0.5, 3.0, HEADS)
    with torch.no_grad():
        enc.head_scale.copy_(scales)
    q, k = qk(L=6)
    plain = hook_logits(make_plain("none"), q, k, torch.arange(6))
    torch.testing.assert_close(hook_logits(enc, q, k, torch.arange(6)), scales[:, None, None] * plain)


def test_head_scale_uniform_is_a_fixed_scale():
    """uniform: the reference's CONST scale, one untrained s for every head (the inference-time knob)."""
    enc = build_encoding("nope_head_scale", dim=DIM, num_heads=HEADS, max_length=16, causal=True, uniform=True,
                         scale_init=1.6)  # fmt: skip
    assert not list(enc.parameters())
    q, k = qk(L=5)
    plain = hook_logits(make_plain("none"), q, k, torch.arange(5))
    torch.testing.assert_close(hook_logits(enc, q, k, torch.arange(5)), 1.6 * plain)
