"""Perplexity of add-one smoothed character n-gram models on tiny-shakespeare's validation text: the floors a
causal LM must beat before its perplexity beyond the training context means anything (docs/RESULTS.md, ALiBi).

Counts come from the training split, scored on the first `--tokens` validation characters (the LM's
`data.max_eval_tokens`), with the project's own split (datamodules/text.py).

    python scripts/ngram_perplexity.py [--data-dir ../shared/data] [--tokens 16384] [--orders 1 2 3]
"""

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.text import split_tinyshakespeare  # noqa: E402


def ngram_perplexity(train: str, text: str, order: int) -> float:
    """exp of the mean negative log-likelihood of `text[order-1:]` under add-one smoothed `order`-grams."""
    vocab = len(set(train) | set(text))
    grams = Counter(train[i : i + order] for i in range(len(train) - order + 1))
    contexts = Counter()
    for gram, count in grams.items():  # a context's count: the n-grams that continue it
        contexts[gram[:-1]] += count
    nll = 0.0
    for i in range(order - 1, len(text)):
        gram = text[i - order + 1 : i + 1]
        nll -= math.log((grams[gram] + 1) / (contexts[gram[:-1]] + vocab))
    return math.exp(nll / (len(text) - order + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    path = Path(args.data_dir) / "tinyshakespeare" / "input.txt"
    if not path.is_file():
        sys.exit(f"no tiny-shakespeare at {path}: pass --data-dir (the folder holding tinyshakespeare/input.txt)")
    train, validation, _ = split_tinyshakespeare({"input": path.read_text(encoding="utf-8")})
    text = validation[: args.tokens]
    for order in args.orders:
        print(f"{order}-gram (add-one) perplexity on {len(text)} validation characters: "
              f"{ngram_perplexity(train, text, order):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
