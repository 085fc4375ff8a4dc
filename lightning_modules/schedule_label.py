"""How a per-layer encoding schedule is named in run names, groups and comparisons (pure Python: no torch, so
that pe_sweeps/runs/run_naming.py and the task modules both read it cheaply)."""

import itertools
import re

from pe_core.errors import ConfigError

NOPE = "none"
LABEL_RUN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*?)(\d*)")  # "rope3" -> ("rope", "3"); names never end in a digit


def is_label(encoding) -> bool:
    """Whether `encoding` is a schedule label such as "rope3.none" (a string of several runs)."""
    return isinstance(encoding, str) and "." in encoding


def label_pattern(label: str) -> list[str]:
    """One period of a schedule label, one name per layer: "rope3.none" -> [rope, rope, rope, none]."""
    pattern = []
    for run in label.split("."):
        match = LABEL_RUN.fullmatch(run)
        if match is None or match.group(2).startswith("0"):
            raise ConfigError(f"arch.encoding {label!r}: {run!r} is not an encoding name with an optional layer count "
                              "(a schedule label is runs like rope3 joined by '.', e.g. rope3.none)")  # fmt: skip
        pattern += [match.group(1)] * int(match.group(2) or 1)
    return pattern


def parse_label(label: str, depth: int) -> list[str]:
    """A schedule label back to one name per layer: "rope3.none" at depth 8 -> [rope, rope, rope, none] twice.
    The label is the pattern `schedule_label` writes (name+count runs joined by "."), repeated to the depth, so a
    hybrid schedule is one string value of `arch.encoding` (a sweep axis Optuna can hold, unlike a list)."""
    pattern = label_pattern(label)
    if depth % len(pattern):
        raise ConfigError(f"arch.encoding {label!r} describes {len(pattern)} layers, which does not divide "
                          f"arch.depth {depth}; use a multiple of {len(pattern)} or a list")  # fmt: skip
    return pattern * (depth // len(pattern))


def layer_encodings(encoding: str | list[str], nope_every: int | None, depth: int) -> list[str]:
    """The encoding name of each of the `depth` layers: `encoding` in every layer, its list, or its schedule
    label ("rope3.none"), with layers k, 2k, ... (counting from 1) `none` for `nope_every: k`."""
    if is_label(encoding):
        encoding = parse_label(encoding, depth)
    names = [encoding] * depth if isinstance(encoding, str) else list(encoding)
    if nope_every:
        names = [NOPE if (i + 1) % nope_every == 0 else name for i, name in enumerate(names)]
    return names


def schedule_label(names: list[str]) -> str:
    """A per-layer encoding schedule as run names show it: its shortest repeating pattern, each run of one
    encoding written name+count (count 1 left out), the runs joined by ".": [rope, rope, rope, none] (repeated
    any number of times) -> `rope3.none`, [rope, none, ...] -> `rope.none`, one encoding in every layer -> its
    name. `nope_every: 4` is `rope3.none` too (at a depth that 4 divides)."""
    depth = len(names)
    period = next(p for p in range(1, depth + 1) if depth % p == 0 and names == names[:p] * (depth // p))
    runs = [(name, len(list(group))) for name, group in itertools.groupby(names[:period])]
    return ".".join(name if count == 1 else f"{name}{count}" for name, count in runs)


def encoding_label(encoding, arch=None) -> str:
    """A stack's encoding in run names and groups: the name, or for a per-layer schedule (a list, or
    `nope_every` in `arch`, the architecture's dict) its `schedule_label`."""
    nope_every = arch.get("nope_every") if hasattr(arch, "get") else None
    if isinstance(encoding, str) and not nope_every and not is_label(encoding):
        return encoding
    if not isinstance(encoding, (str, list, tuple)) or not encoding:
        return str(encoding)
    depth = len(encoding) if isinstance(encoding, (list, tuple)) else int((arch or {}).get("depth") or 0)
    try:
        if is_label(encoding) and not depth:  # no arch to read the depth from: one period of the label
            depth = len(label_pattern(encoding))
        return schedule_label(layer_encodings(encoding, nope_every, depth or 1))
    except ConfigError:
        return str(encoding)
