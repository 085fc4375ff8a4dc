"""The encoding contract: the hooks through which position enters a Transformer.

Shape legend: B batch, H heads, L length, D head dim, C model width.
Positions are an explicit LongTensor of shape (L,) shared by the batch, or (B, L).

A new encoding is one file holding a subclass of `PositionalEncoding` plus one line in `ENCODINGS`
(lightning_modules/encodings/__init__.py); the registry-parametrised tests then pick it up with no edit
(tests/models/test_extension.py checks this for a stateful and a stateless encoding). The subclass:
- overrides only the hooks it needs: `embed`, `bias`, `rotate`, `content_bias`, `attention_scale`, `attend`
  (and, for FlexAttention, `score_mod` / `content_score_mod`); the rest are the identity;
- sets `name` (its registry name) and declares its capabilities, the class attributes the model and the
  tests read instead of a per-encoding table:

  | attribute           | default | set it when                                                            |
  |---------------------|---------|------------------------------------------------------------------------|
  | `init_reference`    | None    | always: {state_dict key: spec} of every trainable tensor ({} for none) |
  | `causal_only`       | False   | the method is undefined without a causal mask (xPos)                   |
  | `shift_invariant`   | False   | the logits do not change when every position moves by a constant      |
  | `max_positions`     | None    | it serves positions below a bound only (a learned table)               |
  | `length_dependent`  | False   | the hooks read each example's length (RoPE's dynamic NTK)              |
  | `kv_cache`          | True    | cached keys would go stale when later tokens come (xPos)               |
  | `flex`              | False   | it writes `score_mod` / `content_score_mod` for every logit term       |
  | `softmax_attention` | True    | its `attend` replaces the softmax (stick-breaking)                     |

An encoding with no parameter and no buffer is fine: `device_anchor` moves with `.to()` for it. An encoding
that adds a logit term without a score_mod is simply not `flex_capable`; FlexAttention then refuses it in
one line and SDPA serves it.
"""

import sys
from collections.abc import Callable
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt

SSMAX_INIT = 0.43  # SSMax's s at initialisation (Nakanishi 2025, the value of its Figure 1)
EVAL_POSITIONS_SEED = 0  # seed of the positions `randomize_positions_eval` draws at each evaluation
LLAMA4_FLOOR_SCALE, LLAMA4_ATTN_SCALE = 8192, 0.1  # Llama 4's attention temperature (transformers' Llama4 config)

# a FlexAttention score_mod: (score, b, h, i, j) -> score plus the logit term at batch b, head h, query slot i,
# key slot j (scalar tensors; `torch.nn.attention.flex_attention`)
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def position_at(positions: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    """(L,) or (B, L) positions -> (b, i) -> the position of slot i in row b, for a score_mod."""
    if positions.dim() == 1:
        return lambda b, i: positions[i]
    return lambda b, i: positions[b, i]


def chain_score_mods(*mods: ScoreMod | None) -> ScoreMod | None:
    """One score_mod applying each given one in turn (None when none is given)."""
    mods = [mod for mod in mods if mod is not None]
    if len(mods) < 2:
        return mods[0] if mods else None
    first, second = mods
    return lambda score, b, h, i, j: second(first(score, b, h, i, j), b, h, i, j)


def check_continuous_positions(encoding: "PositionalEncoding", randomize_positions: int | None) -> None:
    """A one-line error unless `continuous_positions` can serve `encoding`: it needs `randomize_positions` (the
    range) and an encoding that takes float positions, which the error names."""
    if randomize_positions is None:
        raise ConfigError("continuous_positions needs randomize_positions (the range [0, N) to sample from)")
    if not encoding.float_positions:
        # the registry imports this module, so it is read from the loaded modules, not imported here
        registry = sys.modules.get("lightning_modules.encodings")
        found = registry.ENCODINGS.items() if registry else ((c.name, c) for c in subclasses(PositionalEncoding))
        serving = ", ".join(sorted({name for name, cls in found if cls.float_positions and name != "base"}))
        raise ConfigError(
            f"encoding {encoding.name!r} takes integer positions only (a table or count indexed by them, or none); "
            f"continuous_positions serves: {serving}"
        )


def subclasses(cls: type) -> list[type]:
    """Every class defined below `cls`, depth first, in definition order."""
    return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]


class PositionalEncoding(nn.Module):
    """Base class of every encoding: each hook is the identity until a subclass overrides it.

    The Transformer calls, in this order and nothing else:
    - `embed(x, positions)` once on the token embeddings (absolute encodings);
    - `bias(positions)` once per forward: a content-independent logit term shared by all layers;
    - `rotate(q, k, positions)` in every layer (rotary encodings);
    - `content_bias(q, k, positions)` in every layer: logit terms that need q or k (Shaw, DeBERTa);
    - `attention_scale()`: the content logit scale (1/sqrt(D) unless the paper says otherwise);
    - `attend(q, k, v, mask, ...)` in every layer: softmax attention through SDPA; overridden only by an
      encoding that needs the attention weights themselves (Shaw's relative values) or replaces the softmax
      (stick-breaking, `softmax_attention = False`; in a cached decoding step its n queries are the last n of
      the T keys).
    Capabilities are class attributes, checked when the model is built.
    FlexAttention (`flex = True`): the encoding's logit terms are also written as score_mods, evaluated inside
    the fused kernel instead of read from a dense (B, H, L, L) mask: `score_mod(positions)` is `bias`
    (built once per forward), `content_score_mod(q, k, positions)` is `content_bias` (every layer); the
    Transformer then calls these instead of `bias` / `content_bias` when its attention backend is flex.
    `randomize_positions` (Ruoss et al. 2023, every encoding): at training time the Transformer feeds
    sorted distinct positions sampled from [0, randomize_positions) instead of 0..L-1, one draw per example for
    its own length (a padded batch's examples do not share the padded length's draw); evaluation uses 0..L-1,
    as the paper's Figure 1, or samples too with `randomize_positions_eval` (the official JAX code samples at
    evaluation, one set per batch of one length). Encodings with a table size it by
    `num_positions = max(max_length, randomize_positions)`.
    `continuous_positions` (with `randomize_positions` N): the training positions are floats instead, each
    example's own length of sorted i.i.d. uniform draws from [0, N) (padded slots 0); evaluation keeps 0..L-1
    (and `randomize_positions_eval`'s integer draws). Only for an encoding whose hooks compute from the
    positions themselves (`float_positions`: RoPE and its variants, the sinusoid, ALiBi, FoPE); one that indexes a
    table by them (a learned table, T5's buckets) refuses it in one line.
    `length_scale` (every encoding): each query row of every layer is multiplied, after `rotate` and before
    `content_bias` and the attention, by a factor of its length: `ssmax` (Nakanishi 2025, "Scalable-Softmax Is
    Superior for Attention": s_h log n, n the keys the query attends over, i + 1 causal, the real length
    bidirectional; s a learned scalar per head, `ssmax_scale`, initialised to 0.43) or `llama4` (Llama 4's
    attention temperature, transformers' `attn_temperature_tuning`: log(floor((p + 1) / 8192) + 1) 0.1 + 1 at
    position p, exactly 1 below position 8191). Scaling q scales that row's content logits q.k (and the
    content terms that read q); a position-only `bias` is not scaled. `query_scale` gives the factor.
    `cls_first`: set by the model (not an option) when position 0 always holds [CLS] (masked-LM and
    classification); TUPE's [CLS] untying is on by default only then.
    Initialisation: every trainable tensor starts as the method's reference code does, stated with its
    source in the encoding's docstring and declared, per tensor, in the class attribute `init_reference`
    (specs from encodings/init_reference.py), which tests/models/test_encodings_contract.py checks.

    Position-only tensors (depending on positions and fixed options, never on a parameter) are position
    tables, as torchtune's RoPE cache: `self.register_position_table("rotations", "cos_sin_table")` in
    `__init__` keeps `self.cos_sin_table(torch.arange(num_positions))` as the non-persistent buffer
    `self.rotations` (it moves with `.to()`, never reaches state_dict, compiles as a constant), and the hooks
    index it by their positions (`self.rotations[:, positions]`). A row per position (or, for a function of the
    distance j - i, `2 * table_length - 1` rows indexed by j - i + table_length - 1). Tables are built
    from the options at construction; `reserve(n)`, which the Transformer calls once per forward, rebuilds
    them for n positions when a longer input comes (relative encodings serve any length; encodings with
    `max_positions` raise a clear error instead). Anything that depends on a parameter, or on the evaluated
    length (RoPE's dynamic NTK), is computed in the hook, every forward.
    """

    causal_only: ClassVar[bool] = False  # refuses bidirectional use (e.g. xPos)
    # the hooks depend on each example's length (its largest position + 1, per row of (B, L) positions), e.g.
    # RoPE's dynamic NTK: given a padding mask, the Transformer passes (B, L) positions with padded slots at 0
    length_dependent: bool = False
    shift_invariant: ClassVar[bool] = False  # logits unchanged when every position moves by a constant
    # every logit term it adds has a score_mod (FlexAttention can serve it); an instance may turn it off
    flex: bool = False
    # decoding may keep each layer's rotated keys and values (see `cacheable`); an instance may turn it off
    kv_cache: bool = True
    # attention is a softmax over the logits (SDPA, FlexAttention); False: the encoding's `attend` computes another
    # attention (stick-breaking), so FlexAttention cannot serve it and a softmax reference does not apply
    softmax_attention: ClassVar[bool] = True
    # the hooks take float positions (computed from them, no table indexed by them): `continuous_positions`
    float_positions: ClassVar[bool] = False

    def __init__(self, *, dim: int, num_heads: int, max_length: int, causal: bool, cls_first: bool = False,
                 randomize_positions: PositiveInt | None = None, randomize_positions_eval: bool = False,
                 continuous_positions: bool = False,
                 length_scale: Literal["none", "ssmax", "llama4"] = "none"):  # fmt: skip
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"dim={dim} is not divisible by num_heads={num_heads}")
        if self.causal_only and not causal:
            raise ConfigError(f"encoding {self.name!r} is causal-only; set --model.causal=true")
        if randomize_positions is not None and randomize_positions < max_length:
            raise ConfigError(
                f"randomize_positions={randomize_positions} must be >= the longest sequence (max_length={max_length})"
            )
        if randomize_positions_eval and randomize_positions is None:
            raise ConfigError("randomize_positions_eval needs randomize_positions (the range N to sample from)")
        if continuous_positions:
            check_continuous_positions(self, randomize_positions)
        self.continuous_positions = continuous_positions
        self.dim, self.num_heads, self.max_length, self.causal = dim, num_heads, max_length, causal
        self.cls_first = cls_first  # position 0 holds [CLS] (set by the model, never by the user)
        self.head_dim = dim // num_heads
        self.randomize_positions, self.randomize_positions_eval = randomize_positions, randomize_positions_eval
        self.eval_generators: dict[str, torch.Generator] = {}  # device -> `randomize_positions_eval`'s draws
        self.num_positions = max(max_length, randomize_positions or 0)  # rows a position table needs
        self.table_length = self.num_positions  # rows of the position tables (grown by `reserve`)
        self.position_tables: dict[str, str] = {}  # buffer name -> the method that builds it
        self.length_scale = length_scale
        # an empty buffer that moves with `.to()`: a stateless encoding (no parameter, no table) still knows its
        # device, so `positional_logits` builds its positions there
        self.register_buffer("device_anchor", torch.empty(0), persistent=False)
        if length_scale == "ssmax":
            self.ssmax_scale = nn.Parameter(torch.full((num_heads,), SSMAX_INIT))  # (H,): s per head

    name: ClassVar[str] = "base"
    # each trainable tensor (state_dict key, default options) -> its reference init (encodings/init_reference.py);
    # None: not declared (the registry-wide initialisation test fails until it is)
    init_reference: ClassVar[dict[str, tuple] | None] = None
    max_positions: int | None = None  # largest position + 1 the encoding can serve; None = any

    def register_position_table(self, name: str, method: str) -> None:
        """Keep `getattr(self, method)(arange(table_length))` as the non-persistent buffer `name`."""
        self.position_tables[name] = method
        self.register_buffer(name, getattr(self, method)(torch.arange(self.table_length)), persistent=False)

    def reserve(self, length: int) -> None:
        """Make the position tables cover positions 0..length-1 (rebuilt on their device and dtype when they
        are shorter); a clear error beyond `max_positions`."""
        if self.max_positions is not None and length > self.max_positions:
            raise ConfigError(
                f"encoding {self.name!r} serves positions < {self.max_positions} but got "
                f"position {length - 1}; raise --model.arch.max_length or use a relative "
                "encoding (rope, t5_bias, alibi)"
            )
        if length <= self.table_length:
            return
        self.table_length = length
        for name, method in self.position_tables.items():
            old = getattr(self, name)
            table = getattr(self, method)(torch.arange(length, device=old.device)).to(old.dtype)
            self.register_buffer(name, table, persistent=False)

    def check_positions(self, positions: Tensor) -> None:
        """For explicit positions (one read of their range): a clear error for a negative position or one
        beyond `max_positions`, else `reserve` up to the largest."""
        if int(positions.min()) < 0:
            raise ConfigError(f"encoding {self.name!r} got a negative position {int(positions.min())}")
        self.reserve(int(positions.max()) + 1)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """(B, L, C) token embeddings -> (B, L, C) input of the first layer."""
        return x

    def bias(self, positions: Tensor) -> Tensor | None:
        """Additive logit term (H, L, L) or (B, H, L, L), or None; computed once per forward."""
        return None

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """(B, H, L, D) queries and keys -> transformed queries and keys."""
        return q, k

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor | None:
        """Content-dependent relative logit term (B, H, L, L), or None."""
        return None

    def score_mod(self, positions: Tensor) -> ScoreMod | None:
        """`bias(positions)` as a FlexAttention score_mod (adds bias[b, h, i, j] to the scaled score), or None
        without a bias; built once per forward."""
        return None

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod | None:
        """`content_bias(q, k, positions)` as a FlexAttention score_mod, or None without one; every layer."""
        return None

    @property
    def adds_logit_terms(self) -> bool:
        """Whether the encoding adds a bias or a content term to the logits (FlexAttention only helps then)."""
        base = PositionalEncoding
        return type(self).bias is not base.bias or type(self).content_bias is not base.content_bias

    def train(self, mode: bool = True):
        """Entering evaluation restarts the generator of `randomize_positions_eval`'s draws (`eval_generator`)."""
        if not mode:
            self.eval_generators = {}
        return super().train(mode)

    def eval_generator(self, device) -> torch.Generator:
        """The generator that `randomize_positions_eval` draws from, seeded EVAL_POSITIONS_SEED at each `eval()`:
        an evaluation draws the same positions whenever it runs, and never advances the global RNG that training
        draws from (so a run's training does not depend on when it was validated)."""
        key = str(torch.device(device))
        if key not in self.eval_generators:
            self.eval_generators[key] = torch.Generator(device=device).manual_seed(EVAL_POSITIONS_SEED)
        return self.eval_generators[key]

    @property
    def cacheable(self) -> bool:
        """A KV cache decodes exactly: a key's rotation does not change when later tokens come (not so for a
        `length_dependent` encoding, whose frequencies follow the longest position, nor for positions sampled
        afresh at evaluation), and `kv_cache` is not turned off. The cached step calls the hooks with the new
        tokens' positions for `embed` / `rotate`, and takes the new queries' rows of `bias` and `content_bias`
        (each row depends only on its own query, and on all keys: CoPE's counts and FoX's gates included)."""
        return self.kv_cache and not self.length_dependent and not self.randomize_positions_eval

    @property
    def flex_capable(self) -> bool:
        """FlexAttention can serve it: a softmax attention whose every logit term has a score_mod, or that adds
        none."""
        return self.softmax_attention and (self.flex or not self.adds_logit_terms)

    @property
    def sink_capable(self) -> bool:
        """`arch.attention_sinks` can serve it: a softmax that SDPA / FlexAttention computes (the sink is one more
        key, zero, with its own logit); not an `attend` that computes the weights itself (an override that defers
        to this one says so by overriding this property)."""
        return self.softmax_attention and type(self).attend is PositionalEncoding.attend

    def query_scale(self, positions: Tensor, keys: Tensor) -> Tensor | None:
        """`length_scale`'s factor of each query row, broadcastable to (B, H, L, D) queries, or None (`none`).
        `positions` (L,) or (B, L) of the queries; `keys` (L,), (B, L) or (B, 1): how many keys each attends over."""
        if self.length_scale == "ssmax":  # s_h log n
            return self.ssmax_scale[:, None, None] * keys.float().log()[..., None, :, None]  # (..., H, L, 1)
        if self.length_scale == "llama4":  # transformers' Llama4TextAttention, attn_temperature_tuning
            floor = torch.floor((positions.float() + 1.0) / LLAMA4_FLOOR_SCALE)
            return (torch.log1p(floor) * LLAMA4_ATTN_SCALE + 1.0)[..., None, :, None]  # (..., 1, L, 1)
        return None

    def attention_scale(self) -> float:
        """Scale of the content logits q.k."""
        return self.head_dim**-0.5

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, is_causal: bool, dropout_p: float,
               scale: float, positions: Tensor) -> Tensor:  # fmt: skip
        """(B, H, L, D) q, k, v and the merged SDPA mask -> (B, H, L, D) attention output."""
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale
        )  # fmt: skip

    def untrained_note(self, train_length: int) -> str | None:
        """One line naming the parameters that training on `train_length` positions never reaches (e.g. T5's
        far buckets), or None."""
        return None

    @torch.no_grad()
    def positional_logits(self, length: int) -> Tensor | None:
        """Exactly the content-independent term added to the logits at positions 0..length-1."""
        self.reserve(length)
        bias = self.bias(torch.arange(length, device=self.device_anchor.device))
        return None if bias is None else bias.expand(self.num_heads, length, length)
