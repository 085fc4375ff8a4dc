"""Per-layer encoding schedules: which encoding and which attention window each layer of a stack uses.

`arch.encoding` is one registry name for every layer, or a list with one name per layer; `arch.nope_every: k`
turns every k-th layer (counting from 1) into `none`: iRoPE (Llama 4, every 4th layer NoPE), SmolLM3's
3 RoPE : 1 NoPE and RNoPE (Yang et al. 2025, "Rope to Nope and back again") are then one sweep axis.
`arch.window` gives each layer a sliding-window size (one int for every layer, or a list; null = full
attention), e.g. RNoPE-SWA: windowed RoPE layers and global NoPE layers. Layers naming the same encoding
share one instance (its parameters and its shared bias); `encoding_options` go to every scheduled encoding
but `none`, or, with a single encoding, to it alone (as without a schedule).
"""

from lightning_modules.encodings import ENCODINGS, PositionalEncoding, check_encoding, check_encoding_name
from lightning_modules.schedule_label import NOPE, is_label, label_pattern, parse_label
from pe_core.errors import ConfigError


def layer_windows(window: int | list[int | None] | None, depth: int) -> list[int | None]:
    """The sliding-window size of each of the `depth` layers (None: full attention)."""
    return list(window) if isinstance(window, list) else [window] * depth


def distinct(names: list[str]) -> list[str]:
    """The names in order of first appearance, each once."""
    return list(dict.fromkeys(names))


def primary_encoding(names: list[str]) -> str:
    """The encoding that stands for the stack (its positions, embed hook, position limits): the first one
    that is not `none`, or `none` when every layer is NoPE."""
    return next((name for name in names if name != NOPE), NOPE)


def scheduled_options(name: str, names: list[str], options: dict | None) -> dict:
    """The options the layers named `name` get: all of `options` with a single encoding (as without a
    schedule), else all of them for every encoding but `none`."""
    if len(distinct(names)) > 1 and name == NOPE:
        return {}
    return dict(options or {})


def check_schedule(encoding, nope_every, window, depth: int) -> None:
    """One-line ConfigError for a schedule that does not fit `depth` layers, an unknown name in a list, a
    `nope_every` out of range or a window size < 1."""
    if is_label(encoding):
        encoding = parse_label(encoding, depth)
    if isinstance(encoding, (list, tuple)):
        check_encoding_list(list(encoding), depth)
        if nope_every is not None:
            raise ConfigError("arch.nope_every applies to a single arch.encoding; in a list, write none in the "
                              "layers that should have no positional encoding")  # fmt: skip
    if nope_every is not None and (isinstance(nope_every, bool) or not isinstance(nope_every, int)
                                   or not 2 <= nope_every <= depth):  # fmt: skip
        valid = f"an integer in [2, {depth}] (arch.depth)" if depth >= 2 else "null (arch.depth is 1)"
        raise ConfigError(f"arch.nope_every must be {valid}, got {nope_every!r}: layers k, 2k, ... use none; "
                          "null for no NoPE layers")  # fmt: skip
    check_windows(window, depth)


def check_encoding_list(names: list, depth: int) -> None:
    if len(names) != depth:
        raise ConfigError(f"arch.encoding lists {len(names)} encodings but arch.depth is {depth}; give one per "
                          "layer (e.g. [rope, rope, rope, none] for depth 4) or one name for every layer")  # fmt: skip
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ConfigError(f"arch.encoding layer {i + 1}: an encoding name, got {name!r}")
        try:
            check_encoding_name(name)
        except ConfigError as error:
            raise ConfigError(f"arch.encoding layer {i + 1}: {error}") from None
    absolute = [name for name in distinct(names) if ENCODINGS[name].embed is not PositionalEncoding.embed]
    if len(distinct(names)) > 1 and absolute:
        raise ConfigError(f"encoding {absolute[0]!r} adds positions to the input embeddings (once, before the "
                          "first layer) and cannot be scheduled per layer; mix only encodings that act in "
                          "attention (e.g. rope, alibi, t5_bias, none)")  # fmt: skip


def check_windows(window, depth: int) -> None:
    sizes = window if isinstance(window, (list, tuple)) else [window]
    if isinstance(window, (list, tuple)) and len(window) != depth:
        raise ConfigError(f"arch.window lists {len(window)} sizes but arch.depth is {depth}; give one per layer "
                          "(null = full attention) or one size for every layer")  # fmt: skip
    for size in sizes:
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ConfigError(f"arch.window sizes must be integers >= 1 (the keys a query sees, itself "
                              f"included) or null (full attention), got {size!r}")  # fmt: skip


def check_scheduled_encoding(encoding, options: dict) -> None:
    """`check_encoding` of each encoding a (possibly per-layer) `arch.encoding` names, with the options it gets."""
    if is_label(encoding):
        encoding = label_pattern(encoding)  # its names (the depth is checked with the architecture)
    if not isinstance(encoding, (list, tuple)):
        check_encoding(encoding, options)
        return
    names = list(encoding)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ConfigError(f"arch.encoding layer {i + 1}: an encoding name, got {name!r}")
    for name in distinct(names):
        check_encoding(name, scheduled_options(name, names, options))
