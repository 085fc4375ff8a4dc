"""One typed architecture config, taken whole by every task module and the Transformer (nanoGPT's GPTConfig).

LightningCLI exposes it as `--model.arch.*` (`--model.arch.encoding=rope`, `--model.arch.dim=64`); cli.py links
`vocab_size` and `max_length` from the data. A task module's hyper-parameters keep it as a plain dict under
`arch`, so a checkpoint loads with `weights_only=True` and its architecture is compared field by field.
"""

from dataclasses import asdict, dataclass, fields
from typing import Literal

from lightning_modules.schedule import check_schedule, layer_windows
from lightning_modules.schedule_label import layer_encodings
from pe_core.ranges import Fraction, PositiveFloat, PositiveInt, check_ranges


@dataclass(frozen=True)
class ArchConfig:
    """Sizes and positional encoding of a Transformer stack (the encoder's, in the translation model)."""

    # (each field's docstring is its --help text: pe_sweeps/cli.py reads attribute docstrings)
    encoding: str | list[str] = "rope"
    """positional encoding: a registry name or preset (`python -m lightning_modules.encodings` lists them), or a
    list with one per layer, e.g. [rope, rope, rope, none]"""
    encoding_options: dict | None = None
    """the encoding's own options, e.g. {base: 500} (names and ranges: `python -m lightning_modules.encodings`);
    in a schedule, for every encoding but none"""
    dim: PositiveInt = 128
    """model width C"""
    depth: PositiveInt = 2
    """number of layers"""
    num_heads: PositiveInt = 4
    """attention heads H; head dim D = dim / num_heads"""
    ffn_mult: PositiveInt = 4
    """feed-forward width = ffn_mult * dim"""
    dropout: Fraction = 0.0
    """attention, residual and embedding dropout"""
    post_norm: bool = False
    """post-LN (BERT, TUPE) instead of pre-LN (GPT-2)"""
    vocab_size: PositiveInt = 64
    """vocabulary size (linked from data.vocab_size)"""
    max_length: PositiveInt = 256
    """longest sequence any split feeds (linked from data.max_seq_len)"""
    token_init_std: PositiveFloat = 0.02
    """token embeddings start as N(0, s^2): 0.02 as GPT-2 / BERT; 1.0 is nn.Embedding's default"""
    attention_backend: Literal["auto", "sdpa", "flex"] = "auto"
    """auto: FlexAttention on CUDA for an encoding whose logit terms have score_mods, SDPA otherwise"""
    nope_every: int | None = None
    """every k-th layer (k, 2k, ...; k in [2, depth]) uses none, the others `encoding` (iRoPE: 4); null: none"""
    window: int | list[int | None] | None = None
    """sliding-window size (keys a query sees, itself included; >= 1) of every layer, or a list with one per
    layer; null: full attention. Causal models"""
    attention_sinks: bool = False
    """a learned logit s_h per head and layer in every softmax's denominator, a sink that takes probability mass
    and gives no value (gpt-oss); any softmax encoding"""
    qk_norm: bool = False
    """RMSNorm (learned scale) of each head's queries and keys before the encoding rotates them and before the
    dot product (OLMo 2, Gemma 3, Qwen3); any encoding"""

    def __post_init__(self) -> None:
        check_ranges(type(self), vars(self), "arch.")  # built directly (not parsed): the declared ranges still hold
        check_schedule(self.encoding, self.nope_every, self.window, self.depth)

    @property
    def layer_encodings(self) -> list[str]:
        """The encoding name of each layer (`encoding` and `nope_every` resolved)."""
        return layer_encodings(self.encoding, self.nope_every, self.depth)

    @property
    def layer_windows(self) -> list[int | None]:
        """The sliding-window size of each layer (None: full attention)."""
        return layer_windows(self.window, self.depth)

    @classmethod
    def of(cls, value: "ArchConfig | dict") -> "ArchConfig":
        """An ArchConfig from itself or from its dict (a checkpoint's hyper-parameters)."""
        return value if isinstance(value, cls) else cls(**value)

    @classmethod
    def from_hparams(cls, hparams: dict) -> "ArchConfig":
        """The architecture a task module's saved hyper-parameters describe: their `arch`, or for a checkpoint
        written before `arch` existed, the same fields at the top level."""
        if "arch" in hparams:
            return cls.of(hparams["arch"])
        return cls(**{f.name: hparams[f.name] for f in fields(cls) if f.name in hparams})

    def as_dict(self) -> dict:
        return asdict(self)

    def first_difference(self, other: "ArchConfig", ignore: tuple[str, ...] = ()) -> str | None:
        """The first field, in declaration order, whose value differs (None if all agree)."""
        return next(
            (f.name for f in fields(self) if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)),
            None,
        )
