"""Shapes, builders and closed forms shared by the encoding tests (tests/test_encodings_*.py)."""

import math

import pytest
import torch
from helpers import randomize_
from torch import Tensor

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.transformer import Transformer

DIM, HEADS, MAX_LEN, VOCAB = 32, 4, 64, 50
HEAD_DIM = DIM // HEADS
NAMES = list(ENCODINGS)
CAUSAL = [True, False]


def make(name: str, causal: bool, max_length: int = MAX_LEN, heads: int = HEADS, dim: int = DIM, **options):
    """A randomized encoding, built as a [CLS]-first model would (`cls_first`: TUPE's [CLS] scheme on)."""
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    enc = build_encoding(name, dim=dim, num_heads=heads, max_length=max_length, causal=causal, cls_first=True,
                         **options)  # fmt: skip
    return randomize_(enc).eval()


def make_encoding(name: str, causal: bool = True, randomize: bool = True, **options):
    """An encoding built as a model without [CLS] would, randomized unless `randomize` is off."""
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    enc = build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal, **options)
    return (randomize_(enc) if randomize else enc).eval()


def make_plain(name, causal=True, **options):
    """An encoding at its own initialisation (no [CLS], not randomized)."""
    return build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal, **options).eval()


def make_model(name: str, causal: bool, **options) -> Transformer:
    """A randomized two-layer Transformer with encoding `name`."""
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=2, num_heads=HEADS, vocab_size=VOCAB,
                      max_length=MAX_LEN)  # fmt: skip
    return randomize_(Transformer(arch, causal=causal)).eval()


def qk(B: int = 2, L: int = 12, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random queries and keys, (B, H, L, D) each."""
    return torch.randn(2, B, HEADS, L, HEAD_DIM, generator=torch.Generator().manual_seed(seed)).unbind(0)


def hook_logits(enc, q, k, positions):
    """The attention logits the Transformer builds from the hooks (before masking)."""
    q, k = enc.rotate(q, k, positions)
    logits = q @ k.transpose(-1, -2) * enc.attention_scale()  # (B, H, L, L)
    for term in (enc.bias(positions), enc.content_bias(q, k, positions)):
        if term is not None:
            logits = logits + term
    return logits


def t5_bucket_closed_form(rel: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """PAPERS.md section 2, in float64: n = i - j; per side |n| < max_exact exact, then logarithmic."""
    n, ret = -rel, 0
    if bidirectional:
        num_buckets //= 2
        ret = num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + math.floor(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(large, num_buckets - 1)
