"""FlexAttention path (issue 26, finding 3): every encoding that declares it (`flex_capable`) gives, through
`attention_backend: flex`, the reference attention's output, causal and bidirectional, with padding and
per-row positions; the backend choice and its errors; the dense mask built once in the compute dtype.

FlexAttention runs eagerly on the CPU here (torch.compile of it works on the CPU too, but takes ~40 s), forward
only: it has no backward on the CPU (the gradient test runs on CUDA).

Claims of docs/encodings.md covered here:
- "`attention_backend: flex` ... equal to the reference attention": test_flex_attention_matches_reference,
  test_flex_model_matches_sdpa_model
- "auto: FlexAttention on CUDA only": test_auto_backend_uses_sdpa_on_cpu
- "a one-line error where it cannot serve": test_forced_flex_refuses_what_it_cannot_serve
- "the float mask is cast to the compute dtype once per forward": test_dense_mask_is_cast_once_per_forward
"""

import pytest
import torch
from helpers import randomize_
from test_transformer import DEPTH, DIM, HEADS, MAX_LEN, VOCAB, assert_real_rows_close, reference_attention_module

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.transformer import Transformer, layer_masks
from pe_core.errors import ConfigError

NAMES = list(ENCODINGS)


def capable(name: str, causal: bool = True) -> bool:
    return build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=causal).flex_capable


FLEX_NAMES = [name for name in NAMES if capable(name)]
OTHER_NAMES = [name for name in NAMES if not capable(name)]


def make_model(name: str, causal: bool, backend: str, seed: int = 0) -> Transformer:
    if ENCODINGS[name].causal_only and not causal:
        pytest.skip(f"{name} is causal-only")
    arch = ArchConfig(name, dim=DIM, depth=DEPTH, num_heads=HEADS, dropout=0.0, vocab_size=VOCAB,
                      max_length=MAX_LEN, attention_backend=backend)  # fmt: skip
    torch.manual_seed(seed)
    return randomize_(Transformer(arch, causal=causal)).eval()


@torch.no_grad()
def flex_max_abs_difference(name: str, causal: bool, padded: bool) -> float:
    """Largest |flex - reference| over the real rows of one layer's attention, for two kinds of positions."""
    torch.manual_seed(0)
    B, L = 3, 10
    model = make_model(name, causal, "flex")
    attn, enc = model.blocks[0].attn, model.encoding
    x = torch.randn(B, L, DIM)
    padding_mask = (torch.arange(L)[None, :] < torch.tensor([L, 7, 3])[:, None]) if padded else None
    worst = 0.0
    for positions in (torch.arange(L), torch.arange(L) + torch.tensor([[0], [5], [2]])):
        mask, allowed = layer_masks(model, positions, x, padding_mask)
        got = attn(x, enc, positions, mask, allowed, causal)
        want = reference_attention_module(attn, x, enc, positions, causal, padding_mask)
        assert_real_rows_close(got, want, causal, padding_mask)
        rows = padding_mask if causal and padding_mask is not None else slice(None)
        worst = max(worst, (got[rows] - want[rows]).abs().max().item())
    return worst


def test_flex_flag_matches_the_score_mod_hooks():
    """`flex` is declared exactly where a score_mod hook is written. What FlexAttention cannot serve follows from
    the declared capabilities (`flex_capable`; no per-encoding table here: a new bias encoding without a
    score_mod is served by SDPA, and test_forced_flex_refuses_what_it_cannot_serve checks the refusal). Today
    that leaves out TUPE's untied term, CoPE's counts, DAPE's head-mixing MLP, dd_alibi_row's per-row sums
    and PaTH's Householder products (none pointwise in (i, j)), and stick-breaking (not a softmax)."""
    for name, cls in ENCODINGS.items():
        hooks = cls.score_mod is not PositionalEncoding.score_mod or (
            cls.content_score_mod is not PositionalEncoding.content_score_mod
        )
        assert cls.flex == hooks, name


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", FLEX_NAMES)
def test_flex_attention_matches_reference(name, causal, padded):
    assert flex_max_abs_difference(name, causal, padded) < 1e-5


def run_both_backends(name: str, causal: bool, backward: bool, device: str = "cpu"):
    """(output of the real rows, parameter gradients) of the same model with SDPA, then with flex."""
    B, L = 2, 9
    padding_mask = (torch.arange(L)[None, :] < torch.tensor([L, 6])[:, None]).to(device)
    tokens = torch.randint(0, VOCAB, (B, L), generator=torch.Generator().manual_seed(1)).to(device)
    results = []
    for backend in ("sdpa", "flex"):
        model = make_model(name, causal, backend).to(device)
        with torch.set_grad_enabled(backward):
            out = model(tokens, padding_mask=padding_mask)[padding_mask if causal else slice(None)]
        if backward:
            out.square().sum().backward()
        results.append((out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    return results


FLEX_BIAS_NAMES = [name for name in FLEX_NAMES if ENCODINGS[name].flex]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", FLEX_BIAS_NAMES)
def test_flex_model_matches_sdpa_model(name, causal):
    """The whole model (every layer, the encoding's score_mods, the block mask) with one backend or the other."""
    (sdpa, _), (flex, _) = run_both_backends(name, causal, backward=False)
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention has no backward on the CPU")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", FLEX_BIAS_NAMES)
def test_flex_gradients_match_sdpa_on_cuda(name, causal):
    (sdpa, sdpa_grads), (flex, flex_grads) = run_both_backends(name, causal, backward=True, device="cuda")
    torch.testing.assert_close(flex, sdpa, atol=1e-4, rtol=1e-4)
    assert flex_grads.keys() == sdpa_grads.keys()
    for key in sdpa_grads:
        torch.testing.assert_close(flex_grads[key], sdpa_grads[key], atol=1e-3, rtol=1e-3, msg=key)


def test_forced_flex_refuses_training_on_the_cpu():
    with pytest.raises(ConfigError, match="no backward on the CPU"):
        make_model("alibi", True, "flex")(torch.zeros(2, 5, dtype=torch.long))


def test_auto_backend_uses_sdpa_on_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr("lightning_modules.transformer.run_flex_attention", lambda *a, **k: calls.append(1))
    make_model("alibi", True, "auto")(torch.zeros(2, 5, dtype=torch.long))
    assert not calls


@pytest.mark.parametrize("name", OTHER_NAMES)
def test_forced_flex_refuses_what_it_cannot_serve(name):
    with pytest.raises(ConfigError, match="attention_backend=flex cannot serve"):
        make_model(name, True, "flex")


def test_forced_flex_refuses_dropout_and_unknown_backends():
    arch = ArchConfig("alibi", dim=DIM, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN, dropout=0.1)
    with pytest.raises(ConfigError, match="no attention dropout"):
        Transformer(ArchConfig(**(arch.as_dict() | {"attention_backend": "flex"})))
    with pytest.raises(ConfigError, match="attention_backend must be one of 'auto', 'sdpa', 'flex', got 'xla'"):
        Transformer(ArchConfig(**(arch.as_dict() | {"attention_backend": "xla"})))


def test_dense_mask_is_cast_once_per_forward(monkeypatch):
    """Under bf16 autocast the SDPA path hands every layer the same bf16 mask object (built and cast once)."""
    masks, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        masks.append(attn_mask)
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = make_model("t5_bias", False, "sdpa")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.zeros(2, 6, dtype=torch.long))
    assert len(masks) == DEPTH and all(mask is masks[0] for mask in masks)
    assert masks[0].dtype == torch.bfloat16
