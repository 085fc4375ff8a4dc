"""The encoding contract: the hooks through which position enters a Transformer.

Shape legend: B batch, H heads, L length, D head dim, C model width.
Positions are an explicit LongTensor of shape (L,) shared by the batch, or (B, L).
"""

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.errors import ConfigError

MEMO_SIZE = 32  # entries a TensorMemo keeps (a few tables x a dozen lengths)


def version(t: Tensor) -> int:
    """In-place version counter; -1 for inference tensors, which have none (and cannot be modified in place
    outside inference mode)."""
    return -1 if t.is_inference() else t._version


def _plain(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, (bool, int, float, str))
        or (isinstance(value, tuple) and all(map(_plain, value)))
    )


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    return [t for t in value if isinstance(t, Tensor)] if isinstance(value, tuple) else []


class TensorMemo:
    """A small LRU of tensors that depend on positions only (never on parameters), each entry anchored to
    one object by identity (kept alive by the entry, so its id cannot be reused) and valid while a stamp
    is unchanged and its own tensors were not modified in place. Copies and pickles start empty, and it
    is no buffer, so nothing of it reaches state_dict or a checkpoint."""

    def __init__(self, size: int = MEMO_SIZE):
        self.size, self.entries = size, OrderedDict()

    def __getstate__(self) -> dict:
        return {"size": self.size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["size"])

    def clear(self) -> None:
        self.entries.clear()

    def get(self, key: Any, anchor: object, stamp: tuple, compute: Callable[[], Any]) -> Any:
        hit = self.entries.get(key)
        if hit is not None and hit[0] is anchor and hit[1] == stamp:
            value, versions = hit[2], hit[3]
            if all(version(t) == v for t, v in zip(_tensors(value), versions, strict=True)):
                self.entries.move_to_end(key)
                return value
        value = compute()
        self.entries[key] = (anchor, stamp, value, tuple(version(t) for t in _tensors(value)))
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value


class PositionalEncoding(nn.Module):
    """Base class of every encoding: each hook is the identity until a subclass overrides it.

    The Transformer calls, in this order and nothing else:
    - `embed(x, positions)` once on the token embeddings (absolute encodings);
    - `bias(positions)` once per forward: a content-independent logit term shared by all layers;
    - `rotate(q, k, positions)` in every layer (rotary encodings);
    - `content_bias(q, k, positions)` in every layer: logit terms that need q or k (Shaw, DeBERTa);
    - `attention_scale()`: the content logit scale (1/sqrt(D) unless the paper says otherwise);
    - `attend(q, k, v, mask, ...)` in every layer: softmax attention through SDPA; overridden only by an
      encoding that needs the attention weights themselves (Shaw's relative values).
    Capabilities are class attributes, checked when the model is built.
    `randomize_positions` (Ruoss et al. 2023, every encoding): at training time the Transformer feeds
    sorted distinct positions sampled from [0, randomize_positions) instead of 0..L-1; encodings with a
    table size it by `num_positions = max(max_length, randomize_positions)`.
    `cls_first`: set by the model (not an option) when position 0 always holds [CLS] (masked-LM and
    classification); TUPE's [CLS] untying is on by default only then.
    Initialisation: every trainable tensor starts as the method's reference code does, stated with its
    source in the encoding's docstring; `INIT_REFERENCE` in tests/test_encodings.py holds the table of them.
    """

    causal_only: ClassVar[bool] = False  # refuses bidirectional use (e.g. xPos)
    shift_invariant: ClassVar[bool] = False  # logits unchanged when every position moves by a constant

    def __init__(self, *, dim: int, num_heads: int, max_length: int, causal: bool, cls_first: bool = False,
                 randomize_positions: int | None = None):  # fmt: skip
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"dim={dim} is not divisible by num_heads={num_heads}")
        if self.causal_only and not causal:
            raise ConfigError(f"encoding {self.name!r} is causal-only; set --model.causal=true")
        if randomize_positions is not None and randomize_positions < max_length:
            raise ConfigError(
                f"randomize_positions={randomize_positions} must be >= the longest sequence (max_length={max_length})"
            )
        self.dim, self.num_heads, self.max_length, self.causal = dim, num_heads, max_length, causal
        self.cls_first = cls_first  # position 0 holds [CLS] (set by the model, never by the user)
        self.head_dim = dim // num_heads
        self.randomize_positions = randomize_positions
        self.num_positions = max(max_length, randomize_positions or 0)  # rows a position table needs
        self._memo = TensorMemo()  # see `cached`

    name: ClassVar[str] = "base"
    max_positions: int | None = None  # largest position + 1 the encoding can serve; None = any

    def cached(self, name: str, positions: Tensor, compute: Callable[[Tensor], Any]) -> Any:
        """compute(positions), reused while `positions` is the same tensor object, unchanged in place.

        Only for values that depend on positions alone (and on buffers and plain options), never on a
        parameter: those would go stale after an optimizer step. The Transformer passes one (L,) tensor
        0..L-1 per length and device for its default positions, so for them the value is computed once per
        length (an LRU of `MEMO_SIZE`) and shared by every layer and every later forward. Any other
        positions (explicit, randomized (B, L)) are a new tensor each forward: still computed once and
        shared by the layers of that forward, then replaced (one entry per name for positions of 2+ dims).
        The stamp also holds the buffers' versions, the encoding's plain options (so changing e.g.
        `interpolation_factor` on a trained model is seen) and inference mode (inference tensors cannot
        enter autograd later); `.to()` and friends empty the memo. Inference tensors have no version
        counter: positions created under inference mode and then modified in place under inference mode
        are not noticed (pass a new tensor instead). Under torch.compile nothing is memoized: the compiled
        graph computes the value itself.
        """
        if torch.compiler.is_compiling():
            return compute(positions)
        options = tuple((k, v) for k, v in vars(self).items() if k != "training" and _plain(v))
        stamp = (version(positions), torch.is_inference_mode_enabled(), options,
                 tuple((id(b), version(b)) for b in self.buffers()))  # fmt: skip
        key = (name, id(positions)) if positions.dim() == 1 else (name, "batched")
        return self._memo.get(key, positions, stamp, lambda: compute(positions))

    def _apply(self, fn, recurse: bool = True):
        self._memo.clear()  # .to(), .cuda(), .half(): new buffers, so nothing memoized from the old ones
        return super()._apply(fn, recurse)

    def check_positions(self, positions: Tensor) -> None:
        """Raise a clear error when a position is beyond what this encoding can serve (once per positions
        tensor: see `cached`)."""
        self.cached("checked", positions, self._check_positions)

    def _check_positions(self, positions: Tensor) -> None:
        if int(positions.min()) < 0:
            raise ConfigError(f"encoding {self.name!r} got a negative position {int(positions.min())}")
        if self.max_positions is not None and int(positions.max()) >= self.max_positions:
            raise ConfigError(
                f"encoding {self.name!r} serves positions < {self.max_positions} but got "
                f"position {int(positions.max())}; raise --model.max_length or use a relative "
                "encoding (rope, t5_bias, alibi)"
            )

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

    def attention_scale(self) -> float:
        """Scale of the content logits q.k."""
        return self.head_dim**-0.5

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, is_causal: bool, dropout_p: float,
               scale: float, positions: Tensor) -> Tensor:  # fmt: skip
        """(B, H, L, D) q, k, v and the merged SDPA mask -> (B, H, L, D) attention output."""
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale
        )  # fmt: skip

    @torch.no_grad()
    def positional_logits(self, length: int) -> Tensor | None:
        """Exactly the content-independent term added to the logits at positions 0..length-1."""
        device = next(itertools.chain(self.parameters(), self.buffers()), torch.empty(0)).device
        bias = self.bias(torch.arange(length, device=device))
        return None if bias is None else bias.expand(self.num_heads, length, length)
