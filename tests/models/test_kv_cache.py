"""KV cache (issue 26, finding 4): incremental decoding through `Transformer.decode` gives the logits of the
full recompute for every causal encoding (cached, or recomputed where the encoding declares it cannot be
cached); the translation model's greedy decoding and beam search give the same hypotheses with and without
the cache.

Claims of docs/encodings.md covered here:
- "decoding keeps each layer's keys and values ... equal to the full recompute": test_cached_decoding_equals_recompute
- "xpos, dynamic NTK, LongRoPE, shaw with values and randomize_positions_eval are not cacheable and recompute":
  test_cacheable_declarations, test_cached_decoding_equals_recompute (their variants but the random one)
- "greedy and beam search decode through the cache": test_translation_decoding_with_and_without_cache
"""

import pytest
import torch
from helpers import randomize_
from test_transformer import DEPTH, DIM, HEADS, MAX_LEN, VOCAB

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS
from lightning_modules.transformer import KVCache, Transformer
from pe_core.errors import ConfigError

NOT_CACHEABLE = {  # (encoding, options) that must recompute, and why
    ("xpos", ()): "the decay's centre moves with the longest position",
    ("grape_m_ctx", ()): "its content phase is a running sum over the whole sequence",
    ("rope", (("dynamic_ntk_factor", 2.0), ("original_length", 4))): "frequencies follow the length",
    (
        "rope",
        (
            ("longrope_short_factor", (1.0, 1.5, 2.0, 3.0)),
            ("longrope_long_factor", (2.0, 4.0, 8.0, 16.0)),
            ("original_length", 4),
        ),
    ): "the long factors beyond original_length",
    ("shaw", (("values", True),)): "its value term needs the square weights",
    ("alibi", (("randomize_positions", 64), ("randomize_positions_eval", True))): "positions drawn afresh",
}
# every registered encoding, and the non-cacheable variants whose recomputation is deterministic
VARIANTS = [(name, ()) for name in ENCODINGS] + [key for key in NOT_CACHEABLE if key[0] != "alibi"]


def make_model(name: str, options: tuple, post_norm: bool = False) -> Transformer:
    options = {key: list(value) if isinstance(value, tuple) else value for key, value in options}  # lists hashed
    arch = ArchConfig(name, encoding_options=options, dim=DIM, depth=DEPTH, num_heads=HEADS, dropout=0.0,
                      vocab_size=VOCAB, max_length=MAX_LEN, post_norm=post_norm)  # fmt: skip
    torch.manual_seed(0)
    return randomize_(Transformer(arch, causal=True)).eval()


def test_cacheable_declarations():
    for (name, options), _why in NOT_CACHEABLE.items():
        assert not make_model(name, options).encoding.cacheable, name
    cacheable = {name for name in ENCODINGS if make_model(name, ()).encoding.cacheable}
    assert cacheable == set(ENCODINGS) - {name for (name, options) in NOT_CACHEABLE if not options}


@torch.no_grad()
@pytest.mark.parametrize("post_norm", [False, True])
@pytest.mark.parametrize("name, options", VARIANTS, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v)))
def test_cached_decoding_equals_recompute(name, options, post_norm):
    """A 4-token prompt, then one token at a time up to 13: every step's logits equal those of the forward of
    the prefix so far (for all but a `length_dependent` encoding, the rows of one forward of all 13)."""
    model = make_model(name, options, post_norm)
    tokens = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(1))
    prefixes = [model(tokens[:, :4])] + [model(tokens[:, : t + 1])[:, -1:] for t in range(4, 13)]
    want = torch.cat(prefixes, dim=1) @ model.token_emb.weight.T  # (B, L, V)
    if not model.encoding.length_dependent:
        torch.testing.assert_close(want, model(tokens) @ model.token_emb.weight.T, atol=1e-5, rtol=1e-5)
    cache = KVCache(DEPTH)
    steps = [model.decode(tokens[:, :4], cache)] + [model.decode(tokens[:, t : t + 1], cache) for t in range(4, 13)]
    got = torch.cat(steps, dim=1) @ model.token_emb.weight.T
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    filled = cache.layers[0].keys is not None
    assert filled == model.encoding.cacheable  # the others recomputed, leaving the layer caches empty
    if filled:
        width = DIM // HEADS * (2 if name == "pope" else 1)  # PoPE's keys are (cos, sin) halves
        assert cache.layers[0].keys.shape == (2, HEADS, 13, width)


def test_decode_needs_a_causal_model():
    model = Transformer(ArchConfig("rope", dim=DIM, num_heads=HEADS, vocab_size=VOCAB), causal=False)
    with pytest.raises(ConfigError, match="causal model"):
        model.decode(torch.zeros(1, 2, dtype=torch.long), KVCache(2))


@pytest.mark.parametrize("decoder_encoding", ["rope", "alibi", "t5_bias", "fox", "cope", "learned", "xpos"])
def test_translation_decoding_with_and_without_cache(decoder_encoding):
    from test_translation import tiny_model

    model = tiny_model(40, decoder=decoder_encoding)
    src = torch.randint(4, 40, (3, 7), generator=torch.Generator().manual_seed(2))
    src_mask = torch.arange(7)[None, :] < torch.tensor([7, 5, 3])[:, None]
    assert torch.equal(model.greedy(src, src_mask, max_len=8), model.greedy(src, src_mask, max_len=8, cache=False))
    cached, cached_scores = model.beam_search(src, src_mask, beam_size=3, max_len=8)
    plain, plain_scores = model.beam_search(src, src_mask, beam_size=3, max_len=8, cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cached_scores, plain_scores, atol=1e-5, rtol=1e-5)
