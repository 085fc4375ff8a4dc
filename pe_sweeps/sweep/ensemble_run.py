"""A sweep's seed ensembles (`cli.py sweep --ensemble_seeds K`, issue 47): the queued first attempts of one grid
point that differ only in `seed_everything` run as one child, `cli.py fit --run.ensemble_seeds=[s0, s1, ...]`
(pe_sweeps/runs/ensemble_fit.py), while each stays its own trial: its own trial folder and run record (the child
puts member i's run in trial i's folder, ENSEMBLE_OUT_DIRS_ENV), its own reported values and pruning decision,
its own result. `compare`, `reseed` and the records see ordinary trials.

A retry is never grouped: a member whose child died is re-queued alone, as any trial, and resumes its own
checkpoint (an ensemble of one, the same arithmetic), so a killed ensemble resumes each member exactly once. A
member the pruner stops is told pruned and frozen by the child at its next validation (PRUNE_FILE in its run
folder) while the others go on; a member that finished before its child was killed keeps its result.
"""

import json
import time
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from pe_sweeps import internals, layout
from pe_sweeps.failpoints import failpoint
from pe_sweeps.layout import ENSEMBLE_OUT_DIRS_ENV, PRUNE_FILE
from pe_sweeps.sweep.children import stop_child
from pe_sweeps.sweep.study_protocol import QUEUED
from pe_sweeps.sweep.trial_child import build_command, latest_record, latest_record_path, note_run
from pe_sweeps.sweep.trial_run import TrialRun
from pe_sweeps.sweep.warm_start import WarmChild

SEED_KEY = "seed_everything"


def siblings(study: optuna.Study, first: optuna.Trial, k: int) -> list[FrozenTrial]:
    """Up to k - 1 queued first attempts of `first`'s grid point with other seeds, oldest first; none when
    `first` is a retry (it resumes a checkpoint of its own) or not a queued grid point."""
    stored = internals.stored_trial(study, first)
    if QUEUED not in stored.system_attrs or "retry_history" in stored.system_attrs or SEED_KEY not in stored.params:
        return []
    point = {key: value for key, value in stored.params.items() if key != SEED_KEY}
    seeds, found = {stored.params[SEED_KEY]}, []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if len(found) == k - 1:
            break
        same = {key: value for key, value in trial.params.items() if key != SEED_KEY} == point
        first_attempt = QUEUED in trial.system_attrs and "retry_history" not in trial.system_attrs
        if same and first_attempt and trial.params.get(SEED_KEY) not in seeds:
            seeds.add(trial.params[SEED_KEY])
            found.append(trial)
    return found


class EnsembleRun(TrialRun):
    """The trials of one grid point, one seed each, run as one seed-ensemble child and told one by one."""

    def run_group(self, trials: list[optuna.Trial]) -> None:
        params = [self.search.draw(trial) for trial in trials]
        dirs = [layout.trial_dir(self.opts.out_dir, self.study.study_name, trial.number) for trial in trials]
        for trial, trial_dir in zip(trials, dirs, strict=True):
            trial_dir.mkdir(parents=True, exist_ok=True)
            trial.set_user_attr("trial_dir", str(trial_dir))
        seeds = [p[SEED_KEY] for p in params]
        argv = build_command(self.sweep, params[0], dirs[0])
        argv.append(f"--run.ensemble_seeds={json.dumps(seeds, separators=(',', ':'))}")
        failpoint("trial:started")
        for trial in trials:
            trial.set_user_attr("command", " ".join(argv))
            trial.set_user_attr("log", str(dirs[0] / "output.log"))  # one child, one log
            trial.set_user_attr("ensemble", [t.number for t in trials])
        env = self.child_environment(params[0], dirs[0])
        env[ENSEMBLE_OUT_DIRS_ENV] = json.dumps({str(s): str(d) for s, d in zip(seeds, dirs, strict=True)})
        with open(dirs[0] / "output.log", "ab") as log:
            child = self.runner.starter.launch(argv, env, log)
            start = "warm" if isinstance(child, WarmChild) else "cold"
            for trial in trials:
                self.runner.quietly(trial.set_user_attr, "start", start)
            outcomes = self.follow_group(trials, child, dirs)
        failpoint("child:exited")
        for trial, trial_dir in zip(trials, dirs, strict=True):
            record = latest_record(trial_dir)
            outcome, code = outcomes[trial.number], child.returncode
            if record is not None and record.status in ("finished", "diverged") and outcome != "pruned":
                outcome, code = None, 0 if record.status == "finished" else 3  # its own run ended, whatever came after
            self.tell(trial, code, outcome, record, trial_dir)

    def follow_group(self, trials: list[optuna.Trial], child, dirs: list[Path]) -> dict[int, str | None]:
        """`follow` for every member: report each one's new values, and when the pruner stops one, ask the child
        to freeze it (PRUNE_FILE); stop the child on a stop signal. Returns each trial's "pruned" / "interrupted"
        / None."""
        outcomes: dict[int, str | None] = {trial.number: None for trial in trials}
        reported = {trial.number: 0 for trial in trials}
        noted: set[int] = set()
        try:
            while child.poll() is None:
                if self.runner.stop.is_set():
                    stop_child(child)
                    return {n: o or "interrupted" for n, o in outcomes.items()}
                for trial, trial_dir in zip(trials, dirs, strict=True):
                    if trial.number not in noted and self.runner.quietly(note_run, trial, trial_dir):
                        noted.add(trial.number)
                    if outcomes[trial.number] is None:
                        outcomes[trial.number] = self.catch_up_member(trial, trial_dir, reported)
                if all(outcomes.values()):
                    stop_child(child)
                    break
                time.sleep(0.5)
        except BaseException:
            stop_child(child)
            raise
        for trial, trial_dir in zip(trials, dirs, strict=True):
            if outcomes[trial.number] is not None:
                continue
            self.catch_up(trial, trial_dir, reported[trial.number], report=True)
            self.runner.quietly(note_run, trial, trial_dir)
        return outcomes

    def catch_up_member(self, trial: optuna.Trial, trial_dir: Path, reported: dict[int, int]) -> str | None:
        """Report a member's new values; "pruned" (its run told to freeze) when the pruner says so."""
        now = self.catch_up(trial, trial_dir, reported[trial.number], report=True)
        if now <= reported[trial.number]:
            return None
        reported[trial.number] = now
        if not self.runner.quietly(trial.should_prune):
            return None
        path = latest_record_path(trial_dir)
        if path is not None:
            (path.parent / PRUNE_FILE).touch()
        return "pruned"
