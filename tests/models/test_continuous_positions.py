"""Continuous random positions (`continuous_positions`, issue 46): with `randomize_positions` N, training feeds
each example sorted float positions drawn uniformly from [0, N); evaluation keeps the integers 0..L-1. Only the
encodings that compute from float positions (`float_positions`) take it; every other refuses it in one line
that names those that do.

Claims of lightning_modules/encodings/base.py covered here:
- "the training positions are floats ... sorted i.i.d. uniform draws from [0, N) (padded slots 0); evaluation
  keeps 0..L-1": test_training_positions_are_floats_in_range_and_evaluation_integral,
  test_sample_continuous_positions_uniform_sorted_padded
- "Only for an encoding whose hooks compute from the positions themselves": test_float_positions_are_the_method_at_them
- "one that indexes a table by them ... refuses it in one line": test_integer_only_encodings_refuse_in_one_line
"""

import pytest
import torch
from encoding_helpers import DIM, HEADS, MAX_LEN, VOCAB
from helpers import randomize_
from scipy import stats

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, build_encoding
from lightning_modules.transformer import Transformer, sample_continuous_positions
from pe_core.errors import ConfigError

FLOAT = [name for name, cls in ENCODINGS.items() if cls.float_positions]
INTEGER = [name for name in ENCODINGS if name not in FLOAT]
N = 200


def model(name: str, **options) -> Transformer:
    arch = ArchConfig(name, encoding_options={"randomize_positions": N, "continuous_positions": True} | options,
                      dim=DIM, depth=1, num_heads=HEADS, vocab_size=VOCAB, max_length=MAX_LEN)  # fmt: skip
    return randomize_(Transformer(arch, causal=True))


def test_the_float_encodings_are_those_the_docstring_names():
    assert {"rope", "rope_clipped", "sinusoidal", "alibi", "fope"} <= set(FLOAT)
    assert {"learned", "t5_bias", "shaw", "pope"} <= set(INTEGER)


@pytest.mark.parametrize("name", FLOAT)
def test_training_positions_are_floats_in_range_and_evaluation_integral(name):
    """The positions the hooks receive: sorted non-integral floats in [0, N) per example in training (beyond
    max_length), the LongTensor 0..L-1 at evaluation."""
    net, tokens = model(name), torch.randint(0, VOCAB, (3, 12), generator=torch.Generator().manual_seed(0))
    seen = []
    rotate, bias, embed = net.encoding.rotate, net.encoding.bias, net.encoding.embed
    net.encoding.rotate = lambda q, k, positions: (seen.append(positions), rotate(q, k, positions))[1]
    net.encoding.embed = lambda x, positions: (seen.append(positions), embed(x, positions))[1]
    net.encoding.bias = lambda positions: (seen.append(positions), bias(positions))[1]
    net.train()
    torch.manual_seed(1)
    assert net(tokens).isfinite().all()
    trained = seen[0]
    assert trained.is_floating_point() and trained.shape == (3, 12)
    assert (trained[:, 1:] > trained[:, :-1]).all() and trained.min() >= 0 and trained.max() < N
    assert (trained != trained.round()).all() and trained.max() > MAX_LEN
    seen.clear()
    net.eval()
    net(tokens)
    assert seen[0].dtype == torch.long and torch.equal(seen[0], torch.arange(12))


def test_sample_continuous_positions_uniform_sorted_padded():
    """A length-1 example's position is U(0, N) (Kolmogorov-Smirnov); padded slots hold 0."""
    torch.manual_seed(0)
    lengths = torch.tensor([1, 40]).repeat(500)
    drawn = sample_continuous_positions(len(lengths), 40, N, lengths=lengths)
    single = drawn[0::2, 0]
    assert stats.kstest(single.numpy() / N, "uniform").pvalue > 1e-3
    assert (drawn[0::2, 1:] == 0).all()
    full = drawn[1::2]
    assert (full[:, 1:] > full[:, :-1]).all() and full.max() < N and full.min() >= 0


@pytest.mark.parametrize("name", FLOAT)
def test_float_positions_are_the_method_at_them(name):
    """Integral float positions give what the integer positions give (the table is the method at them), and a
    half-step shift moves the output of a position-aware encoding."""
    net = model(name).eval()
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        integral = net(tokens, positions=torch.arange(10) * 3)
        floats = net(tokens, positions=(torch.arange(10) * 3).float())
        shifted = net(tokens, positions=torch.arange(10) * 3.0 + torch.linspace(0, 0.5, 10))
    torch.testing.assert_close(floats, integral, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(shifted, integral, atol=1e-4)


@pytest.mark.parametrize("name", INTEGER)
def test_integer_only_encodings_refuse_in_one_line(name):
    with pytest.raises(ConfigError) as error:
        build_encoding(name, dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, randomize_positions=N,
                       continuous_positions=True)  # fmt: skip
    message = str(error.value)
    assert "\n" not in message and "takes integer positions only" in message
    assert message.endswith("continuous_positions serves: " + ", ".join(sorted(FLOAT)))


def test_continuous_positions_needs_the_range():
    with pytest.raises(ConfigError, match="continuous_positions needs randomize_positions"):
        build_encoding("rope", dim=DIM, num_heads=HEADS, max_length=MAX_LEN, causal=True, continuous_positions=True)
