"""`length_scale`, an option of every encoding: SSMax's s log n (Nakanishi 2025) and Llama 4's attention
temperature, applied to each query row in the Transformer.

Claims of docs/encodings.md covered here:
- "logits of query i times s_h log n (n = i + 1 causal, the real length bidirectional)":
  test_ssmax_scales_each_row_of_logits
- "Llama 4: log(floor((p + 1) / 8192) + 1) 0.1 + 1, as transformers": test_llama4_factor_is_transformers_formula,
  test_llama4_scales_each_row_of_logits
- "every encoding takes it": test_every_encoding_takes_length_scale
- "with the KV cache and FlexAttention": test_length_scale_cached_decoding_equals_recompute,
  test_length_scale_flex_equals_sdpa
"""

import math

import pytest
import torch
from helpers import randomize_
from test_transformer import DEPTH, DIM, HEADS, MAX_LEN, VOCAB
from transformers import Llama4TextConfig

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.encodings.base import SSMAX_INIT
from lightning_modules.transformer import KVCache, Transformer, layer_masks
from pe_core.errors import ConfigError

D = DIM // HEADS


def model(name: str, causal: bool = True, backend: str = "auto", **options) -> Transformer:
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=DEPTH, num_heads=HEADS, dropout=0.0,
                      vocab_size=VOCAB, max_length=MAX_LEN, attention_backend=backend)  # fmt: skip
    torch.manual_seed(0)
    return randomize_(Transformer(arch, causal=causal)).eval()


def projections(net: Transformer, x):
    """The first layer's q, k, v (B, H, L, D) from its own qkv projection."""
    B, L, C = x.shape
    return net.blocks[0].attn.qkv(x).view(B, L, 3, HEADS, D).permute(2, 0, 3, 1, 4)


def reference(net: Transformer, x, positions, factor, causal, padding_mask=None):
    """softmax(factor_i q_i.k_j / sqrt(D)) v for the position-free encoding ("none"), through the layer's
    own projections: the closed form of a per-row logit scale."""
    attn = net.blocks[0].attn
    q, k, v = projections(net, x)
    logits = factor * (q @ k.transpose(-1, -2)) / math.sqrt(D)
    L = x.shape[1]
    allowed = torch.ones(L, L, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if padding_mask is not None:
        allowed = allowed & padding_mask[:, None, None, :]
    y = torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1) @ v
    return attn.out(y.transpose(1, 2).reshape(x.shape))


def layer_output(net: Transformer, x, positions, padding_mask=None):
    mask, allowed = layer_masks(net, positions, x, padding_mask)
    return net.blocks[0].attn(x, net.encoding, positions, mask, allowed, net.causal)


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
def test_ssmax_scales_each_row_of_logits(causal):
    net = model("none", causal, length_scale="ssmax")
    s = net.encoding.ssmax_scale
    assert s.shape == (HEADS,) and (s != SSMAX_INIT).all()  # randomized: one s per head
    x, L = torch.randn(2, 9, DIM), 9
    padding_mask = torch.arange(L)[None, :] < torch.tensor([L, 6])[:, None]
    masks = [None] if causal else [None, padding_mask]
    for pad in masks:
        n = torch.arange(1, L + 1).float() if causal else torch.full((L,), float(L))
        n = n.expand(2, L) if pad is None else pad.sum(-1, keepdim=True).float().expand(2, L)
        factor = s[None, :, None, None] * n.log()[:, None, :, None]  # (B, H, L, 1)
        got = layer_output(net, x, torch.arange(L), pad)
        want = reference(net, x, torch.arange(L), factor, causal, pad)
        rows = slice(None) if pad is None else pad
        assert (got[rows] - want[rows]).abs().max() <= 1e-5


def test_ssmax_initial_scale():
    enc = build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, length_scale="ssmax")
    assert torch.equal(enc.ssmax_scale.data, torch.full((HEADS,), SSMAX_INIT))
    assert "ssmax_scale" in dict(enc.named_parameters())


def test_llama4_factor_is_transformers_formula():
    """transformers' Llama4TextAttention (attn_temperature_tuning): log1p(floor((p + 1) / floor_scale))
    * attn_scale + 1 with the config's defaults floor_scale 8192, attn_scale 0.1."""
    config = Llama4TextConfig()
    floor_scale, attn_scale = config.floor_scale, config.attn_scale
    assert (floor_scale, attn_scale) == (8192, 0.1)
    positions = torch.tensor([0, 100, 8190, 8191, 16383, 3 * 8192 - 1, 100_000])
    want = torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0
    enc = build_encoding("none", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, length_scale="llama4")
    got = enc.query_scale(positions, torch.arange(1, 8)).flatten()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got[:3].eq(1).all() and math.isclose(got[3].item(), 1 + 0.1 * math.log(2), rel_tol=1e-6)


@torch.no_grad()
def test_llama4_scales_each_row_of_logits():
    net = model("none", True, length_scale="llama4")
    x, L = torch.randn(2, 9, DIM), 9
    positions = torch.arange(L) + 8186  # rows 0-4 below 8191 (factor 1), rows 5-8 at 1 + 0.1 log 2
    factor = (torch.log1p(torch.floor((positions.float() + 1) / 8192)) * 0.1 + 1)[:, None]
    got, want = layer_output(net, x, positions), reference(net, x, positions, factor, True)
    assert (got - want).abs().max() <= 1e-5
    assert (layer_output(net, x, torch.arange(L)) - got).abs().max() > 1e-3  # not a no-op past 8191


@pytest.mark.parametrize("length_scale", ["ssmax", "llama4"])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_encoding_takes_length_scale(name, length_scale):
    """Every encoding builds with it and runs causal (and bidirectional where it can), with a gradient for s."""
    for causal in [True, False] if not ENCODINGS[name].causal_only else [True]:
        net = model(name, causal, length_scale=length_scale).train()
        out = net(torch.randint(0, VOCAB, (2, 7)))
        assert out.isfinite().all()
        out.square().mean().backward()
        if length_scale == "ssmax":
            grad = net.encoding.ssmax_scale.grad
            assert grad is not None and grad.abs().sum() > 0, name
    with pytest.raises(ConfigError, match="option 'length_scale' must be one of"):
        build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, length_scale="logn")


@torch.no_grad()
@pytest.mark.parametrize("name", ["none", "alibi", "rope", "dape_alibi", "fox"])
def test_length_scale_cached_decoding_equals_recompute(name):
    """The cached step scales its new queries by their own key counts (T - n + 1 .. T)."""
    net = model(name, True, length_scale="ssmax")
    tokens = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    want = net(tokens)
    cache = KVCache(DEPTH)
    got = torch.cat(
        [net.decode(tokens[:, :4], cache)] + [net.decode(tokens[:, t : t + 1], cache) for t in range(4, 11)], 1
    )
    assert cache.layers[0].keys is not None  # really cached
    assert (got - want).abs().max() <= 1e-5


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["alibi", "kerple_log"])
def test_length_scale_flex_equals_sdpa(name, causal):
    """FlexAttention (eager on the CPU) sees the scaled queries too, padded rows counted bidirectionally."""
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    padding_mask = torch.arange(9)[None, :] < torch.tensor([9, 5])[:, None]
    sdpa = model(name, causal, "sdpa", length_scale="ssmax")(tokens, padding_mask=padding_mask)
    flex = model(name, causal, "flex", length_scale="ssmax")(tokens, padding_mask=padding_mask)
    assert (flex[padding_mask] - sdpa[padding_mask]).abs().max() <= 1e-5
