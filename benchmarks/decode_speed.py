"""Greedy decoding speed with and without the KV cache (issue 26, finding 4).

A causal `Transformer` (random weights, tied output head) continues an 8-token prompt to each length L,
once re-running the whole prefix for every token and once through `Transformer.decode`'s KV cache (the
same tokens: checked). Prints ms per generated token, uncached vs cached (the fastest of `--repeats`
interleaved runs, against machine drift), as a markdown table.

    python benchmarks/decode_speed.py [--lengths 64 128 256] [--encodings rope alibi t5_bias fox] [--threads 2]
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightning_modules.arch import ArchConfig  # noqa: E402
from lightning_modules.transformer import KVCache, Transformer  # noqa: E402

PROMPT = 8


@torch.no_grad()
def generate(model: Transformer, prompt: torch.Tensor, length: int, cache: bool) -> torch.Tensor:
    """Greedy continuation of `prompt` (B, P) to `length` tokens, with or without the KV cache."""
    tokens, new = prompt, prompt
    state = KVCache(len(model.blocks)) if cache else None
    while tokens.shape[1] < length:
        hidden = model.decode(new, state) if cache else model(tokens)
        new = (hidden[:, -1] @ model.token_emb.weight.T).argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, new], dim=1)
    return tokens


def ms_per_token(model: Transformer, prompt: torch.Tensor, length: int, cache: bool) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    tokens = generate(model, prompt, length, cache)
    return 1000 * (time.perf_counter() - start) / (length - prompt.shape[1]), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--encodings", nargs="+", default=["rope", "alibi", "t5_bias", "fox"])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"d={args.dim}, {args.depth} layers, {args.heads} heads, batch {args.batch}, prompt {PROMPT}, "
          f"{args.threads} threads, fp32, CPU\n")  # fmt: skip
    print("| encoding | L | uncached ms/token | cached ms/token | speed-up |")
    print("|---|---|---|---|---|")
    for name in args.encodings:
        arch = ArchConfig(name, dim=args.dim, depth=args.depth, num_heads=args.heads, vocab_size=256,
                          max_length=max(args.lengths), dropout=0.0)  # fmt: skip
        torch.manual_seed(0)
        model = Transformer(arch, causal=True).eval()
        prompt = torch.randint(0, 256, (args.batch, PROMPT), generator=torch.Generator().manual_seed(0))
        generate(model, prompt, PROMPT + 4, cache=True)  # warm-up
        for length in args.lengths:
            plain = cached = float("inf")
            for _ in range(args.repeats):
                ms, plain_tokens = ms_per_token(model, prompt, length, cache=False)
                plain = min(plain, ms)
                ms, cached_tokens = ms_per_token(model, prompt, length, cache=True)
                cached = min(cached, ms)
            same = "" if torch.equal(plain_tokens, cached_tokens) else " (tokens differ!)"
            print(f"| {name} | {length} | {plain:.2f} | {cached:.2f} | {plain / cached:.1f}x{same} |", flush=True)


if __name__ == "__main__":
    main()
