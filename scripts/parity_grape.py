"""Parity of grape_m, grape_m_ctx, grape_a and grape_ap (lightning_modules/encodings/grape_*.py) with the
reference GRAPE code (model-architectures/GRAPE, model/llama-mha-grape-*.py and llama-mha-alibi.py): each
reference file's `CausalSelfAttention` (QK RMSNorm, KV shift and group norm off: architecture options, not the
encoding) against the same projections around our encoding's hooks, with the same weights.

    git --git-dir /work/.mirror/model-architectures+GRAPE/repo archive HEAD model | tar -x -C /tmp/grape_ref
    .venv/bin/python scripts/parity_grape.py /tmp/grape_ref/model

Prints, per variant, the max abs difference of the attention logits' positional term where one exists and of
the attention layer's output. The reference rotates the half-split pairs (x_m, x_m+D/2) the other way, ours the
interleaved pairs (x_2m, x_2m+1): q and k (grape_m, grape_ap probe k) or the probe projection's rows (grape_ap's
own probe) are fed in our order, the permutation (x_m+D/2, x_m) -> (x_2m, x_2m+1), an orthogonal change of
coordinates that leaves every logit equal. grape_ap's own probe and grape_m_ctx's phase gate read the keys,
p = W_p k: they are given W_p = W_p_ref W_k^-1, the reference's projection of the layer input read through the
keys (W_k, square, is invertible). The parameters are moved off their
initialisation first (trained-like frequencies, gates, slopes), so the check is not only at init.
"""

import argparse
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_source import load_definitions  # noqa: E402

from lightning_modules.encodings import build_encoding  # noqa: E402

HEADS, HEAD_DIM, LENGTH, BATCH = 4, 32, 64, 2
DIM = HEADS * HEAD_DIM
COMMON = {"math": math, "torch": torch, "nn": nn, "F": F, "ShiftLinear": None, "RMSNorm": None}


def config(**extra) -> SimpleNamespace:
    return SimpleNamespace(n_head=HEADS, n_embd=DIM, head_dim=HEAD_DIM, n_layer=2, use_qk_rmsnorm=False,
                           using_groupnorm=False, use_k_shift=False, use_v_shift=False, **extra)  # fmt: skip


def half_to_pairs(width: int) -> torch.Tensor:
    """Indices taking the reference's layout to ours: our pair (2m, 2m + 1) holds its (m + width/2, m)."""
    half = torch.arange(width // 2)
    return torch.stack((half + width // 2, half), -1).flatten()


def our_attention(ref: nn.Module, enc, x: torch.Tensor, perm: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference layer's projections around our encoding's hooks: (output, positional logit term)."""
    B, T, _ = x.shape

    def heads(linear):
        y = linear(x).view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        return y if perm is None or linear is ref.c_v else y[..., perm]

    q, k, v = heads(ref.c_q), heads(ref.c_k), heads(ref.c_v)
    positions = torch.arange(T)
    q, k = enc.rotate(q, k, positions)
    term = [t for t in (enc.bias(positions), enc.content_bias(q, k, positions)) if t is not None]
    term = sum(term) if term else torch.zeros(1, HEADS, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = term.masked_fill(~causal, float("-inf"))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=enc.attention_scale())
    return ref.c_proj(y.transpose(1, 2).reshape(B, T, DIM)), term


def build(name: str, **options):
    return build_encoding(name, dim=DIM, num_heads=HEADS, max_length=LENGTH, causal=True, **options)


def report(label: str, out: torch.Tensor, ref_out: torch.Tensor, term=None, ref_term=None) -> None:
    causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
    diff, scale = (out - ref_out).abs().max().item(), ref_out.abs().max().item()
    line = f"{label:30s} max |output diff| {diff:.3g} (of max |output| {scale:.3g})"
    if term is not None:
        line += f"   max |positional term diff| {(term - ref_term)[..., causal].abs().max().item():.3g}"
    print(line)


def grape_m(model: Path, x: torch.Tensor) -> None:
    ns = load_definitions(str(model / "llama-mha-grape-m-nonctx.py"),
                          ["apply_rotary_emb", "MSGRAPECommuting", "CausalSelfAttention"], dict(COMMON))  # fmt: skip
    for shared in (True, False):
        torch.manual_seed(1)
        ref = ns["CausalSelfAttention"](config(grape_share_across_heads=shared, grape_log_freq_scale=16.0))
        with torch.no_grad():
            ref.grape.log_freq.add_(torch.randn_like(ref.grape.log_freq))  # trained-like spectrum
        enc = build("grape_m", share_across_heads=shared)
        enc.log_freq.data.copy_(ref.grape.log_freq.data)
        with torch.no_grad():
            out, _ = our_attention(ref, enc, x, half_to_pairs(HEAD_DIM))
            report(f"grape_m (shared={shared})", out, ref(x))


def grape_m_ctx(model: Path, x: torch.Tensor) -> None:
    ns = load_definitions(str(model / "llama-mha-grape-m-ctx.py"),
                          ["_softplus_inverse", "apply_rotary_emb", "MSGRAPEContextType1", "CausalSelfAttention"],
                          dict(COMMON))  # fmt: skip
    perm = half_to_pairs(HEAD_DIM)
    columns = (torch.arange(HEADS)[:, None] * HEAD_DIM + perm).flatten()  # our keys' order in the reference's
    for per_head in (False, True):
        torch.manual_seed(5)
        ref = ns["CausalSelfAttention"](config(grape_ctx_per_head=per_head, grape_ctx_omega_scale=16.0))
        with torch.no_grad():
            ref.grape.log_freq.add_(0.3 * torch.randn_like(ref.grape.log_freq))
            ref.omega_proj.weight.normal_(std=0.5)  # phases that vary with the content
        enc = build("grape_m_ctx", phase_per_head=per_head)
        with torch.no_grad():
            enc.log_freq.copy_(ref.grape.log_freq)
            enc.phase_proj.weight.copy_((ref.omega_proj.weight @ torch.linalg.inv(ref.c_k.weight))[:, columns])
            enc.phase_proj.bias.copy_(ref.omega_proj.bias)
            out, _ = our_attention(ref, enc, x, perm)
            report(f"grape_m_ctx (per_head={per_head})", out, ref(x))


def grape_a(model: Path, x: torch.Tensor) -> None:
    files = {"qk": ("llama-mha-grape-a-querykeygated.py", "QueryKeyGatedAdditiveBias", "querykeygated_bias"),
             "q": ("llama-mha-grape-a-querygated.py", "QueryGatedAdditiveBias", "querygated_bias"),
             "k": ("llama-mha-grape-a-keygated.py", "KeyGatedAdditiveBias", "keygated_bias")}  # fmt: skip
    for gate, (file, bias_class, attribute) in files.items():
        ns = load_definitions(str(model / file), ["_softplus_inverse", "_get_alibi_slopes", bias_class,
                                                   "CausalSelfAttention"], dict(COMMON))  # fmt: skip
        torch.manual_seed(2)
        ref = ns["CausalSelfAttention"](config())
        module = getattr(ref, attribute)
        with torch.no_grad():
            module.omega.add_(torch.randn_like(module.omega))
        enc = build("grape_a", gate=gate)
        with torch.no_grad():
            enc.omega.copy_(module.omega)
            for name in ("u", "v"):
                if getattr(enc, name) is not None:
                    getattr(enc, name).copy_(getattr(module, name))
            q = ref.c_q(x).view(*x.shape[:2], HEADS, HEAD_DIM)
            k = ref.c_k(x).view(*x.shape[:2], HEADS, HEAD_DIM)
            ref_term = module(q, k) if gate == "qk" else module(q if gate == "q" else k)
            out, term = our_attention(ref, enc, x, None)
            report(f"grape_a (gate={gate})", out, ref(x), term, ref_term)
    ns = load_definitions(str(model / "llama-mha-alibi.py"), ["_get_alibi_slopes", "AlibiBias",
                                                               "CausalSelfAttention"], dict(COMMON))  # fmt: skip
    torch.manual_seed(3)
    ref = ns["CausalSelfAttention"](config())
    with torch.no_grad():
        out, term = our_attention(ref, build("grape_a", gate="none"), x, None)
        report("grape_a (gate=none) vs ALiBi", out, ref(x), term, ref.alibi(x))


def grape_ap(model: Path, x: torch.Tensor) -> None:
    ns = load_definitions(str(model / "llama-mha-grape-ap-v1.py"),
                          ["Rotary", "apply_rotary_emb", "_get_alibi_slopes", "CausalSelfAttention"],
                          dict(COMMON))  # fmt: skip
    for probe, tie in (("own", "none"), ("k", "pk"), ("q", "pq")):
        torch.manual_seed(4)
        ref = ns["CausalSelfAttention"](config(p_tie_mode=tie, p_head_dim=8 if probe == "own" else None))
        enc = build("grape_ap", probe=probe)
        perm = None
        if probe == "own":
            rows = (torch.arange(HEADS)[:, None] * 8 + half_to_pairs(8)).flatten()
            with torch.no_grad():
                enc.probe_proj.weight.copy_((ref.c_p.weight @ torch.linalg.inv(ref.c_k.weight))[rows])
        else:
            perm = half_to_pairs(HEAD_DIM)
        with torch.no_grad():
            out, _ = our_attention(ref, enc, x, perm)
            report(f"grape_ap (probe={probe})", out, ref(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the reference's model/ folder (git archive of model-architectures/GRAPE)")
    model = Path(parser.parse_args().model)
    torch.manual_seed(0)
    x = torch.randn(BATCH, LENGTH, DIM)
    grape_m(model, x)
    grape_m_ctx(model, x)
    grape_a(model, x)
    grape_ap(model, x)


if __name__ == "__main__":
    main()
