"""The sweep engine: `cli.py sweep FILE` runs a W&B sweep file with Optuna, every grid point exactly once across
workers, processes and hosts, through crashes, kills and storage outages.

Public (imported from outside this package): `run` (`run_sweep`, `SweepOptions`, `check_options`), `reseed`
(tune, then reseed), `plan` (`--dry-run`: the trials and their estimated time), `options` / `slurm_options` (the
command's options), `sweep_file` (reading and translating a sweep file), `study_protocol` (naming, creating and
resuming the study), `children` (starting and stopping a trial's process) and `trial_devices` (the cores and
GPUs a trial gets).
Private: `supervision` (the workers), `trial_run` / `trial_child` (one trial, start to result), `recovery`
(retries and dead trials), `warm_start` (the fork server), `core_claims`, `search` and `display`.
Storages and their locks are in `pe_sweeps/storages/`; what a run writes in `pe_sweeps/runs/`.
"""

__all__ = [
    "children",
    "options",
    "plan",
    "reseed",
    "run",
    "slurm_options",
    "study_protocol",
    "sweep_file",
    "trial_devices",
]
