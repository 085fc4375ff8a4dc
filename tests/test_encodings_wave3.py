"""Third wave: CoPE, Sandwich, forgetting attention (fox), ALiBi on a subset of heads, and RoPE's YaRN, dynamic
NTK and p-RoPE options; parity with x-transformers and transformers' RoPE initialisation where they coincide,
closed forms elsewhere. Registry-wide tests (test_encodings.py) pick the new encodings up by themselves.

README claims covered here:
- "cope | contextual positions: gate sums sum_t sigmoid(q.k), interpolated q.e[p] ...; causal only":
  test_cope_matches_x_transformers, test_cope_counts_gates, test_causal_only_refuses_an_encoder
- "sandwich | bias (p_i.p_j - d'/2) H/(8h) from sinusoids of width sandwich_dim ..., no input embedding":
  test_sandwich_closed_form
- "fox | forgetting decay sum log sigmoid(w.k_t + b) (x-transformers' data-dependent ALiBi ...); causal only":
  test_fox_matches_x_transformers_data_dependent_alibi, test_fox_bias_is_a_decay, test_causal_only_refuses_an_encoder
- "alibi takes heads (ALiBi on the first k heads only, x-transformers' alibi_num_heads)":
  test_alibi_heads_subset_matches_x_transformers
- "yarn_factor (YaRN ...) ... original_length ... checked against transformers' RoPE initialisation", and rope's
  "interleaved pairs": test_yarn_matches_transformers, test_yarn_rotation_matches_transformers_half_split_layout
- "dynamic_ntk_factor (dynamic NTK: the base grows with the evaluated length)": test_dynamic_ntk_matches_transformers,
  test_dynamic_ntk_rotates_with_the_frequencies_of_each_evaluated_length
- "rope_fraction (p-RoPE ...: only the highest-frequency fraction rotates)":
  test_p_rope_rotates_only_the_highest_frequencies, test_p_rope_matches_transformers_proportional_rope
- "an encoding option of the wrong type or range" is one line: test_bad_options_are_one_line
"""

import math

import pytest
import torch
from helpers import randomize_
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from x_transformers.x_transformers import AlibiPositionalBias, CoPE, DataDependentAlibi

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import build_encoding
from lightning_modules.transformer import Transformer
from pe_sweeps.errors import ConfigError

DIM, HEADS, MAX_LEN = 32, 4, 64
HEAD_DIM = DIM // HEADS


def make(name, causal=True, **options):
    return build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal, **options).eval()


def qk(B=2, L=12, seed=0):
    return torch.randn(2, B, HEADS, L, HEAD_DIM, generator=torch.Generator().manual_seed(seed)).unbind(0)


def test_cope_matches_x_transformers():
    enc = randomize_(make("cope", max_pos=8))
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
    enc = make("cope", max_pos=16)
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


def test_fox_matches_x_transformers_data_dependent_alibi():
    enc = randomize_(make("fox"))
    q, k = qk(L=15)
    ref = DataDependentAlibi(DIM, HEADS, causal=True)
    ref.to_forget_gates[0].load_state_dict(enc.gates.state_dict())
    keys = k.transpose(1, 2).reshape(2, 15, DIM)
    torch.testing.assert_close(enc.content_bias(q, k, torch.arange(15)).tril(), ref(keys).tril(), atol=1e-5, rtol=1e-5)


def test_fox_bias_is_a_decay():
    enc = make("fox")
    q, k = qk(L=10)
    bias = enc.content_bias(q, k, torch.arange(10))
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    lower = bias.tril(-1)
    assert (lower <= 0).all() and (bias[..., 9, :8] <= bias[..., 9, 1:9]).all()  # farther keys decay more


@pytest.mark.parametrize("heads", [1, 2, 3, 4])
def test_alibi_heads_subset_matches_x_transformers(heads):
    enc = make("alibi", heads=heads)
    ref = AlibiPositionalBias(heads=heads, total_heads=HEADS)
    torch.testing.assert_close(enc.bias(torch.arange(11)), ref(11, 11))
    assert (enc.bias(torch.arange(11))[heads:] == 0).all()


def test_sandwich_closed_form():
    enc = make("sandwich", sandwich_dim=16)
    positions = torch.tensor([0, 3, 4, 10, 31])
    bias = enc.bias(positions)
    for h in range(HEADS):
        for a, i in enumerate(positions.tolist()):
            for b, j in enumerate(positions.tolist()):
                inner = sum(math.cos((i - j) / 10000 ** (2 * m / 16)) for m in range(1, 9))
                expected = (inner - 8) * HEADS / (8 * (h + 1))
                assert bias[h, a, b].item() == pytest.approx(expected, abs=1e-4)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all() and (bias <= 1e-6).all()
    torch.testing.assert_close(bias, bias.transpose(-1, -2))  # bidirectional: symmetric
    x = torch.randn(2, len(positions), DIM)
    assert torch.equal(enc.embed(x, positions), x)  # no input embedding: the bias is its only position signal


def hf_config(rope_type: str, **params) -> LlamaConfig:
    rope = {"rope_type": rope_type, "rope_theta": 10000.0, **params}
    return LlamaConfig(hidden_size=DIM, num_attention_heads=HEADS, max_position_embeddings=16, rope_parameters=rope)


@pytest.mark.parametrize("factor, original", [(4.0, 16), (8.0, 4096), (2.5, 100)])
def test_yarn_matches_transformers(factor, original):
    enc = make("rope", yarn_factor=factor, original_length=original)
    config = hf_config("yarn", factor=factor, original_max_position_embeddings=original)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(enc.inv_freq, inv_freq)
    assert enc.attention_scale() == pytest.approx(attention_factor**2 * HEAD_DIM**-0.5)


@pytest.mark.parametrize("length", [10, 16, 40, 64])
def test_dynamic_ntk_matches_transformers(length):
    enc = make("rope", dynamic_ntk_factor=2.0, original_length=16)
    config = hf_config("dynamic", factor=2.0)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=length)
    torch.testing.assert_close(enc.frequencies(length), inv_freq)


@pytest.mark.parametrize("length", [10, 16, 40])
def test_dynamic_ntk_rotates_with_the_frequencies_of_each_evaluated_length(length):
    """Up to original_length the rows of the rotations table; beyond it, angles at the base of that length
    (computed in the forward, never from a table built for another length)."""
    enc = make("rope", dynamic_ntk_factor=2.0, original_length=16)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config("dynamic", factor=2.0), "cpu", seq_len=length)
    angles = torch.arange(length).float()[:, None] * inv_freq
    q, k = qk(L=length)
    ours_q, _ = enc.rotate(q, k, torch.arange(length))
    cos, sin = angles.cos().repeat_interleave(2, -1), torch.stack((-angles.sin(), angles.sin()), -1).flatten(-2)
    swapped = torch.stack((q[..., 1::2], q[..., 0::2]), -1).flatten(-2)
    torch.testing.assert_close(ours_q, q * cos + swapped * sin, atol=1e-5, rtol=1e-5)


def test_yarn_rotation_matches_transformers_half_split_layout():
    """Our interleaved pairs (2i, 2i+1) are transformers' (i, i + R/2): the same scores after a permutation."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    enc = make("rope", yarn_factor=4.0, original_length=16)
    config = hf_config("yarn", factor=4.0, original_max_position_embeddings=16)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    L = 40
    q, k = qk(L=L)
    angles = torch.arange(L).float()[:, None] * inv_freq
    emb = torch.cat((angles, angles), -1)
    perm = torch.cat((torch.arange(0, HEAD_DIM, 2), torch.arange(1, HEAD_DIM, 2)))  # interleaved -> half split
    q_hf, k_hf = apply_rotary_pos_emb(
        q[..., perm], k[..., perm], emb.cos()[None] * attention_factor, emb.sin()[None] * attention_factor
    )
    ours_q, ours_k = enc.rotate(q, k, torch.arange(L))
    scores = ours_q @ ours_k.transpose(-1, -2) * enc.attention_scale()
    torch.testing.assert_close(scores, q_hf @ k_hf.transpose(-1, -2) * HEAD_DIM**-0.5, atol=1e-4, rtol=1e-4)


def test_p_rope_rotates_only_the_highest_frequencies():
    full, partial = make("rope"), make("rope", rope_fraction=0.5)
    torch.testing.assert_close(partial.inv_freq[:2], full.inv_freq[:2])
    assert (partial.inv_freq[2:] == 0).all()
    q, k = qk(L=9)
    rq, rk = partial.rotate(q, k, torch.arange(9))
    torch.testing.assert_close(rq[..., 4:], q[..., 4:])  # pairs 2, 3 (dims 4-7) unrotated


P_ROPE_FRACTIONS = [0.1, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0]


@pytest.mark.parametrize("head_dim", [8, 12, 16, 24, 32, 64, 128])
def test_p_rope_matches_transformers_proportional_rope(head_dim):
    """The inverse frequencies, hence how many rotate (int(p D // 2)), are transformers' "proportional" rope
    type's for every fraction: a rounded count rotated one more in 15 of these 56 settings."""
    for fraction in P_ROPE_FRACTIONS:
        enc = build_encoding("rope", dim=2 * head_dim, num_heads=2, max_length=16, causal=True, rope_fraction=fraction)
        rope = {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": fraction}
        config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, rope_parameters=rope)
        inv_freq, _ = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
        assert int((enc.inv_freq != 0).sum()) == int((inv_freq != 0).sum()), (head_dim, fraction)
        torch.testing.assert_close(enc.inv_freq, inv_freq, msg=f"head dim {head_dim}, rope_fraction {fraction}")


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("alibi", {"heads": 5}, r"alibi heads must be in \[1, num_heads=4\]"),
        ("alibi", {"heads": 0}, "alibi heads"),
        ("rope", {"yarn_factor": 4.0}, "needs original_length"),
        ("rope", {"yarn_factor": 0.5, "original_length": 8}, "yarn_factor must be > 1"),
        ("rope", {"yarn_factor": 2.0, "interpolation_factor": 2.0, "original_length": 8}, "exclude other extensions"),
        ("rope", {"rope_fraction": 0.0}, r"rope_fraction must be in \(0, 1\]"),
        ("rope", {"original_length": 8}, "only with yarn_factor or dynamic_ntk_factor"),
        ("sandwich", {"sandwich_dim": 7}, "sandwich_dim must be even"),
        ("cope", {"max_pos": 1}, "max_pos must be >= 2"),
        ("sandwich", {"heads": 2}, "encoding 'sandwich' has no option 'heads'"),
        ("alibi", {"yarn_factor": 2.0}, "encoding 'alibi' has no option 'yarn_factor'"),
    ],
)
def test_bad_options_are_one_line(name, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        make(name, **options)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["cope", "fox"])
def test_causal_only_refuses_an_encoder(name):
    with pytest.raises(ConfigError, match=f"encoding '{name}' is causal-only"):
        make(name, causal=False)


@pytest.mark.parametrize(
    "name, options",
    [("cope", {}), ("fox", {}), ("sandwich", {}), ("alibi", {"heads": 2}), ("rope", {"rope_fraction": 0.25}),
     ("rope", {"yarn_factor": 4.0, "original_length": 8}), ("rope", {"dynamic_ntk_factor": 2.0, "original_length": 8})],
)  # fmt: skip
def test_transformer_runs_and_learns(name, options):
    torch.manual_seed(0)
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=2, num_heads=HEADS, vocab_size=20, max_length=32)
    model = Transformer(arch, causal=True)
    tokens = torch.randint(0, 20, (3, 24))
    padding = torch.ones(3, 24, dtype=torch.bool)
    padding[1, 18:] = False
    out = model(tokens, padding_mask=padding)
    assert out.shape == (3, 24, DIM) and torch.isfinite(out).all()
    # a causal model: the first 10 outputs do not depend on later tokens
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 20
    torch.testing.assert_close(model(changed)[:, :10], model(tokens)[:, :10])
    out.sum().backward()
    grads = [p.grad for p in model.encoding.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
