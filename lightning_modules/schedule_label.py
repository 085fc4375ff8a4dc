"""How a per-layer encoding schedule is named in run names, groups and comparisons (pure Python: no torch, so
that pe_sweeps/tracking/run_naming.py and the task modules both read it cheaply)."""

import itertools

NOPE = "none"


def layer_encodings(encoding: str | list[str], nope_every: int | None, depth: int) -> list[str]:
    """The encoding name of each of the `depth` layers: `encoding` in every layer, or its list, with layers
    k, 2k, ... (counting from 1) `none` for `nope_every: k`."""
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
    if isinstance(encoding, str) and not nope_every:
        return encoding
    if not isinstance(encoding, (str, list, tuple)) or not encoding:
        return str(encoding)
    depth = len(encoding) if isinstance(encoding, (list, tuple)) else int(arch.get("depth") or 1)
    return schedule_label(layer_encodings(encoding, nope_every, depth))
