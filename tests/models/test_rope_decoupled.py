"""Decoupled RoPE (`rope_decoupled`; DeepSeek-V2, Section 2.1.3, Eqs. (14)-(19)).

Claims of lightning_modules/encodings/rope_decoupled.py covered here:
- "position-free content dims ... a small rotated slice": test_zeroed_slice_is_position_free
- "k_t^R ONE per token (shared by the heads)", "one d_r x C projection per layer ... no parameter of its own":
  test_the_rotated_key_is_shared_by_the_heads, test_one_shared_key_projection_per_layer
- "logits q . k / sqrt(d_c + d_r)", content + rotated parts: test_logits_are_content_plus_shared_rotated_part
- the positional part depends on j - i only: test_positional_part_is_shift_invariant
- "default DeepSeek-V2's ratio ... 1 : 2": test_default_width_keeps_deepseek_ratio
- bad widths are one line: test_bad_widths_are_one_line
- trains: test_trains
"""

import pytest
import torch
from encoding_helpers import DIM, HEAD_DIM, HEADS, MAX_LEN, VOCAB, hook_logits, qk

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.rope import RoPE
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError


def make(**options):
    return build_encoding("rope_decoupled", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, **options)


def test_zeroed_slice_is_position_free():
    """With the rotated slice of q and k zeroed, the logits do not depend on the positions (NoPE)."""
    enc = make(rope_dim=4)
    q, k = qk(L=10)
    q[..., -4:], k[..., -4:] = 0, 0
    nope = q @ k.transpose(-1, -2) * HEAD_DIM**-0.5
    for positions in (torch.arange(10), torch.arange(10) * 5 + 3, torch.randperm(40)[:10]):
        torch.testing.assert_close(hook_logits(enc, q, k, positions), nope)


def test_the_rotated_key_is_shared_by_the_heads():
    enc = make(rope_dim=4)
    q, k = qk(L=10)
    rq, rk = enc.rotate(q, k, torch.arange(10))
    assert torch.equal(rk[..., :4], k[..., :4]) and torch.equal(rq[..., :4], q[..., :4])  # content unchanged
    assert torch.equal(rk[:, :1, :, 4:].expand_as(rk[..., 4:]), rk[..., 4:])  # one rotated key for all heads
    assert not torch.equal(rq[:, :1, :, 4:].expand_as(rq[..., 4:]), rq[..., 4:])  # queries stay per head


def test_logits_are_content_plus_shared_rotated_part():
    """Eq. (19): (q_c . k_c + RoPE(q_r) . RoPE(k_r)) / sqrt(d_c + d_r), k_r the heads' mean key slice."""
    enc, rope = make(rope_dim=4), build_encoding("rope", dim=HEADS * 4, num_heads=HEADS, max_length=MAX_LEN,
                                                 causal=True)  # fmt: skip
    q, k = qk(L=10)
    positions = torch.arange(10) * 3
    k_r = k[..., 4:].mean(1, keepdim=True).expand_as(k[..., 4:])
    q_r, k_r = rope.rotate(q[..., 4:], k_r, positions)
    expected = (q[..., :4] @ k[..., :4].transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) / (4 + 4) ** 0.5
    torch.testing.assert_close(hook_logits(enc, q, k, positions), expected)


def test_positional_part_is_shift_invariant():
    enc = make()
    q, k = qk(L=12)
    positions = torch.arange(12)
    torch.testing.assert_close(hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions + 37))
    assert not torch.allclose(hook_logits(enc, q, k, positions), hook_logits(enc, q, k, positions * 2))


def test_one_shared_key_projection_per_layer():
    """No parameter of the encoding's own; the shared key reads each layer's own W_k, so two layers' shared
    keys of the same input differ (one W^KR of d_r x C per layer)."""
    arch = ArchConfig("rope_decoupled", dim=DIM, depth=2, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN)
    model = Transformer(arch, causal=True)
    assert dict(model.encoding.named_parameters()) == {}
    x = torch.randn(1, 6, DIM)
    shared = []
    for block in model.blocks:
        q, k, _ = block.attn.qkv(x).view(1, 6, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        _, rk = model.encoding.rotate(q, k, torch.arange(6))
        shared.append(rk[:, 0, :, -model.encoding.rope_dim :])
    assert shared[0].shape == (1, 6, model.encoding.rope_dim) and not torch.allclose(shared[0], shared[1])


def test_default_width_keeps_deepseek_ratio():
    for dim, heads, width in ((192, 1, 64), (32, 4, 2), (96, 2, 16)):
        enc = build_encoding("rope_decoupled", dim=dim, num_heads=heads, max_length=MAX_LEN, causal=True)
        assert enc.rope_dim == width and isinstance(enc, RoPE)


@pytest.mark.parametrize("options", [{"rope_dim": 3}, {"rope_dim": 10}, {"rotary_dim": 4}, {"rotary_heads": 1}])
def test_bad_widths_are_one_line(options):
    with pytest.raises(ConfigError) as error:
        make(**options)
    assert "\n" not in str(error.value) and "rope_dim" in str(error.value)


def test_trains():
    torch.manual_seed(0)
    arch = ArchConfig("rope_decoupled", dim=DIM, depth=2, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN)
    model = Transformer(arch, causal=True)
    head = torch.nn.Linear(DIM, VOCAB)
    optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=3e-3)
    tokens = torch.randint(0, VOCAB, (8, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(head(model(tokens[:, :-1])).transpose(1, 2), tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
