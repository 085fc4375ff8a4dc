"""Evaluation must not depend on the batch, and randomized positions are drawn per example (issue 24, findings
5 and 6; Ruoss et al. 2023).

- Every encoding (the whole registry, causal and bidirectional where it supports them, plus the options whose
  tables depend on the length: dynamic NTK, YaRN, p-RoPE, Shaw's values, randomized positions) gives an
  example the same logits alone as inside a right-padded batch with longer examples.
- `randomize_positions` (Ruoss et al. 2023): every encoding accepts it; each example's positions are a sorted
  uniform sample of its own length from [0, N), whatever the padded length of its batch;
  `randomize_positions_eval` samples at evaluation too (the official code), off by default (0..L-1, the
  paper's Figure 1).

Claims of docs/encodings.md and docs/tasks.md covered here:
- "teacher-forced, which equals greedy exact match" needs batch-invariant logits:
  test_evaluation_is_padding_and_batch_invariant
- "randomize_positions: N (... sorted random positions from [0, N) at training time, 0..L-1 at evaluation)":
  test_sample_positions_sorted_distinct_in_range, test_every_encoding_accepts_randomize_positions,
  test_randomized_training_positions_reach_the_encoding
- "randomize_positions: N (... drawn per example for its own length ...)": test_each_example_draws_for_its_own_length,
  test_a_length_1_example_is_uniform_over_the_range, test_a_full_example_is_a_sorted_uniform_subset,
  test_randomize_positions_eval_samples_at_evaluation; its draws repeat at every evaluation and leave training's
  RNG alone: test_evaluation_draws_repeat_at_each_eval_and_leave_the_global_rng_alone
"""

import pytest
import torch
from encoding_helpers import (
    CAUSAL,
    DIM,
    HEADS,
    MAX_LEN,
    VOCAB,
    make_model,
)
from helpers import randomize_
from scipy import stats

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.transformer import Transformer, sample_positions
from pe_core.errors import ConfigError

# the registry's defaults, and the options whose position tables depend on the (evaluated) length
CASES = [(name, {}) for name in ENCODINGS] + [
    ("rope", {"dynamic_ntk_factor": 2.0, "original_length": 8}),
    ("rope", {"yarn_factor": 4.0, "original_length": 8}),
    ("rope", {"rope_fraction": 0.5}),
    ("shaw", {"values": True, "max_relative": 3}),
    ("learned", {"randomize_positions": 128}),
]


IDS = [name + "".join(f"-{k}={v}" for k, v in options.items()) for name, options in CASES]


def padded_batch(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens right-padded to the longest length (pad id 0), and the padding mask (True = real)."""
    L = max(lengths)
    tokens = torch.randint(1, VOCAB, (len(lengths), L), generator=torch.Generator().manual_seed(seed))
    padding_mask = torch.arange(L)[None] < torch.tensor(lengths)[:, None]
    return tokens.masked_fill(~padding_mask, 0), padding_mask


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("name, options", CASES, ids=IDS)
def test_evaluation_is_padding_and_batch_invariant(name, options, causal):
    """An example's logits alone equal its logits in a batch with longer, padded examples (to 1e-5), at lengths
    below and beyond dynamic NTK's original_length."""
    model = make_model(name, causal, **options)
    tokens, padding_mask = padded_batch([5, 12, 30, 21])
    with torch.no_grad():
        batched = model(tokens, padding_mask=padding_mask)
        for row, length in enumerate(padding_mask.sum(-1).tolist()):
            alone = model(tokens[row : row + 1, :length], padding_mask=padding_mask[row : row + 1, :length])
            torch.testing.assert_close(batched[row, :length], alone[0], atol=1e-5, rtol=1e-5)
            unmasked = model(tokens[row : row + 1, :length])  # alone without a mask: the same
            torch.testing.assert_close(unmasked, alone, atol=1e-5, rtol=1e-5)


def test_sample_positions_sorted_distinct_in_range():
    torch.manual_seed(0)
    positions = sample_positions(64, 40, 100)
    assert positions.shape == (64, 40) and positions.dtype == torch.long
    assert (positions[:, 1:] > positions[:, :-1]).all()  # sorted and distinct
    assert positions.min() >= 0 and positions.max() < 100
    assert len({tuple(row) for row in positions.tolist()}) > 60  # a fresh draw per row
    assert torch.equal(sample_positions(2, 5, 5), torch.arange(5).expand(2, 5))  # the whole range: 0..N-1
    with pytest.raises(ConfigError, match="randomize_positions=10 cannot hold 11"):
        sample_positions(1, 11, 10)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_encoding_accepts_randomize_positions(name):
    """Training draws random positions (outputs move between draws for position-aware encodings), evaluation
    uses 0..L-1 (deterministic, equal to explicit positions)."""
    causal = True
    arch = ArchConfig(name, encoding_options={"randomize_positions": 200}, dim=DIM, depth=1, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch, causal=causal)
    randomize_(model)
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    assert model.encoding.randomize_positions == 200
    model.train()
    drawn = model.default_positions(2, 12, tokens.device)
    assert drawn.shape == (2, 12) and (drawn[:, 1:] > drawn[:, :-1]).all() and drawn.max() < 200
    assert model(tokens).isfinite().all()
    model.eval()
    assert torch.equal(model.default_positions(2, 12, tokens.device), torch.arange(12))
    out = model(tokens)
    assert torch.equal(out, model(tokens)) and torch.equal(out, model(tokens, positions=torch.arange(12)))
    if getattr(model.encoding, "max_positions", None) is not None:  # tables sized to the sampled range
        assert model.encoding.max_positions == 200


def test_randomized_training_positions_reach_the_encoding():
    arch = ArchConfig("learned", encoding_options={"randomize_positions": 300}, dim=DIM, depth=1, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch)
    assert model.encoding.table.num_embeddings == 300
    seen = []
    handle = model.encoding.table.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    model.train()
    torch.manual_seed(1)
    model(torch.zeros(4, 20, dtype=torch.long))
    model.eval()
    model(torch.zeros(4, 20, dtype=torch.long))
    handle.remove()
    train_positions, eval_positions = seen
    assert train_positions.shape == (4, 20) and train_positions.max() >= MAX_LEN  # beyond max_length
    assert torch.equal(eval_positions, torch.arange(20))
    with pytest.raises(ConfigError, match="randomize_positions"):
        build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, randomize_positions=0)


N = 256  # randomize_positions, as sweeps/repro_ruoss.yaml


def mixed_draws(repeats: int, lengths=(1, 40), seed: int = 0) -> torch.Tensor:
    """`repeats` batches of examples of `lengths`, right-padded to the longest, drawn as one (B, L) tensor."""
    torch.manual_seed(seed)
    own = torch.tensor(lengths).repeat(repeats)  # (B,)
    return sample_positions(len(own), max(lengths), N, lengths=own).view(repeats, len(lengths), max(lengths))


def test_each_example_draws_for_its_own_length():
    drawn = mixed_draws(500)
    short, full = drawn[:, 0], drawn[:, 1]  # (repeats, 40)
    assert (short[:, 1:] == 0).all()  # padded slots: position 0
    assert (full[:, 1:] > full[:, :-1]).all() and full.min() >= 0 and full.max() < N  # sorted, distinct
    # the length-1 example spreads over [0, N): under the padded draw it was the least of 40, below ~9 on average
    assert short[:, 0].float().mean() > 100 and short[:, 0].max() > 200
    torch.manual_seed(0)
    unpadded = sample_positions(3, 5, N)
    torch.manual_seed(0)
    assert torch.equal(sample_positions(3, 5, N, lengths=torch.tensor([5, 5, 5])), unpadded)  # no padding: the same


def test_a_length_1_example_is_uniform_over_the_range():
    """Chi-square over the N positions: 8,000 draws of the length-1 example of a (1, 40) batch."""
    short = mixed_draws(8000)[:, 0, 0]
    counts = torch.bincount(short, minlength=N).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3
    assert stats.kstest(short.numpy(), stats.randint(0, N).cdf).pvalue > 1e-3


def test_a_full_example_is_a_sorted_uniform_subset():
    """The length-40 rows: every position of [0, N) equally often (chi-square), and the k-th smallest with the
    mean of the k-th order statistic of a sample without replacement, k (N + 1) / (L + 1) - 1 (0-based)."""
    L = 40
    full = mixed_draws(4000)[:, 1]  # (4000, 40)
    assert stats.chisquare(torch.bincount(full.flatten(), minlength=N).numpy()).pvalue > 1e-3
    k = torch.arange(1, L + 1)
    expected = k * (N + 1) / (L + 1) - 1
    sd = (k * (L - k + 1) * (N + 1) * (N - L) / ((L + 1) ** 2 * (L + 2))).sqrt()  # of one draw
    z = (full.double().mean(0) - expected) / (sd / len(full) ** 0.5)
    assert z.abs().max() < 4.5, z


def test_the_transformer_draws_for_each_examples_own_length():
    """Training with a padding mask: the positions reaching the encoding follow each example's length."""
    arch = ArchConfig("learned", encoding_options={"randomize_positions": N}, dim=DIM, depth=1, num_heads=HEADS,
                      vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch, causal=False).train()
    seen = []
    handle = model.encoding.table.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    tokens, padding_mask = padded_batch([1, 40] * 200)
    torch.manual_seed(0)
    model(tokens, padding_mask=padding_mask)
    handle.remove()
    (positions,) = seen
    assert (positions[0::2, 1:] == 0).all() and positions[0::2, 0].float().mean() > 100
    assert (positions[1::2, 1:] > positions[1::2, :-1]).all()


def test_randomize_positions_eval_samples_at_evaluation():
    """Off by default (0..L-1 at evaluation, the paper's Figure 1); on, evaluation samples as training does."""
    options = {"randomize_positions": N}
    arch = ArchConfig("rope", encoding_options=options, dim=DIM, depth=1, num_heads=HEADS, vocab_size=VOCAB,
                      max_length=MAX_LEN)  # fmt: skip
    model = Transformer(arch).eval()
    assert torch.equal(model.default_positions(4, 10, "cpu", torch.tensor([10, 3, 7, 10])), torch.arange(10))
    sampling = Transformer(
        ArchConfig.of(arch.as_dict() | {"encoding_options": options | {"randomize_positions_eval": True}})
    )
    sampling.eval()
    drawn = sampling.default_positions(4, 10, "cpu", torch.tensor([10, 3, 7, 10]))
    assert drawn.shape == (4, 10) and (drawn[1, 3:] == 0).all() and (drawn[0, 1:] > drawn[0, :-1]).all()
    assert drawn.max() >= 10  # beyond 0..L-1
    with pytest.raises(ConfigError, match="randomize_positions_eval needs randomize_positions"):
        build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, randomize_positions_eval=True)


def test_evaluation_draws_repeat_at_each_eval_and_leave_the_global_rng_alone():
    """`randomize_positions_eval` draws from the encoding's generator, restarted by `eval()`: the same positions at
    every evaluation, and training's global RNG is not advanced (its draws do not depend on when it validated)."""
    options = {"randomize_positions": N, "randomize_positions_eval": True}
    model = Transformer(ArchConfig("rope", encoding_options=options, dim=DIM, depth=1, num_heads=HEADS,
                                   vocab_size=VOCAB, max_length=MAX_LEN)).eval()  # fmt: skip
    lengths = torch.tensor([10, 3, 7, 10])
    state = torch.get_rng_state()
    first = [model.default_positions(4, 10, "cpu", lengths) for _ in range(3)]
    assert torch.equal(torch.get_rng_state(), state)
    assert not torch.equal(first[0], first[1])  # successive batches draw afresh
    model.train()
    trained = model.default_positions(4, 10, "cpu", lengths)  # training draws from the global RNG
    assert not torch.equal(torch.get_rng_state(), state) and trained.shape == (4, 10)
    model.eval()
    again = [model.default_positions(4, 10, "cpu", lengths) for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
