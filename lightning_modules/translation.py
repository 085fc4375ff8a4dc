"""Encoder-decoder Transformer for translation, with independent positional encodings on the two sides.

Shape legend: B batch, K beams, S source length, T target length, C model width, H heads, D head dim,
V vocabulary.
"""

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.text import SacreBLEUScore

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.compiling import compile_blocks
from lightning_modules.encodings import ENCODINGS
from lightning_modules.optim import LRDecay
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.registry import ENCODING_ARGS
from lightning_modules.task_module import TaskModule, options_help
from lightning_modules.transformer import (
    Attention,
    KVCache,
    LayerCache,
    Transformer,
    build_arch_encoding,
    can_cache,
    check_attention_backend,
    check_attention_options,
    decoding_bias,
    default_positions,
    init_weights,
    layer_masks,
)
from pe_core.errors import ConfigError
from pe_core.ranges import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from pe_core.vocab import BOS, EOS, IGNORE_INDEX, PAD

PPL, BLEU, BLEU_GREEDY = "ppl", "bleu", "bleu_greedy"
NEVER_GENERATED = [PAD, BOS, 3, 4]  # [PAD], [CLS], [MASK], [UNK]: masked out when decoding


# ---------------------------------------------------------------------------------------------------------
# Decoder


class CrossAttention(nn.Module):
    """Multi-head attention from decoder queries to the encoder output; no positional term (PE-Study
    varies position only inside each side's self-attention)."""

    def __init__(self, dim: int, num_heads: int, dropout: float):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, memory: Tensor, memory_allowed: Tensor, cache: LayerCache | None = None) -> Tensor:
        """x (B, T, C), memory (B, S, C), memory_allowed (B, 1, 1, S) True = real source token; a decoding
        `cache` keeps the source's keys and values after its first step."""
        B, T, C = x.shape
        H, D = self.num_heads, C // self.num_heads
        q = self.q(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        if cache is not None and cache.memory is not None:
            k, v = cache.memory
        else:
            k, v = self.kv(memory).view(B, -1, 2, H, D).permute(2, 0, 3, 1, 4)  # each (B, H, S, D)
            if cache is not None:
                cache.memory = (k, v)
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_allowed, dropout_p=dropout)  # (B, H, T, D)
        return self.out(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class DecoderBlock(nn.Module):
    """Causal self-attention (position through the encoding's hooks), cross-attention, FFN; pre-LN
    (default) or post-LN (Vaswani et al. 2017)."""

    def __init__(self, dim: int, num_heads: int, ffn_mult: int, dropout: float, post_norm: bool,
                 sinks: bool = False, qk_norm: bool = False):  # fmt: skip
        super().__init__()
        self.post_norm = post_norm
        self.self_attn = Attention(dim, num_heads, dropout, sinks, qk_norm)  # the options of `arch`
        self.cross_attn = CrossAttention(dim, num_heads, dropout)
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_mult * dim), nn.GELU(), nn.Linear(ffn_mult * dim, dim), nn.Dropout(dropout)
        )
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, memory_allowed, encoding, positions, mask, allowed, cache=None) -> Tensor:
        self_attn = lambda h: self.self_attn(h, encoding, positions, mask, allowed, True, cache)
        if self.post_norm:
            x = self.norm1(x + self.drop(self_attn(x)))
            x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory_allowed, cache)))
            return self.norm3(x + self.ffn(x))
        x = x + self.drop(self_attn(self.norm1(x)))
        x = x + self.drop(self.cross_attn(self.norm2(x), memory, memory_allowed, cache))
        return x + self.ffn(self.norm3(x))


class Decoder(nn.Module):
    """`depth` decoder blocks + final norm around a causal encoding; token embeddings come from outside
    (shared with the encoder). Mirrors `Transformer.forward`: embed hook, one bias per forward, masks."""

    def __init__(self, arch: ArchConfig):
        super().__init__()
        self.encoding, self.post_norm, self.arch = build_arch_encoding(arch, causal=True), arch.post_norm, arch
        check_attention_backend(arch.attention_backend, self.encoding, arch.dropout)
        check_attention_options(arch, self.encoding)
        self.emb_drop = nn.Dropout(arch.dropout)
        attention_options = (arch.attention_sinks, arch.qk_norm)
        self.blocks = nn.ModuleList(
            DecoderBlock(arch.dim, arch.num_heads, arch.ffn_mult, arch.dropout, arch.post_norm, *attention_options)
            for _ in range(arch.depth)
        )
        self.norm = nn.LayerNorm(arch.dim)  # final norm (pre-LN) or embedding norm (post-LN)
        self.blocks.apply(init_weights)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """x (B, T, C) token embeddings, memory (B, S, C), src_mask (B, S) -> (B, T, C) hidden states."""
        B, T, _ = x.shape
        positions = self.default_positions(B, T, x.device)
        x = self.encoding.embed(x, positions)
        x = self.emb_drop(self.norm(x) if self.post_norm else x)
        mask, allowed = layer_masks(self, positions, x, None, causal=True)
        memory_allowed = src_mask[:, None, None, :].bool()  # (B, 1, 1, S)
        for block in self.blocks:
            x = block(x, memory, memory_allowed, self.encoding, positions, mask, allowed)
        return x if self.post_norm else self.norm(x)

    def default_positions(self, batch: int, length: int, device) -> Tensor:
        return default_positions(self.encoding, self.training, batch, length, device)

    def decode(self, x: Tensor, memory: Tensor, src_mask: Tensor, cache: KVCache) -> Tensor:
        """Hidden states (B, n, C) of the new token embeddings x (B, n, C) after those `cache` holds: the last
        n rows of `self(all of them, memory, src_mask)`, through the KV cache (`Transformer.decode`)."""
        n, everything = x.shape[1], cache.extend(x)
        if not can_cache(self):
            return self(everything, memory, src_mask)[:, -n:]
        positions = self.default_positions(len(x), everything.shape[1], x.device)
        x = self.encoding.embed(x, positions[-n:])
        x = self.emb_drop(self.norm(x) if self.post_norm else x)
        bias = decoding_bias(self.encoding, positions, n, x)
        memory_allowed = src_mask[:, None, None, :].bool()
        for block, layer in zip(self.blocks, cache.layers):
            x = block(x, memory, memory_allowed, self.encoding, positions, bias, None, layer)
        return x if self.post_norm else self.norm(x)


def check_encoder_encoding(name: str) -> None:
    if name in ENCODINGS and ENCODINGS[name].causal_only:
        raise ConfigError(
            f"encoding {name!r} is causal-only and cannot encode the (bidirectional) source; "
            "use it as --model.decoder_encoding"
        )


# ---------------------------------------------------------------------------------------------------------
# Model


@options_help(
    arch="the encoder's encoding and depth, and the sizes both sides share (vocab_size, max_length linked)",
    decoder_encoding="the decoder's positional encoding (a registry name or preset)",
    decoder_encoding_options="the decoder encoding's own options",
    decoder_depth="decoder layers",
    label_smoothing="label smoothing of the training loss",
    beam_size="beam width of test decoding",
    max_decode_len="generated tokens including EOS; null = arch.max_length",
    val_bleu_batches="validation batches decoded for val/bleu; null = all",
)
class TranslationModel(TaskModule):
    """Encoder-decoder Transformer translation model with separate encoder and decoder position encodings.

    Protocol: PE-Study (Wang & Chen 2020, "What Do Position Embeddings Learn?", section MT) trains
    Transformer encoder-decoders on Multi30k En->De with different position embeddings on the encoder and
    decoder side and scores them by BLEU with beam 5. The encoder is `Transformer(arch, causal=False)` with a
    source padding mask; the decoder (`arch` with `decoder_encoding` and `decoder_depth`) is causal
    self-attention (through its encoding's hooks) + cross-attention to the encoder output (no positional term)
    + FFN. One token embedding is shared by encoder, decoder and output projection (joint vocabulary). Loss:
    label-smoothed cross-entropy.

    Logs `train/loss`; `val/loss` (token NLL without label smoothing) and `val/ppl` = exp(val/loss);
    `val/bleu`: greedy decoding on the first `val_bleu_batches` validation batches (all when None);
    `test/loss`, `test/ppl`, `test/bleu` (beam search, `beam_size`) and `test/bleu_greedy` on the whole
    test split. BLEU is torchmetrics' `SacreBLEUScore` (corpus BLEU-4, sacreBLEU's default "13a"
    tokenisation, case-sensitive, no smoothing; computed offline without the sacrebleu package) of the
    detokenised hypotheses against the raw reference sentences, in 0-100.
    Decoding re-runs the decoder over the whole prefix at every step (no KV cache: correct for every
    encoding) for at most min(max_decode_len, max_length) tokens; [PAD], [CLS], [MASK] and [UNK] are
    never generated.

    Per-example outcomes (lightning_modules/outcomes.py), one row per evaluated sentence: `id`, `hash` (of its
    source and target tokens), `nll` (mean NLL of its target tokens, EOS included, teacher-forced, without label
    smoothing), `tokens` and `tok_acc` (teacher-forced argmax accuracy). val/loss is the token-weighted mean of
    `nll`. BLEU has no per-sentence column: corpus BLEU pools n-gram counts and the brevity penalty over the
    whole corpus, so it is not a mean of per-sentence values (and sentence BLEU, smoothed, is another metric).
    """

    ENCODING_ARGS = ENCODING_ARGS["TranslationModel"]  # run encoding "<encoder>+<decoder>"

    def __init__(
        self,
        # --model.arch.*: the encoder's encoding and depth, the sizes both sides share; vocab_size and max_length
        # are linked from the data
        arch: ArchConfig = ArchConfig(encoding="sinusoidal", dim=256, depth=3, dropout=0.1, max_length=64),
        decoder_encoding: str = "sinusoidal",
        decoder_encoding_options: dict | None = None,
        decoder_depth: PositiveInt = 3,
        lr: PositiveFloat = 5e-4,
        weight_decay: NonNegativeFloat = 0.0,
        warmup_steps: NonNegativeInt = 0,
        lr_decay: LRDecay = "cosine",
        label_smoothing: Fraction = 0.1,
        beam_size: PositiveInt = 5,
        max_decode_len: PositiveInt | None = None,  # generated tokens incl. EOS; None = max_length
        val_bleu_batches: PositiveInt | None = 4,  # validation batches decoded for val/bleu; None = all
        compile: bool = False,  # torch.compile the encoder and decoder blocks (lightning_modules/compiling.py)
    ):
        super().__init__()
        self.arch = self.save_arch_hyperparameters(arch)
        for name in self.arch.layer_encodings:
            check_encoder_encoding(name)
        self.encoder = Transformer(self.arch, causal=False)
        # the decoder's own encoding; a per-layer schedule and windows (arch.nope_every, arch.window) are the encoder's
        decoder = replace(self.arch, encoding=decoder_encoding, encoding_options=decoder_encoding_options,
                          depth=decoder_depth, nope_every=None, window=None)  # fmt: skip
        self.decoder = Decoder(decoder)
        if compile:
            compile_blocks(self.encoder)
            compile_blocks(self.decoder)
        self.eval_loss = nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})
        self.bleu = nn.ModuleDict({name: SacreBLEUScore(tokenize="13a") for name in ("val", "test", "test_greedy")})
        columns = ("id", "hash", "nll", "tokens", "tok_acc")
        self.outcomes = nn.ModuleDict({s: ExampleOutcomes(columns) for s in ("val", "test")})

    @property
    def token_emb(self) -> nn.Embedding:
        return self.encoder.token_emb  # shared: encoder input, decoder input, output projection

    # --- forward ---------------------------------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src (B, S), src_mask (B, S) True = real -> memory (B, S, C)."""
        return self.encoder(src, padding_mask=src_mask)

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """tgt_in (B, T) -> decoder hidden states (B, T, C)."""
        return self.decoder(self.token_emb(tgt_in), memory, src_mask)

    def logits(self, hidden: Tensor) -> Tensor:
        """(..., C) hidden states -> (..., V) logits through the shared embedding."""
        return F.linear(hidden, self.token_emb.weight)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        return self.logits(self.decode(tgt_in, self.encode(src, src_mask), src_mask))  # (B, T, V)

    def log_probs(self, logits: Tensor) -> Tensor:
        """Decoding distribution: log-softmax with the never-generated tokens at -inf."""
        logits = logits.float()
        logits[..., NEVER_GENERATED] = float("-inf")
        return logits.log_softmax(-1)

    def next_log_probs(self, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache: KVCache | None = None) -> Tensor:
        """tokens (B, t) prefixes -> (B, V) log-probabilities of the next token: with a `cache` holding the
        first t - 1 tokens' state, only the last token is decoded; without, the whole prefix is re-decoded."""
        if cache is None:
            return self.log_probs(self.logits(self.decode(tokens, memory, src_mask)[:, -1]))
        hidden = self.decoder.decode(self.token_emb(tokens[:, -1:]), memory, src_mask, cache)
        return self.log_probs(self.logits(hidden[:, -1]))

    def new_cache(self, cache: bool) -> KVCache | None:
        return KVCache(len(self.decoder.blocks)) if cache else None

    # --- decoding --------------------------------------------------------------------------------------

    def decode_steps(self, max_len: int | None = None) -> int:
        limit = self.hparams.max_decode_len or self.arch.max_length
        return min(limit, self.arch.max_length) if max_len is None else max_len

    @torch.no_grad()
    def greedy(self, src: Tensor, src_mask: Tensor, max_len: int | None = None, cache: bool = True) -> Tensor:
        """(B, N) argmax continuation of BOS: each row ends at its first EOS, PAD after it (N <= max_len).
        `cache`: decode through a KV cache (the same result; False re-decodes every prefix)."""
        memory, state = self.encode(src, src_mask), self.new_cache(cache)  # (B, S, C)
        tokens = torch.full((len(src), 1), BOS, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(len(src), dtype=torch.bool, device=src.device)
        for _ in range(self.decode_steps(max_len)):
            step = self.next_log_probs(tokens, memory, src_mask, state).argmax(-1)  # (B,)
            step = step.masked_fill(done, PAD)
            tokens = torch.cat([tokens, step[:, None]], dim=1)
            done |= step == EOS
            if done.all():
                break
        return tokens[:, 1:]

    @torch.no_grad()
    def beam_search(self, src: Tensor, src_mask: Tensor, beam_size: int | None = None, max_len: int | None = None,
                    cache: bool = True):  # fmt: skip
        """Batched beam search -> ((B, N) best hypotheses ending at EOS with PAD after, (B,) their scores).

        Score of a hypothesis y_1..y_n (y_n = EOS, or the last of max_len tokens when none ended) =
        sum_i log p(y_i | y_<i, x) / n: the mean token log-probability (length normalisation with
        exponent 1, as fairseq's default lenpen=1; n counts EOS). As fairseq, every step ranks the
        K * V extensions of the K live hypotheses by summed log-probability; an extension ending in EOS
        and ranked within the top K is finished, the K best other extensions stay live; a sentence is done
        once it has K finished hypotheses. The live ones at max_len also compete. beam_size=1 is greedy.
        `cache`: decode through a KV cache, reordered with the surviving beams (the same result).
        """
        K, B, N = beam_size or self.hparams.beam_size, len(src), self.decode_steps(max_len)
        memory = self.encode(src, src_mask).repeat_interleave(K, dim=0)  # (B*K, S, C)
        mask = src_mask.repeat_interleave(K, dim=0)  # (B*K, S)
        state = self.new_cache(cache)
        tokens = torch.full((B, K, 1), BOS, dtype=torch.long, device=src.device)  # (B, K, 1 + t)
        scores = torch.full((B, K), float("-inf"), device=src.device)  # summed log-probs of live beams
        scores[:, 0] = 0.0  # one live hypothesis (BOS) at the start
        best = torch.full((B, N), PAD, dtype=torch.long, device=src.device)
        best_score = torch.full((B,), float("-inf"), device=src.device)
        finished = torch.zeros(B, dtype=torch.long, device=src.device)  # finished hypotheses per sentence
        for t in range(1, N + 1):  # t = length of the extended hypotheses
            step = self.next_log_probs(tokens.view(B * K, t), memory, mask, state).view(B, K, -1)  # (B, K, V)
            candidates = (scores[:, :, None] + step).view(B, -1)  # (B, K*V)
            top, index = candidates.topk(min(2 * K, candidates.shape[1]), dim=-1)  # (B, 2K)
            beam, token = index // step.shape[-1], index % step.shape[-1]
            ends = (token == EOS) & (torch.arange(top.shape[1], device=src.device) < K) & top.isfinite()
            ends &= (finished < K)[:, None]  # a done sentence keeps its result
            self._keep_best(ends, top / t, tokens, beam, token, best, best_score)
            finished += ends.sum(-1)
            live = top.masked_fill(token == EOS, float("-inf")).topk(K, dim=-1)  # K best non-EOS extensions
            beam, token = beam.gather(1, live.indices), token.gather(1, live.indices)  # (B, K)
            tokens = torch.cat([tokens.gather(1, beam[:, :, None].expand(-1, -1, t)), token[:, :, None]], dim=2)
            if state is not None:
                state.select((beam + K * torch.arange(B, device=src.device)[:, None]).flatten())  # (B*K,) rows
            scores = live.values
            if bool((finished >= K).all()):
                return best, best_score
        # live hypotheses of max_len tokens compete with the finished ones (sentences not yet done only)
        open_ = (finished < K)[:, None] & scores.isfinite()  # (B, K)
        beams = torch.arange(K, device=src.device).expand(B, K)
        self._keep_best(open_, scores / N, tokens[:, :, :-1], beams, tokens[:, :, -1], best, best_score)
        return best, best_score

    @staticmethod
    def _keep_best(which: Tensor, normalized: Tensor, tokens: Tensor, beam: Tensor, token: Tensor, best: Tensor,
                   best_score: Tensor) -> None:  # fmt: skip
        """Where `which` (B, M) and the normalised score beats best_score, write prefix + token into best."""
        candidate = normalized.masked_fill(~which, float("-inf"))  # (B, M)
        value, j = candidate.max(dim=-1)  # (B,)
        better = value > best_score
        if not bool(better.any()):
            return
        rows = better.nonzero().flatten()
        prefix = tokens[rows, beam[rows, j[rows]], 1:]  # (R, t - 1): without BOS
        hypothesis = torch.cat([prefix, token[rows, j[rows]][:, None]], dim=1)  # (R, t)
        best[rows] = PAD
        best[rows, : hypothesis.shape[1]] = hypothesis
        best_score[rows] = value[rows]

    @torch.no_grad()
    def sequence_score(self, src: Tensor, src_mask: Tensor, hypotheses: Tensor) -> Tensor:
        """(B,) beam search's score (mean token log-prob up to and including EOS) of given (B, N) hypotheses."""
        tgt_in = torch.cat([torch.full_like(hypotheses[:, :1], BOS), hypotheses[:, :-1]], dim=1)  # (B, N)
        memory = self.encode(src, src_mask)
        logp = self.log_probs(self.logits(self.decode(tgt_in, memory, src_mask)))  # (B, N, V)
        real = hypotheses != PAD  # (B, N)
        token_logp = logp.gather(-1, hypotheses[..., None]).squeeze(-1).masked_fill(~real, 0.0)  # (B, N)
        return token_logp.sum(-1) / real.sum(-1)

    # --- training and evaluation -------------------------------------------------------------------------

    def token_losses(self, batch: dict, label_smoothing: float) -> tuple[Tensor, Tensor]:
        """(mean loss over the real target tokens, their count), both on the device (no host sync)."""
        logits = self(batch["src"], batch["src_mask"], batch["tgt_in"])  # (B, T, V)
        targets = batch["tgt_out"]
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing
        )  # fmt: skip
        return loss, (targets != IGNORE_INDEX).sum()

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss, _ = self.token_losses(batch, self.hparams.label_smoothing)
        self.watch_loss(loss)
        self.log(M.TRAIN_LOSS, loss, batch_size=len(batch["src"]))  # not prog_bar (a read per step)
        return loss

    def detokenize(self, ids: Tensor) -> list[str]:
        datamodule = self.attached_datamodule
        if datamodule is None or not hasattr(datamodule, "detokenize"):
            raise RuntimeError("BLEU needs a datamodule with detokenize() (TranslationDataModule)")
        return datamodule.detokenize(ids)

    def _score(self, metric: str, hypotheses: Tensor, refs: list[str]) -> None:
        self.bleu[metric].update(self.detokenize(hypotheses), [[ref] for ref in refs])

    def evaluate_loss(self, batch: dict, stage: str) -> None:
        """The batch's token NLL (no label smoothing) into `<stage>/loss`, and its per-sentence outcomes."""
        logits = self(batch["src"], batch["src_mask"], batch["tgt_in"])  # (B, T, V)
        targets = batch["tgt_out"]
        scored = targets != IGNORE_INDEX  # (B, T)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                                 reduction="none").view_as(targets)  # fmt: skip
        count = scored.sum(1)  # (B,)
        self.eval_loss[stage].update(losses.sum() / count.sum(), count.sum())
        right = ((logits.argmax(-1) == targets) & scored).sum(1)
        self.record_outcomes(
            stage, hash=content_hash((batch["src"], batch["src_mask"]), (targets, scored)),
            nll=losses.sum(1) / count.clamp(min=1), tokens=count, tok_acc=right / count.clamp(min=1),
        )  # fmt: skip

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.evaluate_loss(batch, "val")
        limit = self.hparams.val_bleu_batches
        if limit is None or batch_idx < limit:
            self._score("val", self.greedy(batch["src"], batch["src_mask"]), batch["ref"])

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.evaluate_loss(batch, "test")
        self._score("test", self.beam_search(batch["src"], batch["src_mask"])[0], batch["ref"])
        self._score("test_greedy", self.greedy(batch["src"], batch["src_mask"]), batch["ref"])

    def _log_epoch(self, stage: str, bleu: dict[str, str]) -> None:
        loss = self.eval_loss[stage].compute()
        values = {M.name(stage, M.LOSS): loss, M.name(stage, PPL): loss.exp()}
        for metric, key in bleu.items():
            values[M.name(stage, metric)] = 100.0 * self.bleu[key].compute()
            self.bleu[key].reset()
        self.eval_loss[stage].reset()
        self.finish_outcomes(stage)
        self.log_evaluation(values)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", {BLEU: "val"})

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test", {BLEU: "test", BLEU_GREEDY: "test_greedy"})
