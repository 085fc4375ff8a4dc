"""The sweep a comparison belongs to (`cli.py compare --sweep NAME`): its metrics and goals, the parameters
it varies and the default rows, read from the study's manifest (runs/manifest.py), or for a sweep made
before manifests existed, from its local Optuna database."""

from pathlib import Path

from lightning_modules.metric_names import ACC, goal, name
from pe_sweeps.compare.selection import config_path, keys_of, sweep_names
from pe_sweeps.layout import STUDY_DB, SWEEPS, study_db
from pe_sweeps.runs.manifest import read_manifest

DEFAULT_METRIC = name("val", ACC)


def sweep_spec(out_dir: str, sweep: str | None) -> dict:
    """The sweep's metrics, parameters and their roles from its manifest (out_dir/sweeps/<sweep>/manifest.json,
    any storage), else from a sweep made before manifests: the sweep dict of its local Optuna study."""
    if sweep is None:
        return {}
    names = sweep_names(sweep)
    if len(names) > 1:
        return merged_spec([sweep_spec(out_dir, name) for name in names])
    manifest = read_manifest(out_dir, sweep)
    if manifest is not None:
        return {k: manifest.get(k) for k in ("metrics", "parameters", "roles", "compare_rows", "compare")}
    return optuna_spec(out_dir, sweep)


def merged_spec(specs: list[dict]) -> dict:
    """Several sweeps compared as one: the first sweep's metrics and `compare:` block; the parameters, roles and
    reseed rows of all of them (a key any of them varies is a row or a tuned key of the comparison)."""
    merged = {"metrics": specs[0].get("metrics"), "metric": specs[0].get("metric"), "parameters": {}, "roles": {},
              "compare": specs[0].get("compare")}  # fmt: skip
    rows = []
    for spec in specs:
        merged["parameters"].update(spec.get("parameters") or {})
        merged["roles"].update(spec.get("roles") or {})
        rows += [key for key in (spec.get("compare_rows") or "").split(",") if key and key not in rows]
    if rows:
        merged["compare_rows"] = ",".join(rows)
    if not any(spec.get("roles") is not None for spec in specs):
        merged["roles"] = None
    return merged


def optuna_spec(out_dir: str, sweep: str) -> dict:
    """The sweep dict of a local Optuna study: in out_dir/sweeps/<sweep>/optuna.db, or in the database of
    the sweep file it was made from (`--set`, `--reseed` studies share one); {} if there is none."""
    import optuna
    import sqlalchemy

    from pe_sweeps.storages.storage import storage_error

    own = study_db(out_dir, sweep)
    for path in [own, *sorted(p for p in (Path(out_dir) / SWEEPS).glob(f"*/{STUDY_DB}") if p != own)]:
        if not path.is_file():
            continue
        url = f"sqlite:///{path.resolve()}"
        try:
            study = optuna.load_study(study_name=sweep, storage=url)
        except KeyError:
            continue
        except (sqlalchemy.exc.SQLAlchemyError, RuntimeError) as error:  # corrupt, or another Optuna's schema
            raise storage_error(url, error) from None
        spec = dict(study.user_attrs.get("sweep") or {})
        if study.user_attrs.get("compare_rows"):  # a reseed study: one row per tuned group (sweep/reseed.py)
            spec["compare_rows"] = study.user_attrs["compare_rows"]
        return spec
    return {}


def default_rows(spec: dict, best_over: str | None = None) -> str:
    """encoding, plus the parameters a sweep varies (seed, encoding and task aside, and the --best-over key,
    which is chosen within each cell): one row per setting; for a reseed study, its groups (each cell then
    holds that group's chosen setting)."""
    if spec.get("compare_rows"):
        return spec["compare_rows"]
    if spec.get("roles") is not None:  # from the manifest: seeds, tasks and encodings are not rows
        fixed = {k for k, role in spec["roles"].items() if role != "setting"}
    else:  # a run's `encoding` holds every parameter a task module declares as an encoding
        from lightning_modules.registry import encoding_parameters

        fixed = {"seed_everything", "data.task", "data.init_args.task"} | encoding_parameters()
    chosen = config_path(best_over) if best_over else None
    varied = [k for k, v in (spec.get("parameters") or {}).items()
              if k not in fixed and "value" not in dict(v) and config_path(k) != chosen]  # fmt: skip
    return ",".join(["encoding", *varied])


def tuned_keys(spec: dict) -> list[str]:
    """The parameters a sweep varies: each row of its comparison may hold its own setting of them (a reseed
    study's per-encoding choice, TUPE's learning rate)."""
    return [k for k, v in (spec.get("parameters") or {}).items() if "value" not in dict(v)]


def objectives(spec: dict, metric: str | None) -> list[tuple[str, str]]:
    """(metric, Optuna direction) pairs: --metric (comma-separated for several), else the sweep's
    `metrics` / `metric`, else val/acc. A goal comes from the sweep file when it names the metric, else
    from the metric's name (`lightning_modules.metrics.goal`)."""
    declared = {m["name"]: m.get("goal", "minimize") for m in spec.get("metrics") or [spec.get("metric") or {}] if m}
    names = keys_of(metric) if metric else list(declared) or [DEFAULT_METRIC]
    return [(m, declared.get(m) or ("maximize" if goal(m) == "max" else "minimize")) for m in names]
