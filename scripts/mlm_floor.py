"""The masked-LM loss a model reaches without reading any context (docs/RESULTS.md, TUPE): the floor its
validation loss must go below before a lower loss says anything about the positions.

A masked position shows [MASK] (80 %), a random token (10 %) or itself (10 %). Without context a model can
still copy the token it sees, so the floor is not the unigram cross-entropy H but about 0.9 H: 0 nats on
the kept 10 %, H elsewhere (a random token tells nothing). Unigram counts (add-one) come from the training
split in the masked LM's own tokenization (datamodules/masked_lm.py), scored on the validation blocks it
evaluates (`--max-eval-blocks` x (block - 1) tokens).

    python scripts/mlm_floor.py [--task wikitext2] [--tokenizer bpe] [--vocab 8000] [--block 128]
                                [--max-eval-blocks 128]
"""

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEEP = 0.1  # of the selected tokens, left as they are (BERT's 80/10/10, datamodules/masked_lm.py)


def unigram_cross_entropy(train: list[int], text: list[int], vocab: int) -> float:
    """Mean negative log-likelihood (nats) of `text` under add-one smoothed unigram counts of `train`."""
    counts, n = Counter(train), len(train)
    return -sum(math.log((counts[t] + 1) / (n + vocab)) for t in text) / len(text)


def context_free_floor(entropy: float) -> float:
    """The masked-LM loss of copying a kept token and predicting the unigram distribution elsewhere."""
    return (1 - KEEP) * entropy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="wikitext2")
    parser.add_argument("--tokenizer", default="bpe")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--max-eval-blocks", type=int, default=128)
    args = parser.parse_args()
    from datamodules.masked_lm import MaskedLMDataModule
    from datamodules.text import encode_cached
    from pe_core.errors import ConfigError

    try:
        dm = MaskedLMDataModule(task=args.task, tokenizer=args.tokenizer, vocab_size_limit=args.vocab,
                                block_size=args.block, max_eval_blocks=args.max_eval_blocks)  # fmt: skip
    except ConfigError as error:
        sys.exit(f"mlm_floor: {error}")
    train, validation = (encode_cached(dm.tokenizer, t, dm.tokenizer_file).tolist() for t in dm.texts[:2])
    text = validation[: args.max_eval_blocks * (args.block - 1)]
    entropy = unigram_cross_entropy(train, text, dm.vocab_size)
    print(f"unigram cross-entropy on {len(text)} validation tokens: {entropy:.3f} nats")
    print(f"context-free masked-LM floor (copy kept tokens, unigram elsewhere): {context_free_floor(entropy):.3f} nats")


if __name__ == "__main__":
    main()
