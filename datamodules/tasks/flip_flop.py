"""Flip-flop language modelling (Liu et al., NeurIPS 2023, "Exposing Attention Glitches with Flip-Flop Language
Modeling").

A sequence of (instruction, bit) pairs: write w b stores b, ignore i b does nothing, read r b must repeat the
last written bit. FFL(p): the first instruction is a write, the last a read, the others ignore with
probability p and write or read with (1 - p) / 2 each; bits of writes and ignores are uniform. The read bits
are the answer, in place (SLOT in the prompt): a decoder predicts each at its `r` token, an encoder at a MASK
there; accuracy = accuracy on read positions (exact match = every read of the sequence right).
Deviations: the paper fixes T = 512 tokens; here the length n is the number of instructions after the first
write (2n + 2 tokens), so lengths sweep as the other tasks. The loss is on the read bits only (the
deterministic tokens the paper evaluates; its training objective was not checked against this). The paper's
three evaluations are three registry entries: `flip_flop` (FFL(0.8) throughout), `flip_flop_sparse` and
`flip_flop_dense` (trained on FFL(0.8), evaluated on FFL(0.98) and FFL(0.1)); for one seed the three train
the same model on the same data.
Symbols: bits 0, 1, then w, r, i as 2, 3, 4.
"""

from datamodules.tasks.tokens import SLOT, need_range, need_symbols, symbols, tokens

WRITE, READ, IGNORE = 2, 3, 4


def flip_flop(rng, n, num_symbols, train_max_len, *, p_ignore: float = 0.8):
    """FFL(p_ignore) with n instructions after the first write, the last one a read."""
    need_range("flip_flop", "p_ignore", p_ignore, 0.0, 1.0)
    need_symbols("flip_flop", 5, num_symbols, "bits 0, 1 and w, r, i")
    p_other = (1 - p_ignore) / 2
    middle = rng.choice([WRITE, READ, IGNORE], size=n - 1, p=[p_other, p_other, p_ignore]).tolist()
    prompt, answer, memory = [], [], None
    for instruction in [WRITE, *middle, READ]:
        bit = int(rng.integers(0, 2))
        if instruction == READ:
            prompt += [READ, SLOT]
            answer.append(memory)
        else:
            memory = bit if instruction == WRITE else memory
            prompt += [instruction, bit]
    return tokens(prompt), tokens(answer)


def flip_flop_reference(prompt, n, num_symbols, train_max_len, *, p_ignore: float = 0.8):
    s = symbols(prompt)
    instructions, bits = s[0::2], s[1::2]
    assert len(instructions) == n + 1 and instructions[0] == WRITE and instructions[-1] == READ
    reads = [i for i, instruction in enumerate(instructions) if instruction == READ]
    last_write = lambda i: max(j for j in range(i) if instructions[j] == WRITE)
    return tokens([bits[last_write(i)] for i in reads])
