"""Tests for lightning_modules/transformer.py, every one run over the ENCODINGS registry, causal and
bidirectional: shapes, SDPA == a plain reference attention, causal no-leak, padding, explicit positions,
shift invariance of the whole model.

Claims of docs/encodings.md covered here:
- "bias (content-independent logit term, computed once per forward and shared by all layers)"; t5_bias "shared by
  all layers": test_bias_is_computed_once_per_forward_and_shared_by_all_layers
- "A causal model without a logit term (rope, xpos, none, absolute encodings) passes no mask and is_causal=True ...
  also with padding": test_the_documented_encodings_without_a_logit_term_take_the_fused_causal_path,
  test_sdpa_gets_no_mask_unless_a_bias_or_padding_needs_one
- "batches are right-padded, so no real query sees a padded key": test_right_padding_does_not_change_real_tokens,
  test_fully_masked_rows_stay_finite_and_do_not_touch_real_tokens (test_encodings_contract.py)
- "A bias, a content term or bidirectional padding fold into one mask per forward":
  test_sdpa_gets_no_mask_unless_a_bias_or_padding_needs_one, test_attention_content_bias_hook_matches_reference
- "the registry-parametrised tests (shapes, no causal leakage, padding, shift invariance, SDPA == reference
  attention) pick it up": test_output_shape_and_positional_logits, test_no_leak_from_future_tokens,
  test_right_padding_does_not_change_real_tokens, test_shift_invariance_of_the_model, test_attention_matches_reference
- learned "positions beyond max_length are a clear error": test_too_long_input
"""

import pytest
import torch
from helpers import load_module, randomize_
from torch import Tensor

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, PositionalEncoding
from lightning_modules.encodings.alibi import ALiBi
from lightning_modules.transformer import Attention, Transformer, attention_masks
from pe_core.errors import ConfigError

VOCAB, DIM, HEADS, DEPTH, MAX_LEN = 50, 32, 4, 2, 64
HEAD_DIM = DIM // HEADS
NAMES = list(ENCODINGS)
CAUSAL = [True, False]


def make_model(name: str, causal: bool, post_norm: bool = False, max_length: int = MAX_LEN) -> Transformer:
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    arch = ArchConfig(name, dim=DIM, depth=DEPTH, num_heads=HEADS, dropout=0.0, post_norm=post_norm, vocab_size=VOCAB,
                      max_length=max_length)  # fmt: skip
    model = Transformer(arch, causal=causal)
    return randomize_(model).eval()


def tokens(*shape: int, seed: int = 0) -> Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def reference_attention(q, k, v, scale: float, logits_terms, allowed: Tensor) -> Tensor:
    """softmax(q k^T * scale + bias + mask) v, written out; allowed: bool (..., L, L)."""
    logits = q @ k.transpose(-1, -2) * scale  # (B, H, L, L)
    for term in logits_terms:
        if term is not None:
            logits = logits + term
    logits = logits.masked_fill(~allowed, float("-inf"))
    return logits.softmax(dim=-1) @ v  # (B, H, L, D)


def reference_attention_module(attn: Attention, x, encoding, positions, causal, padding_mask) -> Tensor:
    """What `Attention` must compute, from its weights and the encoding's hooks, with an independent mask."""
    B, L, C = x.shape
    q, k, v = attn.qkv(x).view(B, L, 3, HEADS, C // HEADS).permute(2, 0, 3, 1, 4)  # each (B, H, L, D)
    q, k = encoding.rotate(q, k, positions)
    allowed = torch.ones(B, 1, L, L, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(L, L).tril().bool()
    if padding_mask is not None:
        allowed &= padding_mask[:, None, None, :]
    terms = (encoding.bias(positions), encoding.content_bias(q, k, positions))
    y = reference_attention(q, k, v, encoding.attention_scale(), terms, allowed)
    return attn.out(y.transpose(1, 2).reshape(B, L, C))


def run_attention(attn: Attention, x, encoding, positions, causal, padding_mask) -> Tensor:
    """The Transformer's own path: masks built once, then the Attention module."""
    mask, allowed = attention_masks(encoding.bias(positions), x.shape[1], causal, padding_mask, x.device)
    return attn(x, encoding, positions, mask, allowed, causal)


def assert_real_rows_close(got: Tensor, want: Tensor, causal: bool, padding_mask: Tensor | None) -> None:
    """got == want at every query, or, causal with (right) padding, at the real queries: a causal model
    does not mask padded keys (no real query sees them), so only padded queries may differ."""
    if causal and padding_mask is not None:
        got, want = got[padding_mask], want[padding_mask]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("post_norm", [False, True])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_output_shape_and_positional_logits(name, causal, post_norm):
    B, L = 3, 11
    model = make_model(name, causal, post_norm)
    out = model(tokens(B, L))
    assert out.shape == (B, L, DIM) and out.isfinite().all()
    logits = model.encoding.positional_logits(L)
    bias = model.encoding.bias(torch.arange(L))
    assert (logits is None) == (bias is None)
    if logits is not None:
        assert logits.shape == (HEADS, L, L)
        assert torch.equal(logits, bias.expand(HEADS, L, L))


# ----------------------------------------------------------------------------- SDPA == reference


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_attention_matches_reference(name, causal, padded):
    if not ENCODINGS[name].softmax_attention:
        pytest.skip(
            f"{name} replaces softmax attention: checked against its own reference (test_encodings_attention.py)"
        )
    torch.manual_seed(0)
    B, L = 3, 10
    model = make_model(name, causal)
    attn, enc = model.blocks[0].attn, model.encoding
    x = torch.randn(B, L, DIM)
    padding_mask = None
    if padded:
        padding_mask = torch.arange(L)[None, :] < torch.tensor([L, 7, 3])[:, None]  # right padding
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [5], [2]])):
        got = run_attention(attn, x, enc, positions, causal, padding_mask)
        want = reference_attention_module(attn, x, enc, positions, causal, padding_mask)
        assert_real_rows_close(got, want, causal, padding_mask)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_sdpa_gets_no_mask_unless_a_bias_or_padding_needs_one(name, causal, padded, monkeypatch):
    """Intercepts SDPA: causal models without a logit term pass (mask None, is_causal True), the fused causal
    kernel (even with right padding); a bias or content term, or bidirectional padding, folds into one mask
    whose disallowed entries are exactly the causal triangle and the padded keys."""
    B, L = 2, 8
    model = make_model(name, causal)
    padding_mask = (torch.arange(L)[None, :] < torch.tensor([L, 5])[:, None]) if padded else None
    calls, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        calls.append((attn_mask, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model(tokens(B, L), padding_mask=padding_mask)
    if not ENCODINGS[name].softmax_attention:  # its own `attend` replaces SDPA
        assert calls == []
        return
    assert len(calls) == DEPTH
    positions, q = torch.arange(L), torch.randn(B, HEADS, L, HEAD_DIM)
    logit_term = model.encoding.bias(positions) is not None or model.encoding.content_bias(q, q, positions) is not None
    allowed = torch.ones(B, 1, L, L, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(L, L, dtype=torch.bool).tril()
    elif padded:
        allowed &= padding_mask[:, None, None, :]
    for mask, is_causal in calls:
        if causal and not logit_term:
            assert mask is None and is_causal
        elif not logit_term and not padded:
            assert mask is None and not is_causal
        else:
            assert mask is not None and not is_causal
            blocked = ~mask if mask.dtype == torch.bool else mask.isneginf()
            assert torch.equal(blocked.expand(B, HEADS, L, L), ~allowed.expand(B, HEADS, L, L))


class _BiasAndContent(ALiBi):
    """A probe encoding using both the shared bias and the content-relative hook (no registry entry)."""

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        return 0.5 * q.sum(-1, keepdim=True) * k.sum(-1)[..., None, :]  # (B, H, L, L)


class _ContentOnly(PositionalEncoding):
    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        return 0.5 * q.sum(-1, keepdim=True) * k.sum(-1)[..., None, :]


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("probe", [_BiasAndContent, _ContentOnly])
def test_attention_content_bias_hook_matches_reference(probe, causal, padded):
    """The `content_bias` hook is folded into the same mask as the shared bias and the masks."""
    torch.manual_seed(0)
    B, L = 2, 9
    enc = probe(dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal)
    attn = randomize_(Attention(DIM, HEADS, dropout=0.0))
    x, positions = torch.randn(B, L, DIM), torch.arange(L)
    padding_mask = (torch.arange(L)[None, :] < torch.tensor([L, 4])[:, None]) if padded else None
    got = run_attention(attn, x, enc, positions, causal, padding_mask)
    want = reference_attention_module(attn, x, enc, positions, causal, padding_mask)
    assert_real_rows_close(got, want, causal, padding_mask)


# ----------------------------------------------------------------------------- causal no-leak


@pytest.mark.parametrize("post_norm", [False, True])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_no_leak_from_future_tokens(name, causal, post_norm):
    """Causal: d out[t] / d emb[s] is exactly 0 for every s > t (and non-zero for s <= t).
    Bidirectional: the same probe does see the future, so the hook really measures dependence."""
    B, L = 2, 8
    model = make_model(name, causal, post_norm)
    captured = {}

    def leaf_embeddings(module, inputs, output):
        captured["emb"] = output.detach().requires_grad_(True)
        return captured["emb"]

    handle = model.token_emb.register_forward_hook(leaf_embeddings)
    try:
        out = model(tokens(B, L))
    finally:
        handle.remove()
    emb = captured["emb"]
    for t in range(L):
        (grad,) = torch.autograd.grad(out[:, t].sum(), emb, retain_graph=True)  # (B, L, C)
        per_position = grad.abs().sum(dim=(0, 2))  # (L,)
        assert (per_position[: t + 1] > 0).all()
        if causal:
            assert (grad[:, t + 1 :] == 0).all(), f"position {t} sees the future"
        elif t < L - 1:
            assert (per_position[t + 1 :] > 0).all()


# ----------------------------------------------------------------------------- padding


@pytest.mark.parametrize("post_norm", [False, True])
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_right_padding_does_not_change_real_tokens(name, causal, post_norm):
    model = make_model(name, causal, post_norm)
    lengths, L = [6, 4], 9
    seqs = [tokens(n, seed=i) for i, n in enumerate(lengths)]
    batch = tokens(len(lengths), L, seed=99)  # pads are arbitrary tokens
    for b, seq in enumerate(seqs):
        batch[b, : len(seq)] = seq
    padding_mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    out = model(batch, padding_mask=padding_mask)
    for b, seq in enumerate(seqs):
        alone = model(seq[None])[0]
        torch.testing.assert_close(out[b, : len(seq)], alone, atol=1e-5, rtol=1e-5)
    if not causal:  # bidirectionally the pads do matter without the mask, so the mask is what helps
        unmasked = model(batch)
        assert not torch.allclose(unmasked[1, : lengths[1]], out[1, : lengths[1]], atol=1e-4)


# ----------------------------------------------------------------------------- explicit positions


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_explicit_positions_equal_default(name, causal):
    B, L = 3, 10
    model = make_model(name, causal)
    x = tokens(B, L)
    default = model(x)
    assert torch.equal(model(x, positions=torch.arange(L)), default)
    batched = model(x, positions=torch.arange(L).expand(B, L))
    torch.testing.assert_close(batched, default, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_per_row_positions_equal_separate_runs(name, causal):
    """(B, L) positions with a different offset per row equal running each row alone with its (L,)."""
    B, L = 3, 8
    model = make_model(name, causal)
    x = tokens(B, L)
    positions = torch.arange(L) + torch.tensor([[0], [9], [30]])
    out = model(x, positions=positions)
    for b in range(B):
        alone = model(x[b : b + 1], positions=positions[b])
        torch.testing.assert_close(out[b], alone[0], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- shift invariance


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_shift_invariance_of_the_model(name, causal):
    """Shifting every position by 7 leaves a shift-invariant model's outputs alone, moves an absolute one."""
    B, L, shift = 2, 10, 7
    model = make_model(name, causal)
    x = tokens(B, L)
    out, shifted = model(x), model(x, positions=torch.arange(L) + shift)
    if ENCODINGS[name].shift_invariant:
        torch.testing.assert_close(shifted, out, atol=1e-5, rtol=1e-5)
    else:
        assert (shifted - out).abs().max() > 1e-3


@pytest.mark.parametrize(
    "name", ["rope", "xpos", "none", "learned", "sinusoidal", "scaled_sinusoidal", "sinusoidal_learnable"]
)
def test_the_documented_encodings_without_a_logit_term_take_the_fused_causal_path(name, monkeypatch):
    """docs/encodings.md names rope, xpos, none and the absolute encodings as causal models without a logit term:
    SDPA gets no mask and is_causal=True, also with (right) padding."""
    calls, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        calls.append((attn_mask, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    make_model(name, causal=True)(tokens(2, 6), padding_mask=torch.arange(6)[None, :] < torch.tensor([[6], [3]]))
    assert calls == [(None, True)] * DEPTH


@pytest.mark.parametrize("name", NAMES)
def test_bias_is_computed_once_per_forward_and_shared_by_all_layers(name):
    """The contract's `bias`: called once per forward (not once per layer), and every layer receives the same
    merged mask; `content_bias` and `rotate`, by contrast, run in every layer."""
    arch = ArchConfig(name, dim=DIM, depth=3, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN)
    model = Transformer(arch, causal=True)
    enc, calls, masks = model.encoding, {"bias": 0, "content_bias": 0, "rotate": 0}, []
    for hook in calls:
        original = getattr(enc, hook)

        def counted(*args, _hook=hook, _original=original, **kwargs):
            calls[_hook] += 1
            return _original(*args, **kwargs)

        setattr(enc, hook, counted)
    for block in model.blocks:
        block.register_forward_pre_hook(lambda module, args: masks.append(args[3]))
    model(tokens(2, 7), padding_mask=torch.arange(7)[None, :] < torch.tensor([[7], [4]]))
    assert calls == {"bias": 1, "content_bias": 3, "rotate": 3}
    assert len(masks) == 3 and all(m is masks[0] for m in masks)


# ----------------------------------------------------------------------------- position tables


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_position_tables_are_buffers_that_never_go_stale(name, causal):
    """Position tables are non-persistent buffers (state_dict holds the learned tensors only, unchanged by a
    forward), follow parameter updates, load_state_dict, in-place edits of explicit positions, `.to()`,
    copies and inference mode, and grow for an input longer than the table (relative encodings)."""
    import copy

    model, L = make_model(name, causal), 10
    x = tokens(2, L)
    keys = list(model.state_dict())
    assert not set(model.encoding.position_tables) & set(keys)
    model(x)
    assert list(model.state_dict()) == keys
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    fresh = make_model(name, causal)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(model(x), fresh(x))  # after an "optimizer step"
    positions = torch.arange(L)
    model(x, positions=positions)
    positions += 3  # the same tensor, edited in place
    assert torch.equal(model(x, positions=positions), fresh(x, positions=torch.arange(L) + 3))
    with torch.inference_mode():
        inference = model(x)
    model.train()
    model(x).sum().backward()  # nothing built under inference mode enters autograd
    with torch.no_grad():  # SDPA's path (fused or math) depends on whether the bias needs grad
        assert torch.equal(model.eval()(x), inference)
        assert torch.equal(copy.deepcopy(model)(x), inference)
        moved = copy.deepcopy(model).to(torch.float64).encoding
        if moved.max_positions is None:
            moved.reserve(MAX_LEN + 5)  # rebuilt where and as the module's tables now are
        for table in moved.position_tables:
            assert getattr(moved, table).dtype in (torch.float64, torch.long)  # moved with the module
    if model.encoding.max_positions is None:  # grown for a longer input: equal to a model built for it
        longer = make_model(name, causal, max_length=2 * MAX_LEN)
        longer.load_state_dict(model.state_dict())
        y = tokens(1, MAX_LEN + 9)
        with torch.no_grad():
            torch.testing.assert_close(model(y), longer(y), atol=1e-5, rtol=1e-5)
        assert model.encoding.table_length == MAX_LEN + 9 and list(model.state_dict()) == keys


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_too_long_input(name, causal):
    """Encodings with a position limit refuse longer inputs with ConfigError; the others serve them."""
    model = make_model(name, causal, max_length=16)
    limit = model.encoding.max_positions
    if limit is None:
        assert model(tokens(1, 40)).isfinite().all()
        return
    model(tokens(1, limit))
    with pytest.raises(ConfigError, match=f"serves positions < {limit}"):
        model(tokens(1, limit + 1))
    with pytest.raises(ConfigError, match=f"serves positions < {limit}"):
        model(tokens(1, 4), positions=torch.arange(4) + limit - 3)


def test_unknown_encoding_in_transformer():
    with pytest.raises(ConfigError, match="unknown encoding 'nope'; choose one of: " + ", ".join(ENCODINGS)):
        Transformer(ArchConfig("nope", dim=DIM, num_heads=HEADS, vocab_size=VOCAB, max_length=512))
    with pytest.raises(ConfigError, match="has no option 'bogus'"):
        arch = ArchConfig(NAMES[0], encoding_options={"bogus": 1}, dim=DIM, num_heads=HEADS,
                          vocab_size=VOCAB, max_length=512)  # fmt: skip
        Transformer(arch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name", NAMES)
def test_transformer_on_cuda_matches_cpu(name, causal):
    """The fused CUDA SDPA path (with padding) agrees with the CPU forward."""
    model = make_model(name, causal)
    x = tokens(2, 10)
    padding_mask = torch.arange(10)[None, :] < torch.tensor([10, 6])[:, None]
    cpu = model(x, padding_mask=padding_mask)
    with torch.no_grad():
        gpu = model.cuda()(x.cuda(), padding_mask=padding_mask.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)


def test_benchmark_reports_the_sdpa_backend():
    """benchmarks/throughput.py names the SDPA backend a forward used: a fused kernel for causal rope (no
    mask), the math kernel for a float mask that requires grad (Shaw's key term), none for an explicit
    softmax (Shaw's value term)."""

    throughput = load_module("benchmarks/throughput.py")
    x = tokens(2, 9)
    rope = make_model("rope", causal=True).train()
    assert throughput.sdpa_backends(rope, x, "cpu") in ("flash (cpu)", "math")
    assert throughput.sdpa_backends(make_model("shaw", causal=True).train(), x, "cpu") == "math"
    arch = ArchConfig("shaw", encoding_options={"values": True}, dim=DIM, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    values = Transformer(arch)
    assert throughput.sdpa_backends(values, x, "cpu") == "-"


def test_token_init_std_scales_only_the_token_embeddings():
    """`token_init_std` (PE-Study's classifier: nn.Embedding's N(0, 1)) rescales the token table's draws and
    leaves every other weight as the default N(0, 0.02) initialisation makes it."""
    arch = ArchConfig(encoding="learned", dim=64, depth=2, num_heads=4, vocab_size=500, max_length=32)
    torch.manual_seed(0)
    default = Transformer(arch)
    torch.manual_seed(0)
    wide = Transformer(ArchConfig(**(arch.as_dict() | {"token_init_std": 1.0})))
    assert default.token_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert wide.token_emb.weight.std().item() == pytest.approx(1.0, rel=0.05)
    torch.testing.assert_close(wide.token_emb.weight * 0.02, default.token_emb.weight)  # the same draws, scaled
    others = lambda m: {k: v for k, v in m.state_dict().items() if not k.startswith("token_emb")}  # noqa: E731
    for (key, a), b in zip(others(default).items(), others(wide).values()):
        torch.testing.assert_close(a, b, msg=key)
