"""Masked-LM pre-training data as in TUPE (Ke et al. 2021) / BERT (Devlin et al. 2019).

Every block is `[CLS]` followed by block_size - 1 tokens of the corpus's token stream (non-overlapping,
packed across line and document boundaries, as RoBERTa's FULL-SENTENCES), so [CLS] always sits at
position 0, where TUPE's untied [CLS] expects it. Masking (BERT): each non-special token is selected
with probability `mask_rate` (independently per token); a selected token becomes [MASK] with probability
0.8, a random non-special token with 0.1 and stays itself with 0.1; the loss is on selected tokens only.
Special tokens ([CLS], [PAD], [SEP], ...) are never selected.

Training blocks are masked afresh every time they are seen (dynamic masking, RoBERTa), on the device
after transfer, with the global RNG that `seed_everything` seeds. Validation and test blocks are masked
once at setup with a generator seeded by `seed`, so every evaluation of every run scores the same
positions. The tokenizer (byte-level BPE by default) is trained on the training split, cached, and saved
inside every checkpoint so that fine-tuning reads text exactly as pre-training did.
Shape legend: B batch, L block size.
"""

from typing import Annotated

import torch
from annotated_types import Ge
from torch import Tensor
from torch.utils.data import TensorDataset

from datamodules.base import FileDataModule, Limit, Tokenizer, data_options_help
from datamodules.text import (
    CORPORA,
    SPECIAL_TOKENS,
    Corpus,
    check_tokenizer,
    encode_cached,
    load_or_train_tokenizer,
    read_corpus,
)
from pe_core.ranges import OpenFraction

PAD, CLS, SEP, MASK = (SPECIAL_TOKENS.index(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]"))
NUM_SPECIAL = len(SPECIAL_TOKENS)  # ids below this are special and never masked or sampled


def mask_tokens(tokens: Tensor, vocab_size: int, rate: float = 0.15, generator=None) -> tuple[Tensor, Tensor]:
    """BERT masking of (..., L) token ids -> (inputs, targets), targets -100 where not selected."""
    draw = lambda: torch.rand(tokens.shape, generator=generator, device=tokens.device)  # noqa: E731
    selected = (draw() < rate) & (tokens >= NUM_SPECIAL)
    action = draw()
    random_ids = torch.randint(NUM_SPECIAL, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    inputs = torch.where(selected & (action < 0.8), MASK, tokens)
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(selected, tokens, -100)


def cls_blocks(ids: Tensor, block_size: int, limit: int | None = None) -> Tensor:
    """(N, L) blocks: [CLS] + the next block_size - 1 tokens of the stream (remainder dropped)."""
    body = block_size - 1
    count = len(ids) // body if limit is None else min(len(ids) // body, limit)
    blocks = ids[: count * body].view(count, body)
    return torch.cat([torch.full((count, 1), CLS, dtype=ids.dtype), blocks], dim=1)


@data_options_help(
    task="the text corpus (its files under data_dir, or hub_name)",
    tokenizer="auto (char for tinyshakespeare, word for wikitext2), char, word or bpe (byte-level BPE), learned "
    "on the training split",
    block_size="tokens per block, [CLS] included (at least 2)",
    mask_rate="probability that a non-special token is selected for the loss (BERT: 80 % [MASK], 10 % random, "
    "10 % kept)",
    max_eval_blocks="keep the first N validation and test blocks (tests, quick runs); null: all",
)
class MaskedLMDataModule(FileDataModule):
    """Masked-LM pre-training blocks on a text corpus (tinyshakespeare or wikitext2, see datamodules.text).

    Batches are dicts `tokens` (B, L) inputs with masks applied and `targets` (B, L) with -100 where no
    loss is taken. `vocab_size`, `max_seq_len` (= block_size) and `tokenizer` are known after `__init__`.
    `max_train_blocks` / `max_eval_blocks` keep the first N blocks (tests, quick runs).
    """

    @staticmethod
    def check_options(tokenizer: str = "bpe", **_) -> None:
        check_tokenizer(tokenizer)

    def __init__(
        self,
        task: Corpus = "wikitext2",
        tokenizer: Tokenizer = "bpe",
        block_size: Annotated[int, Ge(2)] = 128,
        mask_rate: OpenFraction = 0.15,
        max_train_blocks: Limit = None,
        max_eval_blocks: Limit = None,
        **kwargs,  # data_dir, hub_name, vocab_size_limit (FileDataModule); batch_size, seed, num_workers
    ):
        super().__init__(**kwargs)
        self.task, self.corpus = f"mlm_{task}", task
        self.block_size, self.max_seq_len, self.mask_rate = block_size, block_size, mask_rate
        self.max_train_blocks, self.max_eval_blocks = max_train_blocks, max_eval_blocks
        kind = CORPORA[task][3] if tokenizer == "auto" else tokenizer
        self.texts, key = read_corpus(task, self.data_dir, self.hub_name)
        self.tokenizer, self.tokenizer_file = load_or_train_tokenizer(kind, self.vocab_size_limit, self.texts[0], key)
        self.vocab_size = self.tokenizer.get_vocab_size()

    def _eval_set(self, text: str, offset: int) -> TensorDataset:
        blocks = cls_blocks(
            encode_cached(self.tokenizer, text, self.tokenizer_file), self.block_size, self.max_eval_blocks
        )
        generator = torch.Generator().manual_seed(self.seed + offset)
        return TensorDataset(*mask_tokens(blocks, self.vocab_size, self.mask_rate, generator))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            ids = encode_cached(self.tokenizer, self.texts[0], self.tokenizer_file)
            self.train_set = TensorDataset(cls_blocks(ids, self.block_size, self.max_train_blocks))
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self._eval_set(self.texts[1], offset=1)
        if stage in (None, "test") and self.test_set is None:
            self.test_set = self._eval_set(self.texts[2], offset=2)

    def on_after_batch_transfer(self, batch, dataloader_idx: int) -> dict[str, Tensor]:
        if len(batch) == 2:  # evaluation: masked once at setup
            return {"tokens": batch[0], "targets": batch[1]}
        inputs, targets = mask_tokens(batch[0], self.vocab_size, self.mask_rate)  # dynamic masking
        return {"tokens": inputs, "targets": targets}
