import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from pe_core.ranges import PositiveFloat


class NoPEHeadScale(PositionalEncoding):
    """NoPE with a learned softmax temperature per head: logits_h(i, j) = s_h q_i . k_j / sqrt(D), no position term.

    Wang et al., ACL Findings 2024, "Length Generalization of Causal Transformers without Position Encoding";
    reference AntNLP/nope_head_scale, models/llama_nope.py, `ScaleMixin.query_scale` with
    `softmax_scale_type=HS`: `scale_param = full((num_heads,), softmax_scale)` and the queries multiplied by
    `scale_param / sqrt(head_dim)` before q.k (here: q multiplied by s_h in `rotate`, the 1/sqrt(D) kept in
    `attention_scale`, the same product). `scale_init` is the reference's `softmax_scale` (default 1, without the
    1/sqrt(D) factor: at 1 the encoding is exactly `none`; its head-scale script fine-tunes from 1.6).
    `uniform=True` is the reference's `softmax_scale_type=CONST`, the paper's uniform-scale baseline and its
    inference knob: one fixed, untrained s = `scale_init` for every head, searched per evaluation length
    (a trained model's per-head scales can also be overwritten at inference through `head_scale`).
    Deviations: one (H,) vector of scales serves every layer (the reference holds one per layer), kept in
    float32 (the reference: bfloat16). Not part of the encoding, so not here: the reference's recipe of
    fine-tuning only the scales of a pretrained NoPE model at the longer length (`freeze_type=BASE`) and its
    clamp of the scales to >= `scale_lb` after each optimiser step.
    """

    name = "nope_head_scale"
    init_reference = {"head_scale": ("const", 1.0)}  # softmax_scale's default 1
    shift_invariant = True
    causal_only = False

    def __init__(self, *, scale_init: PositiveFloat = 1.0, uniform: bool = False, **common):
        super().__init__(**common)
        self.uniform = uniform
        scales = torch.full((self.num_heads,), float(scale_init))
        if uniform:
            self.register_buffer("head_scale", scales)
        else:
            self.head_scale = nn.Parameter(scales)  # (H,): s_h

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return q * self.head_scale[:, None, None].to(q.dtype), k
