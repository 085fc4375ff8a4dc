"""Encoder / decoder stack that calls the encoding hooks; attention through SDPA, or FlexAttention for an
encoding whose logit terms are score_mods.

Shape legend: B batch, H heads, L length, D head dim, C model width.
"""

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, PositionalEncoding, build_encoding
from lightning_modules.encodings.base import ScoreMod, chain_score_mods
from lightning_modules.schedule import distinct, primary_encoding, scheduled_options
from pe_core.errors import ConfigError

BACKENDS = ("auto", "sdpa", "flex")
SINK_INIT_STD = 0.02  # gpt-oss's sinks start as N(0, 0.02^2): transformers' GptOssPreTrainedModel, initializer_range
QK_NORM_EPS = 1e-6  # the RMSNorm epsilon of Gemma 3's and Qwen3's q_norm / k_norm (rms_norm_eps)


def merge_mask(logits: Tensor | None, allowed: Tensor | None) -> Tensor | None:
    """Fold an additive logit term and a boolean "may attend" mask into one SDPA mask.

    Returns None (SDPA's own causal path, or no mask), the boolean mask (fused kernels stay usable),
    or one float mask with -inf where attention is not allowed. An (H, L, L) term comes back as (1, H, L, L):
    SDPA's fused CPU kernel takes only 2-D or 4-D masks (and none that requires grad).
    """
    if logits is not None and logits.dim() == 3:
        logits = logits[None]
    if logits is None:
        return allowed
    if allowed is None:
        return logits
    return logits.masked_fill(~allowed, float("-inf"))


def band_mask(queries: int, keys: int, window: int, device) -> Tensor:
    """(queries, keys) causal sliding-window mask of the last `queries` of `keys` tokens: query i (absolute
    position keys - queries + i) may attend key j when j <= i and i - j < window (`window` keys, itself included)."""
    i = torch.arange(keys - queries, keys, device=device)[:, None]
    j = torch.arange(keys, device=device)[None, :]
    return (j <= i) & (i - j < window)


def allowed_mask(length: int, causal: bool, padding_mask: Tensor | None, device,
                 window: int | None = None) -> Tensor | None:  # fmt: skip
    """(B or 1, 1, L, L) boolean mask: True where query i may attend key j; None if all may. A causal
    `window`: the band of the last `window` keys (`band_mask`)."""
    allowed = None
    if causal and window is None:
        allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]
    elif causal:
        allowed = band_mask(length, length, window, device)[None, None]
    if padding_mask is not None:
        keys = padding_mask[:, None, None, :].bool()  # (B, 1, 1, L)
        allowed = keys if allowed is None else allowed & keys
    return allowed


def attention_masks(bias: Tensor | None, length: int, causal: bool, padding_mask: Tensor | None, device,
                    window: int | None = None):  # fmt: skip
    """(mask, allowed) for one forward: the SDPA mask with the shared `bias` folded in, and the boolean mask
    a per-layer `content_bias` is folded with (see `Attention`); a causal `window` adds its band.

    Both are None whenever nothing needs them, so SDPA keeps its fused kernels: a causal model without a
    bias passes no mask and `is_causal=True` (FlashAttention on CUDA). A causal model ignores `padding_mask`:
    its padding is on the right (every batch in this project), so a real query never sees a padded key, and
    the losses of padded positions are masked by the task; only a bias needs the causal triangle built.
    """
    keys = None if causal else padding_mask
    needed = bias is not None or keys is not None or window is not None
    allowed = allowed_mask(length, causal, keys, device, window) if needed else None
    return merge_mask(bias, allowed), allowed


@dataclass
class FlexMasks:
    """What every layer's FlexAttention call shares in one forward: the encoding's bias as a score_mod and
    the block mask of causality / padding (None when neither is needed)."""

    score_mod: ScoreMod | None
    block_mask: BlockMask | None


def flex_block_mask(length: int, causal: bool, padding_mask: Tensor | None, device,
                    window: int | None = None) -> BlockMask | None:  # fmt: skip
    """The "may attend" mask of `attention_masks` as a FlexAttention block mask: the causal triangle (padding
    ignored, as there: right padding is never seen by a real query) or its `window` band, or the real keys of
    a padded batch."""
    if causal and window is not None:
        band = lambda b, h, i, j: (j <= i) & (i - j < window)
        return create_block_mask(band, None, None, length, length, device=device)
    if causal:
        return create_block_mask(lambda b, h, i, j: j <= i, None, None, length, length, device=device)
    if padding_mask is None:
        return None
    keys = padding_mask.bool()
    return create_block_mask(lambda b, h, i, j: keys[b, j], len(keys), None, length, length, device=device)


@functools.cache
def compiled_flex_attention():
    """`flex_attention` compiled once: only compiled does it run fused kernels (eager materialises the scores)."""
    return torch.compile(flex_attention)


def run_flex_attention(q, k, v, score_mod: ScoreMod | None, block_mask: BlockMask | None, scale: float,
                       sinks: Tensor | None = None) -> Tensor:  # fmt: skip
    """FlexAttention, compiled on CUDA; eager elsewhere (CPU tests) and inside an already compiled block.
    `sinks` (H,): each row's softmax has exp(s_h) more in its denominator, i.e. the output times
    Z / (Z + exp(s_h)) = sigmoid(lse - s_h), lse = log Z the row's logsumexp (FlexAttention returns it)."""
    compiled = q.is_cuda and not torch.compiler.is_compiling()
    attend = compiled_flex_attention() if compiled else flex_attention
    if sinks is None:
        return attend(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    y, aux = attend(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                    return_aux=AuxRequest(lse=True))  # fmt: skip
    return y * torch.sigmoid(aux.lse - sinks[:, None].float())[..., None].to(y.dtype)


def with_sink_key(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                  sinks: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """k, v (B, H, T, D) and the SDPA mask (None, boolean or float; `is_causal`: the causal triangle) of L
    queries -> the same with one more key, the sink: a zero key and a zero value whose logit is s_h (`sinks`
    (H,)), a float mask column (B or 1, H, L, 1). SDPA's softmax over T + 1 logits is then gpt-oss's
    concat-then-softmax, and the sink's weight multiplies a zero value (the column dropped)."""
    L, T, H = q.shape[-2], k.shape[-2], q.shape[-3]
    if is_causal:
        mask = torch.ones(L, T, dtype=torch.bool, device=q.device).tril(T - L)
    if mask is None:
        mask = q.new_zeros(L, T)
    elif mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    mask = mask.reshape((1,) * (4 - mask.dim()) + mask.shape)
    mask = mask.expand(mask.shape[0], H, L, T)
    column = sinks.to(mask.dtype)[None, :, None, None].expand(mask.shape[0], H, L, 1)
    k = torch.cat([k, k.new_zeros(*k.shape[:-2], 1, k.shape[-1])], dim=-2)  # (a rotation may widen k: PoPE)
    v = torch.cat([v, v.new_zeros(*v.shape[:-2], 1, v.shape[-1])], dim=-2)
    return k, v, torch.cat([mask, column], dim=-1)


def check_attention_backend(backend: str, encoding: PositionalEncoding, dropout: float) -> None:
    """One-line ConfigError for an unknown backend, or flex forced where FlexAttention cannot serve."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown attention_backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if backend != "flex":
        return
    if not encoding.flex_capable:
        able = [name for name, cls in ENCODINGS.items() if cls.flex]
        why = "a logit term with no score_mod" if encoding.softmax_attention else "its attention is not a softmax"
        raise ConfigError(f"attention_backend=flex cannot serve encoding {encoding.name!r} ({why}); use auto or "
                          f"sdpa, or one of: {', '.join(able)}")  # fmt: skip
    if dropout > 0:
        raise ConfigError(f"attention_backend=flex has no attention dropout; set dropout=0 (got {dropout}) or "
                          "use auto (SDPA while training with dropout)")  # fmt: skip


class LayerCache:
    """One layer's keys and values (B, H, T, D) of the tokens decoded so far (rotated, as attention used them),
    and, in the translation decoder, its cross-attention's keys and values of the source."""

    def __init__(self):
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.memory: tuple[Tensor, Tensor] | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new tokens' (B, H, n, D) keys and values; return all of them."""
        if self.keys is not None:
            k, v = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)
        self.keys, self.values = k, v
        return k, v

    def select(self, rows: Tensor) -> None:
        """Keep batch rows `rows` (beam search's surviving hypotheses), in that order."""
        if self.keys is not None:
            self.keys, self.values = self.keys[rows], self.values[rows]
        if self.memory is not None:
            self.memory = (self.memory[0][rows], self.memory[1][rows])


class KVCache:
    """The decoding state of a causal stack (`Transformer.decode`, the translation decoder's `decode`): its
    inputs so far (tokens or embeddings, (B, T, ...)) and one `LayerCache` per layer. An encoding that is not
    `cacheable` leaves the layer caches empty and its stack recomputes the whole sequence from the inputs."""

    def __init__(self, depth: int):
        self.inputs: Tensor | None = None
        self.layers = [LayerCache() for _ in range(depth)]

    def extend(self, inputs: Tensor) -> Tensor:
        """Append the new tokens' inputs (B, n, ...); return all inputs so far."""
        self.inputs = inputs if self.inputs is None else torch.cat([self.inputs, inputs], dim=1)
        return self.inputs

    def select(self, rows: Tensor) -> None:
        """Keep batch rows `rows` of every tensor, in that order (beam search)."""
        self.inputs = self.inputs[rows]
        for layer in self.layers:
            layer.select(rows)


def decoding_bias(encoding: PositionalEncoding, positions: Tensor, new: int, x: Tensor) -> Tensor | None:
    """A cached step's shared bias: the last `new` query rows (..., H, new, T) of `bias(positions)`, in the
    compute dtype (the rows are exact for every encoding: a bias is a function of the positions)."""
    bias = encoding.bias(positions)
    return None if bias is None else bias[..., -new:, :].to(compute_dtype(x))


def sample_positions(batch: int, length: int, max_position: int, device=None, lengths: Tensor | None = None,
                     generator: torch.Generator | None = None) -> Tensor:  # fmt: skip
    """(B, L) randomized positions, drawn per example (Ruoss et al. 2023): row b holds a sorted uniform sample
    without replacement of `lengths[b]` positions from [0, max_position) in its first `lengths[b]` slots (all
    L slots without `lengths`), padded slots 0. An example's draw thus depends on its own length only, never on
    the padded length of its batch. `generator`: drawn from it instead of the global RNG."""
    if length > max_position:
        raise ConfigError(f"randomize_positions={max_position} cannot hold {length} distinct positions; raise it")
    # the indices of the L largest of N uniform scores, largest first: every prefix is a uniform random subset
    order = torch.rand(batch, max_position, device=device, generator=generator).topk(length, dim=-1).indices  # (B, L)
    if lengths is None:
        return order.sort(dim=-1).values
    real = torch.arange(length, device=device) < lengths[:, None]  # (B, L), right padding
    return order.masked_fill(~real, max_position).sort(dim=-1).values.masked_fill(~real, 0)


def sample_continuous_positions(batch: int, length: int, max_position: int, device=None,
                                lengths: Tensor | None = None) -> Tensor:  # fmt: skip
    """(B, L) float positions (`continuous_positions`): row b holds `lengths[b]` sorted i.i.d. uniform draws from
    [0, max_position) in its first `lengths[b]` slots (all L without `lengths`), padded slots 0."""
    draws = torch.rand(batch, length, device=device) * max_position
    if lengths is None:
        return draws.sort(dim=-1).values
    real = torch.arange(length, device=device) < lengths[:, None]  # (B, L), right padding
    return draws.masked_fill(~real, float("inf")).sort(dim=-1).values.masked_fill(~real, 0.0)


def example_positions(positions: Tensor, padding_mask: Tensor) -> Tensor:
    """(L,) or (B, L) positions -> (B, L) with every padded slot at 0, so that each row's largest position is
    its own example's (a `length_dependent` encoding, e.g. RoPE's dynamic NTK, then gives an example the same
    logits whatever the padded length of its batch; padded slots are never attended by real tokens)."""
    return positions.expand(padding_mask.shape).masked_fill(~padding_mask.bool(), 0)


def scale_queries(q: Tensor, encoding: PositionalEncoding, positions: Tensor, keys: Tensor) -> Tensor:
    """q (B, H, L, D) with each row times the encoding's `length_scale` factor (SSMax's s log n, Llama 4's
    temperature; `query_scale`), in q's dtype; q itself without one."""
    factor = encoding.query_scale(positions, keys)
    return q if factor is None else q * factor.to(q.dtype)


def key_counts(L: int, causal: bool, allowed: Tensor | None, device) -> Tensor:
    """How many keys each of L queries attends over: (L,) 1..L causal; bidirectional (B or 1, L or 1), the
    real keys of each row of the boolean `allowed` (B, 1, L or 1, L), or L without one."""
    if causal:
        return torch.arange(1, L + 1, device=device)
    if allowed is None:
        return torch.full((1,), L, device=device)
    return allowed.sum(-1)[:, 0]


def check_attention_options(arch: ArchConfig, encoding: PositionalEncoding) -> None:
    """One-line ConfigError where `arch.attention_sinks` cannot serve the encoding (`sink_capable`)."""
    if arch.attention_sinks and not encoding.sink_capable:
        why = "its attention is not a softmax" if not encoding.softmax_attention else "its attend computes the weights"
        able = [name for name, cls in ENCODINGS.items() if cls.softmax_attention]
        raise ConfigError(f"arch.attention_sinks cannot serve encoding {encoding.name!r} ({why}); set "
                          f"arch.attention_sinks=false or use one of: {', '.join(able)}")  # fmt: skip


class Attention(nn.Module):
    """Multi-head self-attention; position enters only through the encoding's hooks.

    Two options of every encoding (ArchConfig):
    - `sinks` (`arch.attention_sinks`; gpt-oss, OpenAI 2025, its reference `sdpa`: the logits q.k * scale, a
      column of the sink logit s_h appended, softmax, the column dropped): a learned logit s_h per head, a
      parameter (H,) of each layer (`sinks`), in every query row's denominator:
      w_ij = exp(l_ij) / (exp(s_h) + sum_j' exp(l_ij')); the sink takes probability mass and adds no value.
      It is not scaled by `length_scale` nor by the content scale (a raw logit, as gpt-oss). Initialised as
      transformers' GptOss (gpt-oss's own code only loads trained weights): N(0, 0.02^2). SDPA gets one more key,
      zero, with the sink's logit in its mask (`with_sink_key`); FlexAttention rescales its output by
      sigmoid(lse - s_h). Not for an encoding whose `attend` computes the weights itself (`sink_capable`).
    - `qk_norm` (`arch.qk_norm`): RMSNorm with a learned scale (ones at first, eps 1e-6) over each head's D
      dims of q and of k (`q_norm`, `k_norm`, shared by the heads), right after the projection: before the
      encoding's `rotate` and before every logit term that reads q or k, as Gemma 3 and Qwen3 (per head) and
      OLMo 2 (which normalises the whole C-wide q and k instead of each head's) do it before RoPE. The
      content scale stays the encoding's `attention_scale` (1/sqrt(D)).
    """

    def __init__(self, dim: int, num_heads: int, dropout: float, sinks: bool = False, qk_norm: bool = False):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.sinks = nn.Parameter(torch.randn(num_heads) * SINK_INIT_STD) if sinks else None  # (H,): s_h
        head_dim = dim // num_heads
        self.q_norm = nn.RMSNorm(head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(head_dim, eps=QK_NORM_EPS) if qk_norm else None

    def normalize(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q, k (B, H, L, D) through `qk_norm`'s RMSNorms; unchanged without it."""
        if self.q_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def attend(self, encoding: PositionalEncoding, q, k, v, mask: Tensor | None, is_causal: bool, positions,
               dropout_p: float = 0.0) -> Tensor:  # fmt: skip
        """The encoding's `attend` (SDPA unless it overrides it), with the sink key appended under `sinks`."""
        if self.sinks is not None:
            k, v, mask = with_sink_key(q, k, v, mask, is_causal, self.sinks)
            is_causal = False
        return encoding.attend(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p,
                               scale=encoding.attention_scale(), positions=positions)  # fmt: skip

    def forward(self, x, encoding: PositionalEncoding, positions, mask, allowed, causal,
                cache: LayerCache | None = None, window: int | None = None) -> Tensor:  # fmt: skip
        """`mask`: the SDPA mask of `attention_masks` (in the compute dtype), or the forward's `FlexMasks`;
        with a `cache`, a cached decoding step (see `decode_step`), `mask` then being `decoding_bias`. The
        layer's sliding `window` is already in `mask` and `allowed`; only the cached step reads it."""
        if cache is not None:
            return self.decode_step(x, encoding, positions, mask, cache, window)
        B, L, C = x.shape
        qkv = self.qkv(x).view(B, L, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, L, D)
        q, k = encoding.rotate(*self.normalize(q, k), positions)
        if encoding.length_scale != "none":
            q = scale_queries(q, encoding, positions, key_counts(L, causal, allowed, x.device))
        if isinstance(mask, FlexMasks):
            score_mod = chain_score_mods(mask.score_mod, encoding.content_score_mod(q, k, positions))
            y = run_flex_attention(q, k, v, score_mod, mask.block_mask, encoding.attention_scale(), self.sinks)
            return self.out(y.transpose(1, 2).reshape(B, L, C))
        extra = encoding.content_bias(q, k, positions)  # (B, H, L, L) or None
        if extra is not None:
            if causal and allowed is None:  # the causal triangle, so far left to SDPA's is_causal
                allowed = allowed_mask(L, True, None, x.device)
            mask = merge_mask(extra if mask is None or mask.dtype == torch.bool else mask + extra, allowed)
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)  # a no-op but for a content term: the shared mask is in the compute dtype
        dropout_p = self.dropout if self.training else 0.0
        y = self.attend(encoding, q, k, v, mask, causal and mask is None, positions, dropout_p)
        return self.out(y.transpose(1, 2).reshape(B, L, C))  # (B, L, C)

    def decode_step(self, x, encoding: PositionalEncoding, positions, bias: Tensor | None, cache: LayerCache,
                    window: int | None = None) -> Tensor:  # fmt: skip
        """Causal attention of the n new tokens x (B, n, C) to themselves and the cached ones (the last
        `window` of them with a sliding window); `positions` (T,) of all T tokens, the last n new; `bias`
        (..., H, n, T) the new rows of the shared bias. A content term is computed with zero queries in the
        cached rows and its new rows kept (a row depends only on its own query). Extends the cache (every
        key, also those a window no longer sees); evaluation only (no dropout)."""
        B, n, C = x.shape
        q, k, v = self.qkv(x).view(B, n, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k = encoding.rotate(*self.normalize(q, k), positions[..., -n:])
        k, v = cache.append(k, v)  # (B, H, T, D)
        T = k.shape[-2]
        if encoding.length_scale != "none":  # the new queries see T - n + 1 .. T keys
            q = scale_queries(q, encoding, positions[..., -n:], torch.arange(T - n + 1, T + 1, device=x.device))
        mask = bias
        if type(encoding).content_bias is not PositionalEncoding.content_bias:
            queries = q.new_zeros(k.shape[:-1] + q.shape[-1:])  # (B, H, T, D)
            queries[..., -n:, :] = q
            extra = encoding.content_bias(queries, k, positions)
            if extra is not None:
                extra = extra[..., -n:, :]
                mask = extra if mask is None else mask + extra
        allowed = None if n == 1 else torch.ones(n, T, dtype=torch.bool, device=x.device).tril(T - n)
        if window is not None and window < T:
            allowed = band_mask(n, T, window, x.device)
        mask = merge_mask(mask, allowed)
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)
        y = self.attend(encoding, q, k, v, mask, False, positions)
        return self.out(y.transpose(1, 2).reshape(B, n, C))


class Block(nn.Module):
    """One Transformer layer, pre-LN (GPT-2, default) or post-LN (BERT / TUPE's setting)."""

    def __init__(self, dim: int, num_heads: int, ffn_mult: int, dropout: float, post_norm: bool,
                 sinks: bool = False, qk_norm: bool = False):  # fmt: skip
        super().__init__()
        self.post_norm = post_norm
        self.attn = Attention(dim, num_heads, dropout, sinks, qk_norm)
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_mult * dim), nn.GELU(), nn.Linear(ffn_mult * dim, dim), nn.Dropout(dropout)
        )
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, encoding, positions, mask, allowed, causal, cache: LayerCache | None = None,
                window: int | None = None) -> Tensor:  # fmt: skip
        if self.post_norm:
            x = self.norm1(x + self.drop(self.attn(x, encoding, positions, mask, allowed, causal, cache, window)))
            return self.norm2(x + self.ffn(x))
        x = x + self.drop(self.attn(self.norm1(x), encoding, positions, mask, allowed, causal, cache, window))
        return x + self.ffn(self.norm2(x))


class Transformer(nn.Module):
    """Token embedding + `depth` blocks + final norm, parameterised by a registered encoding, or by a per-layer
    schedule of them (`arch.encoding` list, `arch.nope_every`; lightning_modules/schedule.py).

    Causal (decoder-only) or bidirectional (encoder). The encoding's shared bias and the masks are
    computed once per forward and passed to every layer; with a schedule, once per distinct encoding (layers
    naming the same encoding share its instance) and per sliding `arch.window`. `self.encoding` is the
    stack's encoding (the first that is not none): its `embed` hook and positions serve every layer; the
    others are `self.other_encodings`. Returns hidden states (B, L, C).
    Default positions are 0..L-1; in training mode with the encoding's `randomize_positions` N, sorted
    distinct positions sampled from [0, N) for each example's own length instead (Ruoss et al. 2023; at
    evaluation too with `randomize_positions_eval`); explicit positions win.
    """

    def __init__(self, arch: ArchConfig, *, causal: bool = True, cls_first: bool = False):
        """`cls_first`: the data puts [CLS] at position 0 (masked-LM, classification)."""
        super().__init__()
        dim, dropout, post_norm = arch.dim, arch.dropout, arch.post_norm
        self.arch, self.causal = arch, causal
        self.encoding = build_arch_encoding(arch, causal=causal, cls_first=cls_first)
        self.layer_names, self.windows = arch.layer_encodings, arch.layer_windows
        others = [name for name in distinct(self.layer_names) if name != primary_encoding(self.layer_names)]
        if others:  # registered only for a schedule: a single encoding's state_dict keys stay `encoding.*`
            self.other_encodings = nn.ModuleDict(
                {name: build_arch_encoding(arch, causal=causal, cls_first=cls_first, name=name) for name in others}
            )
        for encoding in self.encodings:
            check_attention_backend(arch.attention_backend, encoding, arch.dropout)
            check_attention_options(arch, encoding)
        if not causal and any(window is not None for window in self.windows):
            raise ConfigError("arch.window (a causal sliding window) needs a causal model; set --model.causal=true "
                              "or arch.window=null")  # fmt: skip
        self.token_emb = nn.Embedding(arch.vocab_size, dim)
        self.emb_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(dim, arch.num_heads, arch.ffn_mult, dropout, post_norm, arch.attention_sinks, arch.qk_norm)
            for _ in range(arch.depth)
        )
        self.norm = nn.LayerNorm(dim)  # final norm (pre-LN) or embedding norm (post-LN, as BERT)
        self.post_norm = post_norm
        # the tokens' scale against an added position table matters: a sinusoid (entries of size 1) over
        # N(0, 0.02) tokens drowns them; PE-Study's classifier keeps nn.Embedding's N(0, 1)
        nn.init.normal_(self.token_emb.weight, std=arch.token_init_std)  # the draws init_weights made
        for block in self.blocks:
            block.apply(init_weights)

    @property
    def encodings(self) -> list[PositionalEncoding]:
        """Each distinct encoding of the layers once, the stack's own (`self.encoding`) first."""
        others = getattr(self, "other_encodings", None)
        return [self.encoding, *(others.values() if others is not None else ())]

    def layer_encoding(self, layer: int) -> PositionalEncoding:
        """The encoding instance layer `layer` (from 0) calls."""
        others = getattr(self, "other_encodings", None)
        name = self.layer_names[layer]
        return others[name] if others is not None and name in others else self.encoding

    def forward(self, tokens: Tensor, positions: Tensor | None = None, padding_mask: Tensor | None = None) -> Tensor:
        """tokens (B, L); positions (L,) or (B, L), default 0..L-1; padding_mask (B, L), True = real."""
        B, L = tokens.shape
        if positions is None:
            lengths = None if padding_mask is None else padding_mask.sum(-1)  # (B,), right padding
            positions = self.default_positions(B, L, tokens.device, lengths)
        else:
            for encoding in self.encodings:
                encoding.check_positions(positions)
        if padding_mask is not None and any(encoding.length_dependent for encoding in self.encodings):
            positions = example_positions(positions, padding_mask)
        x = self.encoding.embed(self.token_emb(tokens), positions)  # (B, L, C)
        x = self.emb_drop(self.norm(x) if self.post_norm else x)
        masks = LayerMasks(self, positions, x, padding_mask)
        for layer, block in enumerate(self.blocks):
            encoding = self.layer_encoding(layer)
            x = block(x, encoding, positions, *masks(encoding, self.windows[layer]), self.causal)
        return x if self.post_norm else self.norm(x)

    def default_positions(self, batch: int, length: int, device, lengths: Tensor | None = None) -> Tensor:
        positions = default_positions(self.encoding, self.training, batch, length, device, lengths)
        for encoding in self.encodings[1:]:  # a schedule's other encodings: their tables cover the length too
            encoding.reserve(length)
        return positions

    def decode(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """Hidden states (B, n, C) of `tokens` (B, n), the continuation of those `cache` holds (none at first),
        which it then holds too: equal to the last n rows of `self(all tokens)`. A `cacheable` encoding runs
        the new tokens only, against the cached keys and values; any other recomputes the whole sequence.
        Causal models; positions 0..T-1 (evaluation)."""
        if not self.causal:
            raise ConfigError("decode (a KV cache) needs a causal model")
        n, everything = tokens.shape[1], cache.extend(tokens)
        if not can_cache(self):
            return self(everything)[:, -n:]
        positions = self.default_positions(len(tokens), everything.shape[1], tokens.device)
        x = self.encoding.embed(self.token_emb(tokens), positions[-n:])  # (B, n, C)
        x = self.emb_drop(self.norm(x) if self.post_norm else x)
        biases = {}  # the shared bias's new rows, once per distinct encoding
        for i, (block, layer) in enumerate(zip(self.blocks, cache.layers)):
            encoding = self.layer_encoding(i)
            if id(encoding) not in biases:
                biases[id(encoding)] = decoding_bias(encoding, positions, n, x)
            x = block(x, encoding, positions, biases[id(encoding)], None, True, layer, self.windows[i])
        return x if self.post_norm else self.norm(x)


def stack_encodings(model: nn.Module) -> list[PositionalEncoding]:
    """The distinct encodings of a stack: a Transformer's `encodings`, or a decoder's one `encoding`."""
    return list(getattr(model, "encodings", None) or [model.encoding])


def can_cache(model: nn.Module) -> bool:
    """Whether `model` (with `.encoding`) decodes with a KV cache: every encoding of its layers `cacheable`,
    positions 0..T-1."""
    sampled = model.training and model.encoding.randomize_positions is not None
    return all(encoding.cacheable for encoding in stack_encodings(model)) and not sampled


def default_positions(encoding: PositionalEncoding, training: bool, batch: int, length: int, device,
                      lengths: Tensor | None = None) -> Tensor:  # fmt: skip
    """(L,) 0..L-1, or (B, L) randomized positions drawn for each example's own length (`lengths` (B,), the
    real tokens of each right-padded row; None: all L) at training time when the encoding asks for them (floats
    with `continuous_positions`), and at evaluation too with `randomize_positions_eval` (integers; both within
    the encoding's position tables, grown for a longer input); evaluation's draws come from the encoding's own
    generator (`eval_generator`)."""
    max_position = encoding.randomize_positions
    if max_position is not None and training and encoding.continuous_positions:
        return sample_continuous_positions(batch, length, max_position, device, lengths)
    if max_position is not None and (training or encoding.randomize_positions_eval):
        generator = None if training else encoding.eval_generator(device)
        return sample_positions(batch, length, max_position, device, lengths, generator)
    encoding.reserve(length)
    return torch.arange(length, device=device)


def uses_flex(model: nn.Module, x: Tensor) -> bool:
    """Whether this forward of `model` (a Transformer or decoder: `.arch`, `.encoding`) runs FlexAttention:
    forced, or auto on CUDA for encodings with logit terms that all have score_mods (or a sliding window, a
    sparse block mask), outside training with attention dropout (FlexAttention has none)."""
    backend, encodings = model.arch.attention_backend, stack_encodings(model)
    if backend == "flex" and not x.is_cuda and torch.is_grad_enabled():
        raise ConfigError("attention_backend=flex has no backward on the CPU (FlexAttention's); train with auto "
                          "or sdpa, or evaluate under torch.no_grad()")  # fmt: skip
    if backend != "auto":
        return backend == "flex"
    dropout = model.training and model.arch.dropout > 0
    if not x.is_cuda or dropout or not all(encoding.flex_capable for encoding in encodings):
        return False
    windowed = any(window is not None for window in getattr(model, "windows", ()))
    return windowed or any(encoding.flex and encoding.adds_logit_terms for encoding in encodings)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype the layers compute in: autocast's when it is on, else the activations'."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class LayerMasks:
    """The masks of one forward, asked for per layer as `masks(encoding, window)` -> (mask, allowed): each
    distinct encoding's shared term (`bias`, or `score_mod` on the flex path) is built once, each window's
    block mask once, and each (encoding, window) pair's masks once."""

    def __init__(self, model: nn.Module, positions: Tensor, x: Tensor, padding_mask: Tensor | None,
                 causal: bool | None = None):  # fmt: skip
        self.positions, self.x, self.padding_mask = positions, x, padding_mask
        self.causal = model.causal if causal is None else causal
        self.flex = uses_flex(model, x)
        self.terms, self.block_masks, self.masks = {}, {}, {}

    def __call__(self, encoding: PositionalEncoding, window: int | None = None):
        key = (id(encoding), window)
        if key not in self.masks:
            self.masks[key] = self.build(encoding, window)
        return self.masks[key]

    def term(self, encoding: PositionalEncoding):
        if id(encoding) not in self.terms:
            build = encoding.score_mod if self.flex else encoding.bias
            self.terms[id(encoding)] = build(self.positions)
        return self.terms[id(encoding)]

    def build(self, encoding: PositionalEncoding, window: int | None):
        """The `FlexMasks` (and None) on the flex path, else `attention_masks` with the float mask cast once
        to the compute dtype (never again per layer)."""
        L, device = self.x.shape[1], self.x.device
        if self.flex:
            if window not in self.block_masks:
                self.block_masks[window] = flex_block_mask(L, self.causal, self.padding_mask, device, window)
            keys = None if self.causal else self.padding_mask  # `allowed` only counts a bidirectional row's keys
            allowed = None if keys is None else allowed_mask(L, False, keys, device)  # (length_scale: ssmax)
            return FlexMasks(self.term(encoding), self.block_masks[window]), allowed
        mask, allowed = attention_masks(self.term(encoding), L, self.causal, self.padding_mask, device, window)
        if mask is not None and mask.is_floating_point():
            mask = mask.to(compute_dtype(self.x))
        return mask, allowed


def layer_masks(
    model: nn.Module, positions: Tensor, x: Tensor, padding_mask: Tensor | None, causal: bool | None = None
):
    """(mask, allowed) every layer of one forward of a single-encoding stack (`model.encoding`) shares."""
    return LayerMasks(model, positions, x, padding_mask, causal)(model.encoding)


def build_arch_encoding(arch: ArchConfig, causal: bool, cls_first: bool = False,
                        name: str | None = None) -> PositionalEncoding:  # fmt: skip
    """The registered encoding `name` of `arch`'s layers (default: the stack's own, `primary_encoding`: the
    encoding `arch` names when it names one), with the options it gets (`scheduled_options`), sized for it."""
    names = arch.layer_encodings
    name = primary_encoding(names) if name is None else name
    return build_encoding(name, dim=arch.dim, num_heads=arch.num_heads, max_length=arch.max_length,
                          causal=causal, cls_first=cls_first,
                          **scheduled_options(name, names, arch.encoding_options))  # fmt: skip


def init_weights(module: nn.Module) -> None:
    """GPT-2 / BERT initialisation: N(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
