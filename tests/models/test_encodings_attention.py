"""Attention-level encodings (issue 27): PaTH's Householder products and stick-breaking attention, against
fla-core's pure-torch references (`naive_path_attn`, `naive_stickbreaking_attn`) and written-out formulas.

fla-core is installed without its dependencies (scripts/setup.sh: `import fla` pulls triton), so the reference
files are loaded by path from the installed package; without fla-core those tests skip, saying so.

Claims of docs/encodings.md covered here:
- "path | q_i^T H_ij k_j, H_ij = prod (I - beta_t w_t w_t^T) over t in (j, i] ...; causal only":
  test_path_matches_fla_naive, test_path_model_attention_matches_fla_naive, test_path_is_a_product_of_householders,
  test_causal_only_refuses_an_encoder
- "path | ... w, beta as fla's layer (low-rank projection, short conv, l2norm, beta = 2 sigmoid) of the keys":
  test_path_transforms_written_out
- "stick_breaking | A_ij = s_ij prod_{j<l<i} (1 - s_il) ..., remainder dropped; causal only":
  test_stick_breaking_matches_fla_naive, test_stick_breaking_model_attention_matches_fla_naive,
  test_stick_breaking_written_out, test_causal_only_refuses_an_encoder
"""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from encoding_helpers import DIM, HEAD_DIM, HEADS, make_encoding, make_plain, qk
from helpers import load_module, randomize_
from torch import nn

from lightning_modules.encodings.path import householder_logits
from lightning_modules.transformer import Attention, attention_masks
from pe_core.errors import ConfigError


def fla_reference(relative: str, function: str):
    """`function` of fla-core's file `relative` (pure torch), loaded by path: `import fla` would need triton."""
    spec = importlib.util.find_spec("fla")
    if spec is None:
        pytest.skip("fla-core is not installed (scripts/setup.sh installs it with --no-deps)")
    path = Path(spec.submodule_search_locations[0]) / relative
    return getattr(load_module(path, f"fla_reference_{path.stem}"), function)


def bthd(*tensors):
    """(B, H, L, ...) -> fla's (B, L, H, ...)."""
    return [t.transpose(1, 2) for t in tensors]


def random_path_inputs(L: int, D: int = HEAD_DIM, B: int = 2, seed: int = 0):
    """q, k, v, w (unit rows) (B, H, L, D) and beta (B, H, L) in (0, 2)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v, w = torch.randn(4, B, HEADS, L, D, generator=gen).unbind(0)
    return q, k, v, F.normalize(w, dim=-1), 2 * torch.rand(B, HEADS, L, generator=gen)


def causal_softmax(logits, v):
    L = logits.shape[-1]
    return logits.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("L, D", [(10, 8), (64, 8), (150, 16)])  # one chunk, exactly one, three (a partial)
def test_path_matches_fla_naive(L, D):
    naive_path_attn = fla_reference("ops/path_attn/naive.py", "naive_path_attn")
    q, k, v, w, beta = random_path_inputs(L, D)
    ours = causal_softmax(householder_logits(q, k, w, beta) * D**-0.5, v)
    (theirs,) = bthd(naive_path_attn(*bthd(q, k, v, w, beta), torch.zeros(2, L, HEADS), scale=D**-0.5))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def path_model_inputs(L: int, name: str = "path", **options):
    enc = make_encoding(name, **options)
    attn = randomize_(Attention(DIM, HEADS, dropout=0.0), seed=1).eval()
    attn.out = nn.Identity()  # compare the heads' outputs themselves
    x = 0.5 * torch.randn(
        2, L, DIM, generator=torch.Generator().manual_seed(2)
    )  # logits within ~5: fp32 agrees to 1e-6
    q, k, v = attn.qkv(x).view(2, L, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)  # each (B, H, L, D)
    return enc, attn, x, (q, k, v)


def run_attention(enc, attn, x, padding_mask=None):
    """The Transformer's path: masks built once (causal), then the Attention module."""
    L = x.shape[1]
    mask, allowed = attention_masks(enc.bias(torch.arange(L)), L, True, padding_mask, x.device)
    return attn(x, enc, torch.arange(L), mask, allowed, True)


@pytest.mark.parametrize("short_conv", [True, False])
@torch.no_grad()
def test_path_model_attention_matches_fla_naive(short_conv):
    """The encoding inside the Transformer's Attention (content_bias + SDPA) is fla's reference fed the same q,
    k, v and the w, beta the encoding makes from the keys."""
    naive_path_attn = fla_reference("ops/path_attn/naive.py", "naive_path_attn")
    L = 70
    enc, attn, x, (q, k, v) = path_model_inputs(L, short_conv=short_conv)
    w, beta = enc.transforms(k)
    y = naive_path_attn(*bthd(q, k, v, w, beta), torch.zeros(2, L, HEADS), scale=HEAD_DIM**-0.5)  # (B, L, H, D)
    want = y.reshape(2, L, DIM)
    torch.testing.assert_close(run_attention(enc, attn, x), want, atol=1e-5, rtol=1e-5)


def test_path_is_a_product_of_householders():
    """Logits q_i^T P_i P_{i-1} ... P_{j+1} k_j with P_t = I - beta_t w_t w_t^T, the matrices multiplied out
    in float64 (independent of fla)."""
    L, D = 7, 5
    q, k, _, w, beta = random_path_inputs(L, D, B=1)
    got = householder_logits(q, k, w, beta)[0, 0].double()
    q, k, w, beta = q[0, 0].double(), k[0, 0].double(), w[0, 0].double(), beta[0, 0].double()
    for i in range(L):
        H = torch.eye(D, dtype=torch.double)
        for j in range(i, -1, -1):
            torch.testing.assert_close(got[i, j], q[i] @ H @ k[j], atol=1e-5, rtol=1e-5)
            H = H @ (torch.eye(D, dtype=torch.double) - beta[j] * torch.outer(w[j], w[j]))


@torch.no_grad()
def test_path_transforms_written_out():
    """w_t = l2norm_head(silu(sum_s conv[s] u_{t-2+s})), u = W_up W_down k_t; beta = 2 sigmoid(W_b k_t + b),
    as fla's PaTHAttention layer, written per position (the conv reads only t-2..t)."""
    enc = make_encoding("path")
    L = 6
    _, k = qk(L=L)
    w, beta = enc.transforms(k)
    keys = k.transpose(1, 2).reshape(2, L, DIM)
    u = keys @ enc.w_down.weight.T @ enc.w_up.weight.T  # (B, L, C)
    kernel = enc.w_conv.weight[:, 0, :]  # (C, 3)
    for t in range(L):
        conv = sum(kernel[:, s] * u[:, t - 2 + s] for s in range(3) if t - 2 + s >= 0)  # (B, C)
        heads = F.silu(conv).view(2, HEADS, HEAD_DIM)
        want = heads / (heads.square().sum(-1, keepdim=True) + 1e-6).sqrt()
        torch.testing.assert_close(w[:, :, t], want, atol=1e-6, rtol=1e-5)
    want_beta = 2 * torch.sigmoid(keys @ enc.beta.weight.T + enc.beta.bias).transpose(1, 2)
    torch.testing.assert_close(beta, want_beta)
    assert ((w.norm(dim=-1) - 1).abs() < 1e-3).all()  # randomized weights: norms far above l2norm's eps


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("L", [1, 9, 100])
def test_stick_breaking_matches_fla_naive(L, attend_current):
    naive = fla_reference("ops/stickbreaking_attn/naive.py", "naive_stickbreaking_attn")
    enc = make_plain("stick_breaking", attend_current=attend_current)
    q, k, v, _, _ = random_path_inputs(L)
    q, k = 2 * q, 2 * k  # large logits: sticks used up and left whole
    ours = enc.attend(q, k, v, None, is_causal=True, dropout_p=0.0, scale=HEAD_DIM**-0.5, positions=torch.arange(L))
    theirs, _remainder = naive(*bthd(q, k, v), scale=HEAD_DIM**-0.5, attend_current=attend_current)
    torch.testing.assert_close(ours, theirs.transpose(1, 2), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_stick_breaking_model_attention_matches_fla_naive():
    """Inside the Attention module, with right padding: the real queries get fla's outputs."""
    naive = fla_reference("ops/stickbreaking_attn/naive.py", "naive_stickbreaking_attn")
    L = 12
    enc, attn, x, (q, k, v) = path_model_inputs(L, "stick_breaking")
    y, _remainder = naive(*bthd(q, k, v), scale=HEAD_DIM**-0.5)  # (B, L, H, D)
    want = y.reshape(2, L, DIM)
    padding_mask = torch.arange(L)[None, :] < torch.tensor([[L], [7]])
    got = run_attention(enc, attn, x, padding_mask)
    torch.testing.assert_close(got[padding_mask], want[padding_mask], atol=1e-5, rtol=1e-5)


def test_stick_breaking_written_out():
    """A_ij = s_ij prod_{j<l<i} (1 - s_il) for j < i, in float64; the first query attends nothing."""
    L = 6
    q, k, v, _, _ = random_path_inputs(L, B=1)
    enc = make_plain("stick_breaking")
    got = enc.attend(q, k, v, None, is_causal=True, dropout_p=0.0, scale=0.5, positions=torch.arange(L))[0, 0]
    s = torch.sigmoid((q @ k.mT)[0, 0].double() * 0.5)
    for i in range(L):
        weights = [s[i, j] * torch.prod(1 - s[i, j + 1 : i]) for j in range(i)]
        want = sum((a * v[0, 0, j].double() for j, a in enumerate(weights)), torch.zeros(HEAD_DIM, dtype=torch.double))
        torch.testing.assert_close(got[i].double(), want, atol=1e-6, rtol=1e-5)
    assert (got[0] == 0).all()


@pytest.mark.parametrize("name", ["path", "stick_breaking"])
def test_causal_only_refuses_an_encoder(name):
    with pytest.raises(ConfigError, match=f"encoding '{name}' is causal-only"):
        make_plain(name, causal=False)
