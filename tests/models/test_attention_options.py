"""Architecture options of every encoding (issue 46): attention sinks (`arch.attention_sinks`, gpt-oss) and QK-norm
(`arch.qk_norm`). SDPA, FlexAttention and the KV cache equal the written-out reference (RMSNorm of q and k per head
before the encoding's rotation; the sink logit s_h appended as a column, softmax, the column dropped), for an
additive-bias, a rotary, a content-bias and a plain encoding, causal and bidirectional, with padding; every
encoding trains with each option on, or refuses it in one line; the parameters' keys, initialisation and a
checkpoint round trip.

FlexAttention runs eagerly on the CPU here, forward only (it has no backward on the CPU).
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import randomize_
from torch import Tensor, nn

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.transformer import QK_NORM_EPS, Attention, KVCache, Transformer, layer_masks
from pe_core.errors import ConfigError

VOCAB, DIM, HEADS, DEPTH, MAX_LEN = 20, 16, 2, 2, 32
# an additive bias (with a score_mod), a rotary one, a content bias (q and k read), no position at all
REFERENCE_NAMES = ["alibi", "rope", "shaw", "none"]
OPTIONS = {"sinks": {"attention_sinks": True}, "qk_norm": {"qk_norm": True},
           "both": {"attention_sinks": True, "qk_norm": True}}  # fmt: skip


def arch(name: str, backend: str = "sdpa", **options) -> ArchConfig:
    return ArchConfig(name, dim=DIM, depth=DEPTH, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN,
                      attention_backend=backend, **options)  # fmt: skip


def model(name: str, causal: bool, backend: str = "sdpa", seed: int = 0, **options) -> Transformer:
    """A model with every parameter non-trivial: sinks of size ~1 (their effect visible), RMSNorm scales near 1."""
    torch.manual_seed(seed)
    m = randomize_(Transformer(arch(name, backend, **options), causal=causal), seed)
    with torch.no_grad():
        for module in m.modules():
            if isinstance(module, nn.RMSNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape))
            if isinstance(module, Attention) and module.sinks is not None:
                module.sinks.copy_(torch.randn(HEADS))
    return m.eval()


def reference(attn: Attention, x: Tensor, encoding, positions, causal: bool, padding_mask: Tensor | None) -> Tensor:
    """What `Attention` must compute, written out: per-head RMSNorm of q and k, the encoding's hooks, the logits,
    then (with sinks) gpt-oss's concat-then-softmax: a column of s_h appended, softmax, the column dropped."""
    B, L, C = x.shape
    q, k, v = attn.qkv(x).view(B, L, 3, HEADS, C // HEADS).permute(2, 0, 3, 1, 4)  # each (B, H, L, D)
    if attn.q_norm is not None:
        q = F.rms_norm(q, (C // HEADS,), attn.q_norm.weight, QK_NORM_EPS)
        k = F.rms_norm(k, (C // HEADS,), attn.k_norm.weight, QK_NORM_EPS)
    q, k = encoding.rotate(q, k, positions)
    logits = q @ k.transpose(-1, -2) * encoding.attention_scale()  # (B, H, L, L)
    for term in (encoding.bias(positions), encoding.content_bias(q, k, positions)):
        if term is not None:
            logits = logits + term
    allowed = torch.ones(B, 1, L, L, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(L, L).tril().bool()
    if padding_mask is not None:
        allowed &= padding_mask[:, None, None, :]
    logits = logits.masked_fill(~allowed, float("-inf"))
    if attn.sinks is not None:
        logits = torch.cat([logits, attn.sinks[None, :, None, None].expand(B, HEADS, L, 1)], dim=-1)
    weights = logits.softmax(dim=-1)[..., :L]
    return attn.out((weights @ v).transpose(1, 2).reshape(B, L, C))


def flex_capable(name: str) -> bool:
    return build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True).flex_capable


# eager FlexAttention takes ~2 s a case on the CPU: both options at once, on a score_mod bias and a rotation
CASES = [(name, "sdpa", option) for name in REFERENCE_NAMES for option in OPTIONS] + [
    (name, "flex", "both") for name in ("alibi", "rope") if flex_capable(name)
]


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("name", "backend", "option"), CASES)
def test_attention_equals_the_written_out_reference(name, backend, option, causal):
    """One layer's attention, padded batch and per-row positions, through SDPA or FlexAttention."""
    B, L = 3, 9
    m = model(name, causal, backend, **OPTIONS[option])
    attn, encoding = m.blocks[0].attn, m.encoding
    x = torch.randn(B, L, DIM, generator=torch.Generator().manual_seed(1))
    padding_mask = torch.arange(L)[None, :] < torch.tensor([L, 6, 3])[:, None]
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [4], [2]])):
        got = attn(x, encoding, positions, *layer_masks(m, positions, x, padding_mask), causal)
        want = reference(attn, x, encoding, positions, causal, padding_mask)
        rows = padding_mask if causal else slice(None)  # a causal model leaves its right padding unmasked
        torch.testing.assert_close(got[rows], want[rows], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_sinks_change_the_output_and_minus_infinity_removes_them():
    """The sink is live (the output moves with s_h), and s_h = -inf gives the model without sinks."""
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    with_sinks, without = model("rope", True, attention_sinks=True), model("rope", True)
    assert not torch.allclose(with_sinks(tokens), without(tokens), atol=1e-3)
    state = {key: value for key, value in with_sinks.state_dict().items() if not key.endswith("sinks")}
    without.load_state_dict(state)
    for block in with_sinks.blocks:
        block.attn.sinks.fill_(float("-inf"))
    torch.testing.assert_close(with_sinks(tokens), without(tokens), atol=1e-6, rtol=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("name", ["alibi", "rope"])
def test_cached_decoding_equals_recompute(name, option):
    m = model(name, True, **OPTIONS[option])
    tokens = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(3))
    cache = KVCache(DEPTH)
    steps = [m.decode(tokens[:, :4], cache)] + [m.decode(tokens[:, t : t + 1], cache) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), m(tokens), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_sinks_with_a_sliding_window_as_gpt_oss():
    """gpt-oss alternates banded and full layers, sinks in both: a windowed layer's sink joins its band's softmax
    (the full forward, with its band mask, equals cached decoding, which cuts the band itself)."""
    torch.manual_seed(0)
    config = arch("rope", attention_sinks=True, qk_norm=True, window=[3, None])
    m = randomize_(Transformer(config, causal=True)).eval()
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(7))
    cache = KVCache(DEPTH)
    steps = [m.decode(tokens[:, :2], cache)] + [m.decode(tokens[:, t : t + 1], cache) for t in range(2, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), m(tokens), atol=1e-5, rtol=1e-5)


def refusal(name: str, **options) -> str | None:
    """The one-line ConfigError of `attention_sinks` for encoding `name` (with `options`), or None: it takes them."""
    try:
        Transformer(arch(name, attention_sinks=True, encoding_options=options or None), causal=True)
    except ConfigError as error:
        return str(error)
    return None


def test_sinks_refuse_an_attention_that_computes_its_own_weights():
    """Stick-breaking replaces the softmax; Shaw's relative values index the weights by distance. Each in one line
    naming the problem and the choices; Shaw without relative values takes sinks."""
    refused = {name for name in ENCODINGS if refusal(name) is not None}
    assert refused == {name for name, cls in ENCODINGS.items() if not cls.softmax_attention}
    assert "stick_breaking" in refused
    message = refusal("stick_breaking")
    assert "attention is not a softmax" in message and "rope" in message and "\n" not in message
    message = refusal("shaw", values=True)
    assert "computes the weights" in message and "arch.attention_sinks=false" in message and "\n" not in message


def train_losses(name: str, steps: int = 6, **options) -> list[float]:
    """Losses of a few Adam steps of a tiny causal model predicting a fixed batch's tokens."""
    torch.manual_seed(0)
    m = Transformer(arch(name, **options), causal=True)
    head = nn.Linear(DIM, VOCAB)
    optimizer = torch.optim.Adam([*m.parameters(), *head.parameters()], lr=1e-2)
    tokens = torch.randint(0, VOCAB, (4, 10), generator=torch.Generator().manual_seed(4))
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(head(m(tokens[:, :-1])).flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("option", ["sinks", "qk_norm"])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_encoding_trains_with_the_option(name, option):
    """Loss finite and decreasing over a few steps, with gradients reaching the option's parameters; or the
    one-line refusal (sinks: an attention that is not SDPA's / FlexAttention's softmax)."""
    if option == "sinks" and refusal(name) is not None:
        pytest.skip(f"{name} refuses attention sinks: {refusal(name)}")
    losses = train_losses(name, **OPTIONS[option])
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses


def test_parameters_keys_and_initialisation():
    """Per layer: `attn.sinks` (H,) drawn N(0, 0.02^2) (transformers' GptOss), `attn.q_norm.weight` and
    `attn.k_norm.weight` (D,) ones; without the options no new key (earlier checkpoints load)."""
    torch.manual_seed(0)
    plain = set(Transformer(arch("rope"), causal=True).state_dict())
    m = Transformer(arch("rope", attention_sinks=True, qk_norm=True), causal=True)
    state = m.state_dict()
    new = {f"blocks.{i}.attn.{key}" for i in range(DEPTH) for key in ("sinks", "q_norm.weight", "k_norm.weight")}
    assert set(state) - plain == new and plain <= set(state)
    sinks = torch.cat([state[f"blocks.{i}.attn.sinks"] for i in range(DEPTH)])
    assert sinks.shape == (DEPTH * HEADS,) and sinks.abs().max() < 0.1 and sinks.std() > 0
    for i in range(DEPTH):
        assert torch.equal(state[f"blocks.{i}.attn.q_norm.weight"], torch.ones(DIM // HEADS))
        assert torch.equal(state[f"blocks.{i}.attn.k_norm.weight"], torch.ones(DIM // HEADS))
    assert not any("sinks" in key or "_norm" in key for key in plain)


def test_checkpoint_round_trip(tmp_path):
    """The options are saved in the architecture dict (weights_only) and rebuild the same model, strict keys."""
    config = arch("alibi", attention_sinks=True, qk_norm=True)
    m = model("alibi", True, attention_sinks=True, qk_norm=True)
    torch.save({"hyper_parameters": {"arch": config.as_dict()}, "state_dict": m.state_dict()}, tmp_path / "a.ckpt")
    saved = torch.load(tmp_path / "a.ckpt", weights_only=True)
    loaded = ArchConfig.of(saved["hyper_parameters"]["arch"])
    assert loaded == config and loaded.attention_sinks and loaded.qk_norm
    again = Transformer(loaded, causal=True).eval()
    again.load_state_dict(saved["state_dict"])
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
    assert torch.equal(again(tokens), m(tokens))
    assert ArchConfig.from_hparams({"arch": {"encoding": "rope"}}).attention_sinks is False  # older checkpoints


def test_translation_decoder_takes_the_options():
    """The translation model's encoder and decoder self-attention carry them; cached decoding equals recomputing."""
    from lightning_modules.translation import TranslationModel

    torch.manual_seed(0)
    config = ArchConfig("rope", dim=DIM, depth=1, num_heads=HEADS, vocab_size=40, max_length=MAX_LEN,
                        attention_sinks=True, qk_norm=True)  # fmt: skip
    m = randomize_(TranslationModel(config, decoder_encoding="alibi", decoder_depth=1)).eval()
    keys = set(m.state_dict())
    assert {key for key in keys if key.endswith("attn.sinks")} == {"encoder.blocks.0.attn.sinks",
                                                                   "decoder.blocks.0.self_attn.sinks"}  # fmt: skip
    assert sum(key.endswith(("q_norm.weight", "k_norm.weight")) for key in keys) == 4
    src = torch.randint(4, 40, (3, 7), generator=torch.Generator().manual_seed(2))
    src_mask = torch.arange(7)[None, :] < torch.tensor([7, 5, 3])[:, None]
    cached, cached_scores = m.beam_search(src, src_mask, beam_size=3, max_len=8)
    plain, plain_scores = m.beam_search(src, src_mask, beam_size=3, max_len=8, cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cached_scores, plain_scores, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention has no backward on the CPU")
@pytest.mark.parametrize("name", ["alibi", "rope"])
def test_flex_gradients_with_sinks_match_sdpa_on_cuda(name):
    """The sink's gradient through FlexAttention's logsumexp equals the SDPA sink key's."""
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(6)).cuda()
    results = []
    for backend in ("sdpa", "flex"):
        m = model(name, True, backend, attention_sinks=True, qk_norm=True).cuda()
        m(tokens).square().sum().backward()
        results.append({key: p.grad for key, p in m.named_parameters() if p.grad is not None})
    assert results[0].keys() == results[1].keys() and "blocks.0.attn.sinks" in results[0]
    for key in results[0]:
        torch.testing.assert_close(results[1][key], results[0][key], atol=1e-3, rtol=1e-3, msg=key)
