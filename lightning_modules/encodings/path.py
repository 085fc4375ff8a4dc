import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import BERT, ZEROS
from pe_core.ranges import PositiveInt

CHUNK = 64  # the chunk of the within-chunk (UT) transform, as fla's reference and kernels


def householder_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """PaTH's logits q_i^T P_i P_{i-1} ... P_{j+1} k_j, P_t = I - beta_t w_t w_t^T, for j <= i (the entries
    above the diagonal mean nothing: masked).

    (B, H, L, D) q, k, w, (B, H, L) beta -> (B, H, L, L), in the inputs' dtype. Within a chunk of CHUNK tokens
    the products come from one triangular solve (the UT transform, as fla's `naive_path_attn`):
    P_s ... P_r = I - sum_{r<=u<=v<=s} w_v T_vu beta_u w_u^T with T = (I + strict_tril(beta_v w_v.w_u))^-1;
    across chunks each query is carried back one whole chunk's product at a time (O(L^2 D + L D^2)).
    """
    B, H, L, D = q.shape
    starts = range(0, L, CHUNK)
    queries, keys, products, rows = [], [], [], []  # per chunk
    for a in starts:
        chunk = slice(a, a + CHUNK)
        Q, K, W, b = q[..., chunk, :], k[..., chunk, :], w[..., chunk, :], beta[..., chunk]
        eye = torch.eye(Q.shape[-2], dtype=q.dtype, device=q.device)
        T = torch.linalg.solve_triangular(eye + (b[..., :, None] * (W @ W.mT)).tril(-1), eye, upper=False,
                                          unitriangular=True)  # fmt: skip
        qw = (Q @ W.mT).tril()  # q_i.w_v for v <= i
        wk = T @ (b[..., :, None] * (W @ K.mT)).tril(-1)  # (T beta w.k)_vj, summed over j < u <= v
        tbw = T @ (b[..., :, None] * W)  # sum_u T_vu beta_u w_u
        rows.append(Q @ K.mT - qw @ wk)  # the chunk's own block
        queries.append(Q - qw @ tbw)  # q_i^T P_i ... P_a (back to the chunk's start)
        keys.append(K - wk.mT @ W)  # P_{b-1} ... P_{j+1} k_j (forward to the chunk's end)
        products.append(torch.eye(D, dtype=q.dtype, device=q.device) - W.mT @ tbw)  # P_{b-1} ... P_a
    logits = []
    for n, a in enumerate(starts):
        carried, blocks = queries[n], [rows[n]]
        for m in range(n - 1, -1, -1):  # earlier chunks, nearest first
            blocks.insert(0, carried @ keys[m].mT)
            carried = carried @ products[m]
        blocks.append(q.new_zeros(B, H, rows[n].shape[-2], L - a - rows[n].shape[-1]))
        logits.append(torch.cat(blocks, dim=-1))
    return torch.cat(logits, dim=-2)


class PaTH(PositionalEncoding):
    """PaTH attention: positions as accumulated data-dependent Householder-like transforms between key and query.

    Yang et al., NeurIPS 2025, "PaTH Attention: Position Encoding via Accumulating Householder Transformations"
    (fla's `PaTHAttention` layer, fla/layers/path_attn.py, and its pure-torch reference `naive_path_attn`,
    fla/ops/path_attn/naive.py): logits q_i^T H_ij k_j / sqrt(D) with H_ij = P_i P_{i-1} ... P_{j+1},
    P_t = I - beta_t w_t w_t^T, so H_ii = I; causal only. As fla's layer: w_t = l2norm per head of
    silu(causal depthwise conv, kernel 3, of the low-rank projection W_up W_down (rank `w_rank`, 32) of the
    token), the conv dropped with `short_conv: false`; beta_t = 2 sigmoid(W_b . + b_b) per head (in (0, 2):
    negative eigenvalues allowed). Init as fla's `_init_weights`: every weight N(0, 0.02), bias 0 (beta 1).
    No forget gate (fla's `use_forget_gate`, off by default). Written as a `content_bias`, the difference
    q_i^T (H_ij - I) k_j / sqrt(D), so softmax, masks, dropout and the KV cache stay the Transformer's (a row
    depends only on its own query, and on all keys). Computed in fp32 whatever the compute dtype.
    Deviations: the encoding contract hands each layer its keys, not its input, so w and beta read the
    concatenated keys k_t = W_k x_t + b_k (an invertible reparametrisation of x_t for a full-rank W_k: the same
    function class, other training dynamics; smaller than fla's normed inputs at init, so w_t's norm may start
    below 1 through l2norm's eps), and one set of w / beta layers serves every layer (each with its own keys);
    fla holds one per layer. Equal to `naive_path_attn` given the same q, k, v, w, beta (checked, with fla-core).
    No position enters except through the causal order.
    """

    name = "path"
    init_reference = {"w_down.weight": BERT, "w_up.weight": BERT, "w_conv.weight": BERT, "beta.weight": BERT,
                      "beta.bias": ZEROS}  # fmt: skip  # fla PaTHAttentionPreTrainedModel._init_weights, 0.02
    causal_only = True
    shift_invariant = True  # positions enter only through the causal order

    def __init__(self, *, w_rank: PositiveInt = 32, short_conv: bool = True, **common):
        super().__init__(**common)
        self.w_down = nn.Linear(self.dim, w_rank, bias=False)
        self.w_up = nn.Linear(w_rank, self.dim, bias=False)
        # fla's ShortConvolution: depthwise, causal (left padding 2), no bias, then silu
        self.w_conv = nn.Conv1d(self.dim, self.dim, 3, groups=self.dim, padding=2, bias=False) if short_conv else None
        self.beta = nn.Linear(self.dim, self.num_heads)
        for module in (self.w_down, self.w_up, self.w_conv, self.beta):
            if module is not None:
                nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(self.beta.bias)

    def transforms(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """(B, H, L, D) keys -> w (B, H, L, D), unit rows, and beta (B, H, L) in (0, 2); in fp32 (fp32 copies
        of the weights in a bf16 model)."""
        B, H, L, D = k.shape
        keys = k.transpose(1, 2).reshape(B, L, H * D).float()  # (B, L, C)
        w = F.linear(F.linear(keys, self.w_down.weight.float()), self.w_up.weight.float())
        if self.w_conv is not None:  # causal: the first L outputs of the left-padded conv
            w = F.conv1d(w.transpose(1, 2), self.w_conv.weight.float(), padding=2, groups=self.dim)[..., :L]
            w = F.silu(w).transpose(1, 2)
        w = w.reshape(B, L, H, D).transpose(1, 2)
        w = w * torch.rsqrt(w.square().sum(-1, keepdim=True) + 1e-6)  # fla's l2norm (eps 1e-6)
        beta = 2 * torch.sigmoid(F.linear(keys, self.beta.weight.float(), self.beta.bias.float()))
        return w, beta.transpose(1, 2)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            w, beta = self.transforms(k)
            q32, k32 = q.float(), k.float()
            logits = householder_logits(q32, k32, w, beta) - q32 @ k32.mT  # q^T (H - I) k
        return logits * self.attention_scale()  # (B, H, L, L); j > i is masked
