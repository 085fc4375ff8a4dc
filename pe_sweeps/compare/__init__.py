"""`cli.py compare`: runs side by side (rows x columns, e.g. encoding x task), with their statistics, in a table,
csv, json, markdown, LaTeX or an HTML report.

Public: `command` (`run_compare`, `CompareOptions`, `print_comparison`), `pareto` (a multi-objective sweep's
front) and `preconditions` (what a cell must show to be ranked; the sweep file's check parses them).
Private: `selection` (which runs), `spec` (the sweep's metrics and parameters), `statistics`,
`resampling` (two-stage bootstrap over seeds and evaluation examples), `across_tasks` (rliable aggregates),
`comparison` (what a comparison holds), `categories` (per-task-category mean ranks), `render` (the formats),
`report` (the HTML report), `atlas_figure` (its rows x tasks heatmap) and `saved_runs` (`--save_runs` / `--from`).
"""

__all__ = ["command", "pareto", "preconditions"]
