"""Absolute encodings (added to the token embeddings): NoPE, the sinusoid and its variants, and the learned
table with PE-Study's transfer (Vaswani et al. 2017; Wang & Chen 2020); closed forms and parity with x-transformers.

Claims of docs/encodings.md covered here:
- "none | no positional information (NoPE)": test_none_adds_no_position
- "sinusoidal | fixed sin/cos table, interleaved, no scaling": test_sinusoid_hand_computed_entries,
  test_sinusoid_formula
- "sinusoidal and scaled_sinusoidal take scale_tokens (multiply the token embeddings by sqrt(d) first ...; off by
  default)": test_sinusoidal_scale_tokens_is_vaswanis_sqrt_d_input_scaling
- "scaled_sinusoidal | sinusoid times one learned scale": test_scaled_sinusoidal_matches_x_transformers
- "sinusoidal_learnable | trainable table initialised with the sinusoid":
  test_sinusoidal_learnable_starts_at_the_sinusoid_and_learns
- "learned takes a saved table (init_from a .pt/.npy file ...; PCA to the width, standardised, init_scale, init_rows:
  first|every_k, freeze)": test_learned_init_from_pca_standardised, test_learned_init_rows_scale_and_freeze,
  test_learned_init_from_errors
"""

import math

import numpy as np
import pytest
import torch
from encoding_helpers import CAUSAL, DIM, HEAD_DIM, HEADS, MAX_LEN, make, make_encoding
from x_transformers.x_transformers import ScaledSinusoidalEmbedding

from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.learned import transfer_table
from lightning_modules.encodings.sinusoidal import sinusoid_table
from pe_core.errors import ConfigError


def test_none_adds_no_position():
    """NoPE: no table, no logit term, no rotation; its model is the same for any positions."""
    enc = build_encoding("none", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True)
    x, q = torch.randn(2, 5, DIM), torch.randn(2, HEADS, 5, HEAD_DIM)
    positions = torch.arange(5)
    assert list(enc.parameters()) == [] and enc.bias(positions) is None and enc.positional_logits(5) is None
    assert torch.equal(enc.embed(x, positions), x) and enc.content_bias(q, q, positions) is None
    assert all(torch.equal(a, b) for a, b in zip(enc.rotate(q, q, positions + 9), (q, q)))


def test_sinusoid_hand_computed_entries():
    table = sinusoid_table(torch.arange(3), dim=4)  # w_0 = 1, w_1 = 10000^(-2/4) = 0.01
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004],  # sin 1, cos 1, sin .01, cos .01
            [0.9092974268, -0.4161468365, 0.0199986667, 0.9998000067],  # sin 2, cos 2, sin .02, cos .02
        ]
    )
    torch.testing.assert_close(table, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", CAUSAL)
def test_sinusoid_formula(causal):
    d, P = 16, 50
    enc = make("sinusoidal", causal, dim=d, heads=2, max_length=P)
    expected = torch.tensor(
        [[(math.sin if c % 2 == 0 else math.cos)(p * 10000 ** (-(c - c % 2) / d)) for c in range(d)] for p in range(P)],
        dtype=torch.float32,
    )
    x = torch.randn(2, P, d)
    torch.testing.assert_close(enc.embed(x, torch.arange(P)), x + expected, atol=2e-5, rtol=0)
    torch.testing.assert_close(enc.weight, expected, atol=2e-5, rtol=0)  # the probes' table


@pytest.mark.parametrize("name", ["sinusoidal", "scaled_sinusoidal"])
def test_sinusoidal_scale_tokens_is_vaswanis_sqrt_d_input_scaling(name):
    plain, scaled = make(name, causal=True), make(name, causal=True, scale_tokens=True)
    scaled.load_state_dict(plain.state_dict())
    x, positions = torch.randn(2, 6, DIM), torch.arange(6)
    table = plain.embed(torch.zeros_like(x), positions)
    torch.testing.assert_close(scaled.embed(x, positions), x * DIM**0.5 + table)
    torch.testing.assert_close(plain.embed(x, positions), x + table)


def test_scaled_sinusoidal_matches_x_transformers():
    L = 20
    enc = make_encoding("scaled_sinusoidal", randomize=False)
    assert enc.scale.shape == (1,) and enc.scale.item() == pytest.approx(DIM**-0.5)
    with torch.no_grad():
        enc.scale.fill_(0.7)
    ref = ScaledSinusoidalEmbedding(DIM)
    ref.scale.data.copy_(enc.scale)
    for positions in (torch.arange(L), torch.arange(L) + 37):
        ours = enc.embed(torch.zeros(1, L, DIM), positions)[0]  # (L, C), interleaved sin/cos
        theirs = ref(torch.zeros(1, L, DIM), pos=positions)  # (L, C), all sines then all cosines
        torch.testing.assert_close(ours[:, 0::2], theirs[:, : DIM // 2], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours[:, 1::2], theirs[:, DIM // 2 :], atol=1e-5, rtol=1e-5)
    assert not enc.weight.requires_grad  # the probes' table is a value, not a parameter view
    torch.testing.assert_close(enc.weight, 0.7 * sinusoid_table(torch.arange(MAX_LEN), DIM))


def test_sinusoidal_learnable_starts_at_the_sinusoid_and_learns():
    enc = make_encoding("sinusoidal_learnable", randomize=False, randomize_positions=100)
    assert enc.table.shape == (100, DIM) and enc.max_positions == 100
    torch.testing.assert_close(enc.weight.detach(), sinusoid_table(torch.arange(100), DIM), atol=0, rtol=0)
    out = enc.embed(torch.zeros(2, 5, DIM), torch.tensor([[0, 1, 2, 3, 4], [3, 9, 50, 70, 99]]))
    out.sum().backward()
    assert enc.table.grad is not None and enc.table.grad[99].abs().sum() > 0 and enc.table.grad[98].abs().sum() == 0


@pytest.fixture
def saved_table(tmp_path):
    table = torch.randn(64, 48, generator=torch.Generator().manual_seed(0)) + torch.linspace(0, 3, 64)[:, None]
    torch.save(table, tmp_path / "table.pt")
    np.save(tmp_path / "table.npy", table.numpy())
    return table, tmp_path


def _learned(path, **options):
    return build_encoding(
        "learned", dim=DIM, num_heads=HEADS, max_length=16, causal=True, init_from=str(path), **options
    )


@pytest.mark.parametrize("suffix", ["pt", "npy"])
def test_learned_init_from_pca_standardised(saved_table, suffix):
    from sklearn.decomposition import PCA

    table, folder = saved_table
    enc = _learned(folder / f"table.{suffix}")
    weight = enc.weight.detach()
    assert weight.shape == (16, DIM) and enc.weight.requires_grad
    assert abs(weight.mean().item()) < 1e-5 and weight.std().item() == pytest.approx(1.0, abs=1e-5)
    reduced = torch.from_numpy(PCA(DIM, svd_solver="full").fit_transform(table.double().numpy())).float()[:16]
    torch.testing.assert_close(weight, (reduced - reduced.mean()) / reduced.std(), atol=1e-4, rtol=1e-4)


def test_learned_init_rows_scale_and_freeze(saved_table):
    table, folder = saved_table
    skip = _learned(folder / "table.pt", init_rows="every_k", init_stride=4, init_scale=0.02, freeze=True)
    assert not skip.weight.requires_grad
    assert skip.weight.std().item() == pytest.approx(0.02, rel=1e-4)
    full = transfer_table(table, 64, DIM, "first", 1, None)  # all 64 rows, PCA'd: rows 0, 4, ... 60 of it
    every = transfer_table(table, 16, DIM, "every_k", 4, None)
    torch.testing.assert_close(every, (full[::4] - full[::4].mean()) / full[::4].std(), atol=1e-4, rtol=1e-4)
    same_width = transfer_table(table[:, :DIM], 16, DIM, "first", 1, None)  # d' == C: no PCA, standardised
    torch.testing.assert_close(same_width, (table[:16, :DIM] - table[:16, :DIM].mean()) / table[:16, :DIM].std())


def test_learned_init_from_errors(saved_table, tmp_path):
    table, folder = saved_table
    with pytest.raises(ConfigError, match="no file"):
        _learned(tmp_path / "missing.pt")
    (tmp_path / "table.txt").write_text("1 2")
    with pytest.raises(ConfigError, match="neither a .pt nor a .npy"):
        _learned(tmp_path / "table.txt")
    with pytest.raises(ConfigError, match="17 positions .* need 65 saved rows, the file has 64"):
        _learned(folder / "table.pt", init_rows="every_k", init_stride=4, randomize_positions=17)  # rows 0, 4, ..., 64
    torch.save(table[:, :16], tmp_path / "narrow.pt")
    with pytest.raises(ConfigError, match="cannot be reduced by PCA to width 32"):
        _learned(tmp_path / "narrow.pt")
    with pytest.raises(ConfigError, match="init_rows"):
        _learned(folder / "table.pt", init_rows="last")
