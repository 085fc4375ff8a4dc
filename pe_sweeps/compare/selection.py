"""Which runs `cli.py compare` averages: reading the run records (of one sweep), grouping them into
(row, column) cells, and leaving out, with the reason, the runs that did not finish, lack the metric, repeat
a seed or differ in setup (SETUP, declared once below); a column that mixes setups is refused in one line."""

import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

from lightning_modules.metric_names import ACC, ACC_OOD, bounds, name
from lightning_modules.registry import encoding_keys
from pe_core.errors import ConfigError
from pe_sweeps.compare.comparison import Cell, Excluded, is_set, lookup
from pe_sweeps.runs.records import RECORD_FILE, RunRecord, load_records

# What defines a result, declared once (config paths without `init_args`): runs are replicates of one setup
# when these agree, the seed aside; everything else (logging and its cadence, naming, checkpoints, progress
# bars, validation cadence, data-loader workers, compilation) is ignored. `world_size` and `precision` are
# the record's own fields (runs/records.py), read from the trainer at fit start.
SETUP = ("data", "model", "optimizer", "lr_scheduler",  # data, model and optimisation
         "trainer.max_steps", "trainer.max_epochs", "trainer.accumulate_grad_batches", "trainer.gradient_clip_val",
         "trainer.gradient_clip_algorithm", "trainer.limit_train_batches", "trainer.limit_val_batches",  # steps
         "trainer.precision", "precision",  # precision
         "trainer.devices", "trainer.num_nodes", "world_size")  # world size  # fmt: skip
# within SETUP but not what defines a result: `data.seed` is a seed (it follows seed_everything), varied like it
NOT_SETUP = ("data.seed", "data.num_workers", "model.compile", "model._class_path", "model._instantiator")


def keys_of(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [k.strip() for k in spec.split(",") if k.strip()] if isinstance(spec, str) else list(spec)


def label(record: RunRecord, keys: list[str]) -> str:
    values = [lookup(record, k) for k in keys]
    return ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in values)


def run_id(record: RunRecord) -> str:
    return str(record.run_dir or record.name)


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        out.update(flatten(value, path + ".") if isinstance(value, dict) and value else {path: value})
    return out


def setup_of(record: RunRecord, keys: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The keys of SETUP in a record (config paths without `init_args`, JSON values), less `keys` (the
    row and column keys: they differ between cells by design)."""
    skip = tuple(config_path(k) for k in keys) + NOT_SETUP
    return {k: v for k, v in full_setup(record).items() if not any(_under(k, s) for s in skip)}


_SETUPS: dict[int, tuple[dict, tuple, dict]] = {}  # id(record.config) -> (that config, its setup): asked once per cell


def full_setup(record: RunRecord) -> dict[str, str]:
    """Every SETUP key of a record, as `setup_of` gives them before leaving any out (kept while its config is)."""
    scale = (record.world_size, record.precision)
    cached = _SETUPS.get(id(record.config))
    if cached is not None and cached[0] is record.config and cached[1] == scale:
        return cached[2]
    flat = {config_path(k): v for k, v in flatten(record.config).items()}
    flat |= {k: v for k, v in (("world_size", record.world_size), ("precision", record.precision)) if v is not None}
    setup = {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if any(_under(k, s) for s in SETUP)}
    _SETUPS[id(record.config)] = (record.config, scale, setup)
    return setup


STEP_VALUE = re.compile(r"step=(\d+)$")  # --value step=600


def known_value(value: str) -> bool:
    """`--value` is final, best or step=N."""
    return value in ("final", "best") or STEP_VALUE.match(value) is not None


def values_at(record: RunRecord, value: str) -> dict:
    """A run's metrics as `--value` names them: "final" (its last validation), "best" (each metric's best
    validation) or "step=N" (its validation at global step N, e.g. TUPE's loss "throughout pre-training";
    empty when it did not validate at N)."""
    at = STEP_VALUE.match(value)
    if at is None:
        return getattr(record, value)
    rows = [row for row in record.history if row.get("step") == int(at[1])]
    return {k: v for k, v in rows[-1].items() if k not in ("step", "wandb_step")} if rows else {}


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def unusable(record: RunRecord, metric: str, value: str, keys: list[str]) -> str | None:
    """Why a run cannot be averaged in (None if it can)."""
    if record.status != "finished":
        return f"status {record.status}"
    missing = [k for k in keys if not is_set(record, k)]
    if missing:
        return f"no {missing[0]}"
    number = values_at(record, value).get(metric)
    if number is None:
        return f"no {metric}"
    if not math.isfinite(number):
        return f"{metric} is {number}"
    return None


def config_diff(config: dict, kept: dict) -> str:
    diff = sorted(k for k in set(config) | set(kept) if config.get(k) != kept.get(k))
    shown = ", ".join(f"{k}={config.get(k, 'missing')} (kept: {kept.get(k, 'missing')})" for k in diff[:2])
    return shown + (f" and {len(diff) - 2} more" if len(diff) > 2 else "")


def same_config(runs: list[RunRecord], keys: list[str]) -> tuple[list[RunRecord], list[tuple[RunRecord, str]]]:
    """Keep the runs sharing the most common config; the rest (all of them on a tie) are dropped."""
    configs = [setup_of(r, keys) for r in runs]
    signatures = [json.dumps(c, sort_keys=True) for c in configs]
    counts = Counter(signatures).most_common()
    if len(counts) == 1:
        return runs, []
    first, second = (configs[signatures.index(sig)] for sig, _ in counts[:2])
    if counts[0][1] == counts[1][1]:
        why = f"mixed configs, no majority: {config_diff(second, first)}; split them with --rows/--cols"
        return [], [(r, why) for r in runs]
    kept_config = configs[signatures.index(counts[0][0])]
    kept = [r for r, s in zip(runs, signatures) if s == counts[0][0]]
    dropped = [(r, f"config differs: {config_diff(c, kept_config)}") for r, c, s in zip(runs, configs, signatures)]
    return kept, [d for d, s in zip(dropped, signatures) if s != counts[0][0]]


def one_per_seed(runs: list[RunRecord]) -> tuple[list[RunRecord], list[tuple[RunRecord, str]]]:
    """The newest run per seed, in seed order (a cell reads the same however its runs finished); older repeats
    are dropped (a mean over seeds counts each seed once)."""
    newest = {}
    for run in sorted(runs, key=lambda r: r.updated_at or 0):
        newest[run.seed if run.seed is not None else id(run)] = run
    kept = sorted(newest.values(), key=lambda r: (r.seed is None, r.seed if r.seed is not None else 0))
    dropped = [r for r in runs if not any(r is k for k in kept)]
    return kept, [(r, f"repeats seed {r.seed} (newer run kept)") for r in dropped]


def group_cells(records, metric, value, row_keys, col_keys, aggregate="mean", over=None) -> tuple[dict, list]:
    """Usable runs per (row, col[, value of the --best-over key]) cell, and every excluded run with its reason."""
    groups, excluded = defaultdict(list), []
    keys = row_keys + col_keys + ([over] if over else [])
    for record in records:
        row, col = label(record, row_keys), label(record, col_keys)
        reason = unusable(record, metric, value, keys)
        if reason:
            excluded.append(Excluded(row, col, reason, run_id(record)))
        else:
            groups[row, col, label(record, [over]) if over else None].append(record)
    cells = {}
    for (row, col, choice), runs in sorted(groups.items(), key=lambda item: repr(item[0])):
        kept, dropped = same_config(runs, keys)
        kept, repeats = one_per_seed(kept)
        excluded += [Excluded(row, col, why, run_id(r)) for r, why in dropped + repeats]
        if kept:
            values = [float(values_at(r, value)[metric]) for r in kept]
            cells[row, col, choice] = Cell(kept, values, aggregate, choice, bounds(metric))
    return cells, excluded


def check_columns(cells: dict, keys: list[str]) -> None:
    """A column ranks runs of one setup only: the rows of a column may differ in `keys` (the row, column and
    --best-over keys, the parameters the sweep tunes; with an `encoding` row, the encoding arguments) and in
    nothing else of SETUP. Else one line naming the column, two of its rows and the keys where they differ."""
    free = list(keys) + (encoding_keys() if "encoding" in keys else [])
    by_col = defaultdict(dict)
    for (row, col), cell in sorted(cells.items()):
        by_col[col][row] = setup_of(cell.records[0], free)
    for col, setups in by_col.items():
        (first, kept), *others = setups.items()
        for row, setup in others:
            diff = sorted(k for k in set(kept) | set(setup) if kept.get(k) != setup.get(k))
            if diff:
                shown = ", ".join(f"{k} ({kept.get(k, 'missing')} vs {setup.get(k, 'missing')})" for k in diff[:3])
                more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
                raise ConfigError(
                    f"column {col!r} mixes setups, refusing to rank them: {first} and {row} differ in {shown}{more}; "
                    "split them with --cols task,KEY (or --rows), or select one study with --sweep"
                )


def check_best_over(records: list[RunRecord], key: str) -> None:
    """--best-over needs a key that takes at least two values among the selected runs."""
    values = {json.dumps(lookup(r, key), sort_keys=True) for r in records}
    if len(values - {"null"}) > 1:
        return
    flat = [flatten(r.config) for r in records]
    varied = sorted(k for k in set().union(*flat) if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1)
    varied = [k for k in varied if any(_under(config_path(k), s) for s in SETUP)]
    raise ConfigError(f"--best-over {key!r} does not vary among the selected runs (values: {', '.join(sorted(values))})"
                      f"; keys that vary: {', '.join(varied) or 'none'}")  # fmt: skip


def pick_best_over(cells: dict, comp_goal: str, chosen: dict | None = None) -> tuple[dict, dict]:
    """Per (row, col) keep the --best-over value whose aggregate is best (or the one `chosen` names,
    so a second metric follows the first metric's choice); also returns every candidate's aggregate."""
    candidates = defaultdict(dict)
    for (row, col, choice), cell in cells.items():
        candidates[row, col][choice] = cell
    kept, alternatives = {}, {}
    for key, by_choice in candidates.items():
        if chosen is not None:
            if chosen.get(key) in by_choice:
                kept[key] = by_choice[chosen[key]]
        else:
            sign = -1.0 if comp_goal == "max" else 1.0
            kept[key] = min(by_choice.values(), key=lambda c: (sign * c.center, c.chosen))
        alternatives[key] = {c: cell.center for c, cell in by_choice.items()}
    return kept, alternatives


def check_metric(records: list[RunRecord], metric: str, value: str) -> None:
    logged = {m for r in records for m in values_at(r, value)}
    if metric not in logged:
        short = sorted({re.sub(r"_(\d+)$", "_<n>", m) for m in logged})
        step = STEP_VALUE.match(value)
        at = f" at step {step[1]}" if step else ""
        raise ConfigError(
            f"metric {metric!r} was not logged{at} by any selected run; available: {', '.join(short) or 'none'}"
        )


def read_records(out_dir: str, sweep: str | None) -> list[RunRecord]:
    """Local records under out_dir (recursively), those of one sweep when given."""
    records = load_records(Path(out_dir))
    if not records:
        raise ConfigError(f"no run records ({RECORD_FILE}) under {str(Path(out_dir).resolve())!r}")
    return select(records, sweep, f"under {out_dir!r}")


def select(records: list[RunRecord], sweep: str | None, where: str) -> list[RunRecord]:
    """The runs of `sweep` (comma-separated for several sweeps side by side), every run when None."""
    if sweep is None:
        return records
    known = sorted({str(r.sweep) for r in records if r.sweep})
    for one in sweep_names(sweep):
        if one not in known:
            raise ConfigError(f"no runs of sweep {one!r} {where}; sweeps found: {', '.join(known) or 'none'}")
    return [r for r in records if r.sweep in sweep_names(sweep)]


def sweep_names(sweep: str) -> list[str]:
    """`--sweep a,b`: the runs of both sweeps in one comparison (e.g. a reproduction and its added row)."""
    return [name.strip() for name in sweep.split(",") if name.strip()]


def config_path(key: str) -> str:
    """`model.init_args.lr` and `model.lr` name the same setting (LightningCLI accepts both)."""
    return ".".join(part for part in key.split(".") if part != "init_args")


def side_by_side(metric: str, records: list[RunRecord], value: str = "final") -> list[str]:
    """The sweep's metric and, for the synthetic tasks, its in-distribution / beyond-length companion
    (`val/acc` with `val/acc_ood`), the sweep's own metric first."""
    stage, _, short = metric.rpartition("/")
    if short not in (ACC, ACC_OOD) or not stage:
        return [metric]
    other = name(stage, ACC_OOD if short == ACC else ACC)
    logged = any(other in values_at(r, value) for r in records)
    return [metric, other] if logged else [metric]
