"""Run naming, apart from W&B: one scheme for every run's name and group, from its task, encoding, seed and the
parameters its sweep varies (pure functions of their arguments and the sweep's parameters; no wandb import)."""

import hashlib
import json
import os
import re
from pathlib import Path

# a per-layer encoding schedule's label (`rope3.none`): run_encoding names and groups runs by it
from lightning_modules.schedule_label import encoding_label, schedule_label  # noqa: F401
from pe_sweeps.layout import SWEEP_PARAMS_ENV

# `cli.py sweep` hands each trial the parameters its sweep varies, {key: value} as JSON, for names and config
IN_NAME = ("task", "seed_everything")  # already in every run name, with the encoding parameters (`in_name`)
IN_ENCODING = ("arch.nope_every",)  # arch fields the run's encoding label shows (`encoding_label`)


def sweep_params() -> dict:
    """The parameters this run's sweep varies and their values here ({} outside a sweep): from `cli.py sweep`
    (PE_SWEEP_PARAMS), else from a `wandb agent`'s parameter file (WANDB_SWEEP_PARAM_PATH, `{key: {value: v}}`;
    the agent writes every parameter of the sweep there, fixed `value:` ones too, so those are named as well)."""
    if SWEEP_PARAMS_ENV not in os.environ and os.environ.get("WANDB_SWEEP_PARAM_PATH"):
        return agent_params(Path(os.environ["WANDB_SWEEP_PARAM_PATH"]))
    try:
        params = json.loads(os.environ.get(SWEEP_PARAMS_ENV) or "{}")
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def agent_params(path: Path) -> dict:
    """The parameters in a W&B agent's per-run file ({} if it cannot be read: the name then lacks them)."""
    import yaml

    try:
        params = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(params, dict):
        return {}
    return {k: v["value"] for k, v in params.items() if isinstance(v, dict) and "value" in v}


def short_key(key: str) -> str:
    """`model.init_args.lr` -> `lr`: the last part of a CLI key."""
    return key.rsplit(".", 1)[-1]


def in_name(key: str) -> bool:
    """True for a sweep key every run name and group already shows: the task, the seed, and any parameter
    a task module declares as an encoding (`model.arch.encoding`, `model.decoder_encoding`: the run's
    encoding, e.g. `learned+rope`), and `arch.nope_every` (in the encoding's label, `encoding_label`)."""
    from lightning_modules.registry import encoding_parameters

    return short_key(key) in IN_NAME or key in encoding_parameters() or key.endswith(IN_ENCODING)


def short_value(value) -> str:
    """A parameter value as it appears in a run name: floats to 3 significant digits, no folder separators."""
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9_.+@-]+", "_", text).strip("_") or "none"  # "none" for {} or ""


def distinguishing(options: dict, arch: dict, default_arch: dict, argv: list[str]) -> dict:
    """What sets a run apart beyond its task, encoding and seed, for its name, group and W&B config: every
    option of its encodings ({"model.arch.encoding_options.base": 500}), and each architecture field given on
    the command line (after the config file) whose value differs from the model's default. `options` is
    {options argument: its value} of the model's declared encodings; fields linked from the data (vocab_size,
    max_length) are left out."""
    found = {}
    for argument, values in options.items():
        found.update({f"model.{argument}.{k}": v for k, v in sorted((values or {}).items())})
    given = {m.group(1) for a in argv if (m := re.match(r"--model\.(?:init_args\.)?arch\.(\w+)(?:=|$)", a))}
    for field in arch:  # in the architecture's own field order
        if field in given - {"encoding", "encoding_options", "nope_every", "vocab_size", "max_length"} and (
            arch[field] != default_arch.get(field)
        ):
            found[f"model.arch.{field}"] = arch[field]
    return found


def setup_label(encoding: str, distinct: dict) -> str:
    """The encoding with what sets the run apart, e.g. `rope-base=500-dim=32` (a hash beyond 80 bytes): a
    group never averages runs of different set-ups."""
    label = "-".join([encoding, *(f"{short_key(k)}={short_value(v)}" for k, v in distinct.items())])
    return label if len(label.encode()) <= 80 else f"{encoding}-h{hashlib.sha1(label.encode()).hexdigest()[:10]}"


def run_name(task: str, encoding: str, seed: int, varied: dict | None = None) -> str:
    """`<task>-<encoding>[-<key>=<value>...]-s<seed>`, with every parameter a sweep varies (short form) so
    that two trials of one sweep never share a name. A name longer than a folder name may be (long varied
    values, e.g. encoding options) keeps its start and ends with a hash of the whole: `...-h<hash>-s<seed>`."""
    from pe_sweeps.layout import MAX_NAME_BYTES

    extra = [f"{short_key(k)}={short_value(v)}" for k, v in (varied or {}).items() if not in_name(k)]
    name = "-".join([task, encoding, *extra, f"s{seed}"])
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    tail = f"-h{hashlib.sha1(name.encode()).hexdigest()[:10]}-s{seed}"
    return name.encode()[: MAX_NAME_BYTES - len(tail)].decode(errors="ignore").rstrip("-_.") + tail


def run_group(task: str, encoding: str, prefix: str | None = None) -> str:
    """`<sweep or project>/<task>/<encoding>`: W&B's group-by then never mixes sweeps or configurations
    (the varied parameters are top-level config keys, for a finer group-by)."""
    return "/".join(filter(None, [prefix, task, encoding]))
