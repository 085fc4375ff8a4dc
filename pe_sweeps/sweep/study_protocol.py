"""The study a sweep runs in: its name (`--study_name`, `--set`), creating or resuming it (checked to be the
same sweep file), queueing every grid point once at creation (`QUEUED`), and the budget: whether trials
are left to ask for, which grid points are unfinished, and whether anything succeeded. Creating the study
holds the study lock (storages/study_lock.py); retries and dead trials are sweep/recovery.py's."""

import hashlib
import time
import unicodedata
import warnings
from pathlib import Path

import optuna
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from lightning_modules.registry import encoding_parameters
from lightning_modules.schedule_label import is_label, label_pattern
from pe_core.errors import ConfigError
from pe_sweeps.runs.manifest import fingerprint
from pe_sweeps.runs.records import check_name
from pe_sweeps.runs.run_naming import short_value
from pe_sweeps.storages.storage_url import storage_url
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.options import SweepOptions
from pe_sweeps.sweep.search import SAMPLER_ATTR, Search, build_search, check_sampler

QUEUED = "pe_queued"  # system attr of grid points queued at study creation (and of their retries)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def apply_overrides(sweep: dict, overrides: list[str]) -> tuple[dict, str]:
    """Fix parameters to constants; returns the new sweep and a study-name suffix."""
    suffix = []
    if overrides and "search_space" in (sweep.get("scheduler") or {}):
        raise ConfigError("--set fixes the file's parameters; with scheduler.search_space the source file defines them")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or key not in sweep["parameters"]:
            known = ", ".join(sweep["parameters"])
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with KEY one of the sweep's parameters: {known}")
        sweep["parameters"][key] = {"value": yaml.safe_load(value)}
        suffix.append(set_value_name(value))
    check_encoding_names(sweep)
    return sweep, "-".join(suffix)


def set_value_name(value: str) -> str:
    """A --set value as the study name shows it, as a run name does (`--set KEY={a: 1}` still names one folder).
    A name is ASCII (records.check_name), so a value with other letters keeps its accented letters unaccented and
    a short hash of the whole value: `héllo` -> `hello-u35b5ea`, `日本` -> `u44da6b`: two values are never one study."""
    if value.isascii():
        return short_value(value)
    digest = "u" + hashlib.sha1(value.encode()).hexdigest()[:6]
    readable = short_value(unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode())
    return digest if readable == "none" else f"{readable}-{digest}"  # "none": no ASCII letter left


def check_encoding_names(sweep: dict) -> None:
    """Every encoding a parameter names (`value` / `values` of model.arch.encoding and its kin, a per-layer list or
    a schedule label such as rope3.none) is a registered one: one line naming the valid choices before any trial
    starts, instead of every trial failing alike. Imports the encoding registry (torch) only for such a sweep."""
    named, keys = [], encoding_parameters()
    for key, spec in (sweep.get("parameters") or {}).items():
        if key in keys and isinstance(spec, dict):
            named += [(key, v) for v in sf.spec_values(spec)]
    if not named:
        return
    from lightning_modules.encodings import check_encoding_name

    for key, value in named:
        names = label_pattern(value) if is_label(value) else value if isinstance(value, list) else [value]
        try:
            for name in (n for n in names if isinstance(n, str)):
                check_encoding_name(name)
        except ConfigError as error:
            raise ConfigError(f"{key}={value!r}: {error}") from None


def base_name(opts: SweepOptions, sweep: dict) -> str:
    """The study name before any --set suffix: --study_name, else the file's `name:`, else its file name."""
    return opts.study_name or str(sweep.get("name") or Path(opts.file).stem)


def name_study(opts: SweepOptions, sweep: dict, suffix: str = "") -> None:
    """Set `opts.study_name` (--study_name, else the file's `name:` or file name, plus the --set values) and
    `opts.storage` (default: the one SQLite database of the sweep file, shared by its --set studies, so one
    optuna-dashboard shows them side by side)."""
    base = base_name(opts, sweep)
    check_name("study name (--study_name, the sweep file's `name:` or its file name)", base)
    if opts.storage is None:
        opts.storage = storage_url(opts, base)
    if suffix and not opts.study_name:
        opts.study_name = f"{base}-{suffix}"
    opts.study_name = opts.study_name or base
    check_name("study name", opts.study_name)


def open_study(
    sweep: dict, opts: SweepOptions, storage, study_name: str, locked: bool, search: Search | None = None
) -> optuna.Study:
    """Create the study (queueing every grid point once) or load it, checking it is the same sweep.
    `locked`: this process holds the study's cross-process lock (storages/study_lock.py), so a study that
    is not ready was left half-made by a process that died while creating it (else: not ready after a
    minute). `search`: the
    sweep file's directions, sampler and pruner (sweep/search.py), built from `sweep` when not given."""
    search = search or build_search(sweep, study_name)
    digest = fingerprint(sweep)  # the manifest's `fingerprint` too
    kwargs = {"study_name": study_name, "storage": storage, "sampler": search.make_sampler(opts.seed)}
    try:
        study = optuna.create_study(directions=search.directions, pruner=search.pruner, **kwargs)
        study.set_metric_names(search.metrics)  # optuna-dashboard shows "val/acc", not "Objective 0"
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(pruner=search.pruner, **kwargs)
        attrs = study.user_attrs if locked else wait_until_ready(study)
        if attrs.get("ready") and attrs.get("sweep_digest") != digest:
            raise ConfigError(
                f"study {study_name!r} was made from a different sweep file; pass --study_name to start a new one"
            ) from None
        if attrs.get("ready"):
            check_sampler(study, attrs, search, locked)
            return study
    study.set_user_attr("sweep_digest", digest)
    study.set_user_attr("sweep", sweep)
    if search.sampler_settings:  # pinned TPE settings (sweep/search.py): a resume with others is refused
        study.set_user_attr(SAMPLER_ATTR, search.sampler_settings)
    if sweep["method"] == "grid":
        queue_grid(study, sweep)
    study.set_user_attr("ready", True)  # another process may now join
    return study


def queue_grid(study: optuna.Study, sweep: dict) -> None:
    """Queue every grid point once, tagged with its GridSampler grid id: workers in any process then pop
    distinct points atomically (a plain GridSampler may hand the same point to two workers). Points a
    dead creator already queued are not queued again."""
    space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
    distributions = {n: CategoricalDistribution(v) for n, v in space.items()}
    done = {t.system_attrs.get("grid_id") for t in study.get_trials(deepcopy=False) if QUEUED in t.system_attrs}
    for grid_id, point in enumerate(sf.grid_points(sweep)):
        if grid_id in done:
            continue
        attrs = {"grid_id": grid_id, "search_space": space, QUEUED: True}
        trial = optuna.create_trial(
            state=TrialState.WAITING, params=point, distributions=distributions, system_attrs=attrs
        )
        study.add_trial(trial)


def wait_until_ready(study: optuna.Study, timeout: float = 60.0) -> dict:
    """A process joining a study that another one is still creating waits for its grid to be queued."""
    deadline = time.monotonic() + timeout
    while not (attrs := study.user_attrs).get("ready") and time.monotonic() < deadline:
        time.sleep(0.5)
    return attrs


def budget_left(study: optuna.Study, sweep: dict) -> bool:
    """Fewer trials started than run_cap (for every method, grid included; a failed trial that was re-queued
    counts once, through its retry), and for a grid, queued points remain."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    started = [t for t in trials if t.number not in retried and t.state != TrialState.WAITING]
    if sweep["method"] == "grid":
        started = [t for t in started if QUEUED in t.system_attrs]
    budget = sf.trial_budget(sweep)
    if budget is not None and len(started) >= budget:
        return False
    return sweep["method"] != "grid" or any(t.state == TrialState.WAITING for t in trials)


def latest_grid_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The latest trial of each grid point (its last retry), in grid order."""
    latest: dict[int, FrozenTrial] = {}
    for t in trials:
        if QUEUED in t.system_attrs:
            grid_id = t.system_attrs["grid_id"]
            if grid_id not in latest or t.number > latest[grid_id].number:
                latest[grid_id] = t
    return [t for _, t in sorted(latest.items())]


def given_up_points(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The latest trials of grid points failed for good: neither complete (or pruned) nor queued or running."""
    return [t for t in latest_grid_trials(trials) if t.state == TrialState.FAIL]


def unfinished_points(study: optuna.Study, sweep: dict) -> list[dict]:
    """Grid points whose latest trial is neither finished nor failed for good (still queued or running).
    Points never started because run_cap was reached are not unfinished: the cap chose to leave them."""
    capped = sf.trial_budget(sweep) is not None and not budget_left(study, sweep)
    latest = latest_grid_trials(study.get_trials(deepcopy=False))
    left = [t for t in latest if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    return [
        t.params
        for t in left
        if not (capped and t.state == TrialState.WAITING and "retry_history" not in t.system_attrs)
    ]


def nothing_succeeded(study: optuna.Study) -> str | None:
    """The one error line of a study in which trials ran and none completed (every method), else None."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.COMPLETE for t in trials) or not any(t.state.is_finished() for t in trials):
        return None
    failed = [t for t in trials if t.state == TrialState.FAIL]
    first = failed[0].user_attrs.get("reason", "no reason") if failed else "every trial was pruned"
    return f"error: sweep {study.study_name}: no trial succeeded ({len(failed)} failed; the first: {first[:200]})"
