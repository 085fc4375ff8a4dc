"""The Pareto front of a multi-objective sweep (`metrics:` in the sweep file): the configurations no other
configuration beats on every objective at once. Computed by Optuna's own rule (`Study.best_trials`), on
the sweep's study for its trials, and on a throw-away in-memory study for configurations averaged over
seeds (`cli.py compare`).
"""

import optuna
from rich.table import Table

from pe_sweeps.compare.comparison import Comparison


def non_dominated(points: dict[str, list[float]], directions: list[str]) -> list[str]:
    """Labels of the points on the Pareto front, in input order (Optuna's `best_trials` decides)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "a new study created in memory" line
    try:
        study = optuna.create_study(directions=directions)
    finally:
        optuna.logging.set_verbosity(verbosity)
    for label, values in points.items():
        study.add_trial(optuna.trial.create_trial(values=values, user_attrs={"label": label}))
    front = {t.user_attrs["label"] for t in study.best_trials}
    return [label for label in points if label in front]


def comparison_front(comps: list[Comparison], directions: list[str]) -> dict[str, list[str]]:
    """Per column (task), the rows (configurations) whose seed aggregates (mean, or median with
    `--aggregate median`) are non-dominated over the metrics; only rows that have every metric in that
    column take part."""
    fronts = {}
    for col in sorted({c for comp in comps for c in comp.cols}):
        rows = [r for r in comps[0].rows if all((r, col) in comp.cells for comp in comps)]
        points = {r: [comp.cells[r, col].center for comp in comps] for r in rows}
        fronts[col] = non_dominated(points, directions) if points else []
    return fronts


def front_table(comps: list[Comparison], directions: list[str]) -> Table:
    """Pareto front per column: each front row with its aggregate +- std per metric."""
    goals = ", ".join(f"{c.metric} ({d[:3]})" for c, d in zip(comps, directions))
    title = f"Pareto front (non-dominated configurations): {goals}, {comps[0].aggregate} ± std over seeds"
    table = Table(title=title)
    for column in ("column", "row"):
        table.add_column(column, overflow="fold")
    for column in (*(c.metric for c in comps), "n"):  # `center ± std` stays on one line
        table.add_column(column, justify="right", no_wrap=True)
    for col, rows in comparison_front(comps, directions).items():
        for row in rows:
            cells = [comp.cells[row, col] for comp in comps]
            values = [f"{cell.center:.4g} ± {cell.std:.2g}" for cell in cells]
            table.add_row(col, row, *values, str(min(cell.n for cell in cells)))
    return table


def front_trials(study: optuna.Study) -> set[int]:
    """Numbers of the study's trials on its Pareto front (`Study.best_trials`); none before one completes."""
    if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return set()
    return {t.number for t in study.best_trials}
