"""Runs of a W&B project read through the public API (`wandb.Api().runs(path)`), in the shape of the
local run records (runs/records.py), for `cli.py compare --wandb ENTITY/PROJECT`.

final / best come from the run summary (the plain final value and `best/<metric>`, written by
runs/wandb_setup.DirectedWandbLogger; older runs: {"last", "max" or "min"} per metric) and, where the summary
lacks them, from the history. The
config is the resolved LightningCLI config the run put under `resolved_config` (else the flat
hyperparameters Lightning logs); identity from `task`, `encoding`, `seed_everything`, `sweep`.
"""

import math
import re

from lightning_modules.metric_names import BEST, STAGE_METRIC, goal
from pe_core.errors import ConfigError
from pe_sweeps.runs.records import RunRecord

WANDB_STATES = {"crashed": "failed", "killed": "interrupted", "preempted": "interrupted"}


def better(metric: str, a: float | None, b: float) -> float:
    return b if a is None else (max if goal(metric) == "max" else min)(a, b)


def wandb_values(summary: dict, history: list[dict]) -> tuple[dict, dict]:
    """Final and best value of every metric, from the summary (a plain final value and `best/<metric>`; a
    run written before those: {"last", "max"/"min"} as define_metric declared it) and, where the summary lacks
    them, from the history."""
    final, best = {}, {}
    for row in history:
        for key, v in row.items():
            if key != "step":
                final[key] = v
                best[key] = better(key, best.get(key), v)
    for key, v in summary.items():
        if not STAGE_METRIC.match(key):
            continue
        if isinstance(v, dict):
            final[key] = v.get("last", final.get(key))
            best[key] = v.get(goal(key), best.get(key, final.get(key)))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            final[key] = v
            best[key] = better(key, best.get(key), v)
    for key, v in summary.items():  # the run's own best: of every validation, the history read may have fewer
        metric = key[len(BEST) :]
        if key.startswith(BEST) and STAGE_METRIC.match(metric) and isinstance(v, (int, float)):
            best[metric] = v
    return {k: v for k, v in final.items() if v is not None}, {k: v for k, v in best.items() if v is not None}


def wandb_history(run) -> list[dict]:
    rows = []
    for row in run.history(pandas=False):
        values = {
            k: v for k, v in row.items() if k.startswith("val/") and isinstance(v, (int, float)) and math.isfinite(v)
        }
        if values:
            rows.append({"step": row.get("trainer/global_step", row.get("_step")), **values})
    return rows


def wandb_seed(config: dict, resolved: dict, run_name: str) -> int | None:
    """seed_everything from the config, else the `-s<seed>` suffix of the run name."""
    seed = config.get("seed_everything", resolved.get("seed_everything"))
    match = re.search(r"-s(\d+)$", run_name)
    return seed if seed is not None or not match else int(match[1])


def init_arg(config: dict, section: str, key: str):
    return ((config.get(section) or {}).get("init_args") or {}).get(key)


def wandb_record(run) -> RunRecord:
    """A W&B public-API run in the shape of a local record (runs/records.py)."""
    from lightning_modules.registry import run_encoding_of

    config = {k: v for k, v in dict(run.config).items() if not k.startswith("_")}
    resolved = config.get("resolved_config") or config
    history = wandb_history(run)
    summary = dict(getattr(run, "summary_metrics", None) or run.summary)
    final, best = wandb_values(summary, history)
    group = (run.group or "/").split("/")
    return RunRecord(
        name=run.name, group=run.group,
        task=config.get("task") or init_arg(resolved, "data", "task") or group[-2 if len(group) > 1 else 0],
        encoding=config.get("encoding") or run_encoding_of(resolved) or group[-1],
        seed=wandb_seed(config, resolved, run.name or ""),
        sweep=config.get("sweep") or getattr(run, "sweep_name", None), subcommand="fit",
        status=WANDB_STATES.get(run.state, run.state), config=resolved, final=final, best=best,
        history=history, run_dir=getattr(run, "url", None) or run.name,
    )  # fmt: skip


def api_problem(error: Exception) -> str:
    """What went wrong reading from the W&B API, and what to change (never WANDB_MODE: offline mode is for
    logging runs, and reading them needs the API)."""
    import wandb

    if isinstance(error, wandb.errors.UsageError):
        return "no W&B API key: set WANDB_API_KEY or run `wandb login`"
    if isinstance(error, wandb.errors.AuthenticationError):
        return "W&B rejected the API key: check WANDB_API_KEY or run `wandb login`"
    if isinstance(error, wandb.errors.CommError):
        return "could not reach W&B: check the network (and WANDB_BASE_URL for a private server)"
    return "the W&B API failed: check ENTITY/PROJECT and that the project exists"


def read_wandb(path: str) -> list[RunRecord]:
    """Every run of ENTITY/PROJECT from the W&B public API, as records. A malformed path, a missing or
    rejected API key and an unreachable server are each one line (ConfigError) saying which."""
    import wandb

    if len([part for part in path.split("/") if part]) != 2:
        raise ConfigError(f"--wandb {path!r}: expected ENTITY/PROJECT (e.g. my-team/pe-sweeps)")
    problem = None
    try:
        records = [wandb_record(run) for run in wandb.Api().runs(path)]
    except (wandb.errors.Error, ValueError) as error:  # ValueError: wandb's "Could not find project"
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        problem = f"compare --wandb {path!r}: {api_problem(error)} ({type(error).__name__}: {reason})"
    if problem:  # raised outside the handler: cli.py would otherwise report the W&B error in its context
        raise ConfigError(problem)
    if not records:
        raise ConfigError(f"no runs in W&B project {path!r}")
    return records
