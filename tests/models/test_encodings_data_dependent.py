"""Encodings computed from the data or by an MLP: CoPE (gate counts), forgetting attention (fox) and the dynamic
position bias; parity with x-transformers.

Claims of docs/encodings.md covered here:
- "cope | contextual positions: gate sums sum_t sigmoid(q.k), interpolated q.e[p] ...; causal only":
  test_cope_matches_x_transformers, test_cope_counts_gates, test_causal_only_refuses_an_encoder
- "cope | ... (max_pos, 64) ... one table for all layers": test_cope_keeps_one_table_for_all_layers
- "fox | forgetting decay sum log sigmoid(w.k_t + b) (x-transformers' data-dependent ALiBi ...); causal only":
  test_fox_matches_x_transformers_data_dependent_alibi, test_fox_bias_is_a_decay, test_causal_only_refuses_an_encoder
- "dynamic_bias | per-head MLP over (log) distance": test_dynamic_bias_matches_x_transformers
- "dd_alibi_row | per-row forgetting decay ... (x-transformers' PerRowDataDependentAlibi, gates read the keys);
  causal only": test_dd_alibi_row_matches_x_transformers, test_dd_alibi_row_is_a_per_row_decay,
  test_causal_only_refuses_an_encoder
"""

import pytest
import torch
from encoding_helpers import (
    DIM,
    HEAD_DIM,
    HEADS,
    MAX_LEN,
    make_encoding,
    make_plain,
    qk,
)
from helpers import randomize_
from torch import nn
from x_transformers.x_transformers import (
    CoPE,
    DataDependentAlibi,
    DynamicPositionBias,
    PerRowDataDependentAlibi,
)

from lightning_modules.arch import ArchConfig
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError


def test_cope_matches_x_transformers():
    enc = randomize_(make_plain("cope", max_pos=8))
    q, k = qk(L=20)
    q, k = 2 * q, 2 * k  # large logits: gates near 0 and 1, counts up to the clamp
    ref = CoPE(dim=HEAD_DIM, heads=HEADS, max_pos=8)
    ref.pos_emb.data.copy_(enc.table.data)
    logits = (q @ k.transpose(-1, -2)) * HEAD_DIM**-0.5
    causal = torch.ones(20, 20, dtype=torch.bool).triu(1)
    theirs = ref(q, logits.masked_fill(causal, -torch.finfo(logits.dtype).max))
    ours = enc.content_bias(q, k, torch.arange(20))
    torch.testing.assert_close(ours.tril(), theirs.tril(), atol=1e-5, rtol=1e-5)


def test_cope_counts_gates():
    enc = make_plain("cope", max_pos=16)
    with torch.no_grad():
        enc.table.copy_(torch.eye(16, HEAD_DIM) if HEAD_DIM >= 16 else torch.zeros(16, HEAD_DIM))
        enc.table[:, 0] = torch.arange(16).float()  # q = e_0 reads the position itself
    L = 6
    q = torch.zeros(1, HEADS, L, HEAD_DIM)
    q[..., 0] = 1.0
    k = torch.zeros(1, HEADS, L, HEAD_DIM)  # q.k = 0: every gate 1/2
    counts = enc.content_bias(q, k, torch.arange(L))[0, 0]
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    torch.testing.assert_close(counts.tril(), ((i - j + 1) * 0.5).float().tril())


def test_cope_keeps_one_table_for_all_layers():
    """CoPE's position table lives in the encoding, shared by every layer: a deeper model has no more of it."""
    sizes = []
    for depth in (1, 3):
        model = Transformer(
            ArchConfig("cope", dim=DIM, depth=depth, num_heads=HEADS, vocab_size=50, max_length=MAX_LEN)
        )
        tables = [key for key, _ in model.named_parameters() if key.startswith("encoding.")]
        assert tables == ["encoding.table"]
        sizes.append(sum(p.numel() for key, p in model.named_parameters() if "table" in key))
    assert sizes[0] == sizes[1] == 64 * HEAD_DIM  # max_pos 64 rows of a head's width


@pytest.mark.parametrize("name", ["cope", "fox", "dd_alibi_row"])
def test_causal_only_refuses_an_encoder(name):
    with pytest.raises(ConfigError, match=f"encoding '{name}' is causal-only"):
        make_plain(name, causal=False)


def test_fox_matches_x_transformers_data_dependent_alibi():
    enc = randomize_(make_plain("fox"))
    q, k = qk(L=15)
    ref = DataDependentAlibi(DIM, HEADS, causal=True)
    ref.to_forget_gates[0].load_state_dict(enc.gates.state_dict())
    keys = k.transpose(1, 2).reshape(2, 15, DIM)
    torch.testing.assert_close(enc.content_bias(q, k, torch.arange(15)).tril(), ref(keys).tril(), atol=1e-5, rtol=1e-5)


def test_fox_bias_is_a_decay():
    enc = make_plain("fox")
    q, k = qk(L=10)
    bias = enc.content_bias(q, k, torch.arange(10))
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    lower = bias.tril(-1)
    assert (lower <= 0).all() and (bias[..., 9, :8] <= bias[..., 9, 1:9]).all()  # farther keys decay more


@pytest.mark.parametrize("gate_dim", [8, 3])
def test_dd_alibi_row_matches_x_transformers(gate_dim):
    enc = randomize_(make_plain("dd_alibi_row", gate_dim=gate_dim))
    q, k = qk(L=15)
    ref = PerRowDataDependentAlibi(DIM, HEADS, causal=True, dim_head=gate_dim)
    ref.to_forget_gates[0].load_state_dict(enc.gates.state_dict())
    keys = k.transpose(1, 2).reshape(2, 15, DIM)
    ours, theirs = enc.content_bias(q, k, torch.arange(15)).tril(), ref(keys).tril()
    assert ours.abs().max() > 1  # gates far from 1: a real decay is compared
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_dd_alibi_row_is_a_per_row_decay():
    """bias(i, i) = 0, bias(i, j) = sum_{t=j}^{i-1} log sigmoid(a_i . b_t / sqrt(d)) <= 0: non-increasing as the
    key moves away, and, unlike fox, two queries see different decays over the same keys."""
    enc = randomize_(make_plain("dd_alibi_row"))
    q, k = qk(L=10)
    bias = enc.content_bias(q, k, torch.arange(10))
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    assert (bias.tril(-1) <= 0).all() and (bias[..., 9, :8] <= bias[..., 9, 1:9]).all()
    step_8, step_9 = bias[..., 8, 6] - bias[..., 8, 7], bias[..., 9, 6] - bias[..., 9, 7]  # log f of key 6, rows 8, 9
    assert (step_8 - step_9).abs().max() > 1e-3


@pytest.mark.parametrize("log_distance", [False, True])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_dynamic_bias_matches_x_transformers(depth, log_distance):
    L = 17
    enc = make_encoding("dynamic_bias", depth=depth, log_distance=log_distance)
    ref = DynamicPositionBias(dim=DIM // 4, heads=HEADS, depth=depth, log_distance=log_distance)
    ours = [m for m in enc.mlp if isinstance(m, nn.Linear)]
    theirs = [m for m in ref.modules() if isinstance(m, nn.Linear)]
    assert len(ours) == len(theirs) == depth + 1
    for a, b in zip(ours, theirs):
        b.load_state_dict(a.state_dict())
    torch.testing.assert_close(enc.positional_logits(L), ref(L, L), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(enc.bias(torch.arange(L) + 50), ref(L, L), atol=1e-5, rtol=1e-5)
