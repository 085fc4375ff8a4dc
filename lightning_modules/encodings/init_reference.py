"""Reference initialisations: the vocabulary of `PositionalEncoding.init_reference`.

Each encoding declares, for every trainable tensor it has with default options (its state_dict key), how the
method's reference code initialises it; tests/models/test_encodings_contract.py builds the encoding and checks each
tensor's values against its spec. A spec is ("normal", std), ("uniform", low, high), ("const", value) or
("exact", table); any value may be a function of the built encoding (e.g. of its width).
"""

from collections.abc import Callable

BERT = ("normal", 0.02)  # init_bert_params / initializer_range (BERT, TUPE, DeBERTa)
ONES, ZEROS = ("const", 1.0), ("const", 0.0)


def torch_linear(fan_in: int | Callable) -> tuple:
    """PyTorch's default nn.Linear init (kaiming_uniform, a=sqrt(5)): weight and bias U(+-1/sqrt(fan_in));
    `fan_in` a number or a function of the encoding."""

    def bound(enc) -> float:
        return (fan_in(enc) if callable(fan_in) else fan_in) ** -0.5

    return ("uniform", lambda enc: -bound(enc), bound)
