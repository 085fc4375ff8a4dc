import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding


def stick_breaking_weights(logits: Tensor, visible: Tensor) -> Tensor:
    """Stick-breaking attention weights A_ij = s_ij prod_{l visible, j < l} (1 - s_il), s = sigmoid(logits),
    over the visible keys of each query (0 elsewhere), in log space: log A_ij = log s_ij + sum_{l > j}
    log(1 - s_il). (..., n, T) scaled logits and a broadcastable bool mask -> (..., n, T) weights; a row's
    weights sum to at most 1 (the rest of the stick is dropped)."""
    log_rest = F.logsigmoid(-logits).masked_fill(~visible, 0.0)  # log(1 - s); masked keys leave the stick whole
    later = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # sum over the visible keys after j
    return (F.logsigmoid(logits) + later).masked_fill(~visible, float("-inf")).exp()


class StickBreaking(PositionalEncoding):
    """Stick-breaking attention: no positional encoding; each query breaks a stick from its nearest key back.

    Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention"; as fla's `StickBreakingAttention` layer
    (fla/layers/stickbreaking_attn.py) and its pure-torch reference `naive_stickbreaking_attn`
    (fla/ops/stickbreaking_attn/naive.py): A_ij = s_ij prod_{j<l<i} (1 - s_il), s_ij = sigmoid(q_i.k_j / sqrt(D)),
    over the keys j < i, computed in log space in fp32; the output sum_j A_ij v_j. The query does not attend
    to itself and the remainder of the stick, 1 - sum_j A_ij, is dropped (fla's layer: `attend_current`
    False, `rem` unused; the first query's output is 0). `attend_current: true` lets the query take its own
    key too (j <= i, the reference's option). Causal only; replaces softmax through the `attend` hook
    (`softmax_attention = False`: no FlexAttention). Attention dropout drops weights, as Shaw's values.
    Equal to `naive_stickbreaking_attn` (checked, with fla-core); no parameters.
    """

    name = "stick_breaking"
    init_reference = {}  # no trainable tensors
    causal_only = True
    shift_invariant = True  # positions enter only through the causal order
    softmax_attention = False

    def __init__(self, *, attend_current: bool = False, **common):
        super().__init__(**common)
        self.attend_current = attend_current

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, is_causal: bool, dropout_p: float,
               scale: float, positions: Tensor) -> Tensor:  # fmt: skip
        """The n queries are the last n of the T keys (n = T but in a cached decoding step); `mask`, when given,
        a bool "may attend" mask narrowing the causal one (stick-breaking adds no logit term)."""
        n, T = q.shape[-2], k.shape[-2]
        query = torch.arange(T - n, T, device=q.device)[:, None]
        key = torch.arange(T, device=q.device)
        visible = key <= query if self.attend_current else key < query  # (n, T)
        if mask is not None:
            visible = visible & mask
        with torch.autocast(q.device.type, enabled=False):
            logits = q.float() @ k.float().mT * scale  # (B, H, n, T)
            weights = F.dropout(stick_breaking_weights(logits, visible), p=dropout_p)
            return (weights @ v.float()).to(v.dtype)
