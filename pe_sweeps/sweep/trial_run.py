"""One trial, start to result: start its child (forked warm or a new interpreter), stream the sweep metric
from its run record into the trial, stop it when the pruner says so, and tell the result (or re-queue it)."""

import json
import subprocess
import time
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from pe_sweeps import internals, layout
from pe_sweeps.failpoints import failpoint
from pe_sweeps.layout import SWEEP_PARAMS_ENV
from pe_sweeps.runs.records import RunRecord
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.children import stop_child
from pe_sweeps.sweep.recovery import predecessors
from pe_sweeps.sweep.trial_child import (
    build_command,
    child_env,
    crashed,
    failure_reason,
    finished_record,
    finite,
    latest_record,
    note_run,
    resume_checkpoint,
)
from pe_sweeps.sweep.warm_start import WarmChild


class TrialRun:
    """One trial: start the child, stream its metric into the trial, prune, and tell the result. `runner`
    is the sweep process's `Sweep` (sweep/supervision.py, which imports this module): its options, stop
    event, trial starter and locked `finish`."""

    def __init__(self, runner, study: optuna.Study, slot: int):
        self.runner, self.study, self.slot = runner, study, slot
        self.sweep, self.opts, self.search = runner.sweep, runner.opts, runner.search
        self.metric = self.search.metrics[0]  # the one streamed to the pruner (single-objective only)

    def run(self, trial: optuna.Trial) -> None:
        params = self.search.draw(trial)
        dead = predecessors(self.study, internals.trial_id(trial))
        resumed = resume_checkpoint(dead)
        # a retry that resumes continues in the folder of the attempt whose checkpoint it resumes: that run's
        # folder, record and W&B run (cli.py resumes a fit into its checkpoint's run), and its output.log
        trial_dir = Path(resumed[1].user_attrs["trial_dir"]) if resumed else None
        trial_dir = trial_dir or layout.trial_dir(self.opts.out_dir, self.study.study_name, trial.number)
        trial_dir.mkdir(parents=True, exist_ok=True)
        trial.set_user_attr("trial_dir", str(trial_dir))
        argv = build_command(self.sweep, params, trial_dir)
        failpoint("retry:started" if dead else "trial:started")
        if self.adopt_finished(trial, dead):  # its reason says whose retry it is
            return
        if resumed:
            checkpoint, writer = resumed
            argv.append(f"--ckpt_path={checkpoint}")
            trial.set_user_attr("resumed_from", str(checkpoint))
            for step, value in sorted(writer.intermediate_values.items()):  # the pruner sees one history
                trial.report(value, step)
        trial.set_user_attr("command", " ".join(argv))
        trial.set_user_attr("log", str(trial_dir / "output.log"))
        env = self.child_environment(params, trial_dir)
        with open(trial_dir / "output.log", "ab") as log:
            child = self.runner.starter.launch(argv, env, log)  # forked warm, or a new interpreter
            self.runner.quietly(trial.set_user_attr, "start", "warm" if isinstance(child, WarmChild) else "cold")
            outcome = self.follow(trial, child, trial_dir)
        failpoint("child:exited")
        self.tell(trial, child.returncode, outcome, latest_record(trial_dir), trial_dir)

    def child_environment(self, params: dict, trial_dir: Path) -> dict:
        """The child's environment: its trial folder, threads and GPUs, the sweep's W&B settings, and the varied
        parameters (its run names and config)."""
        env = {**child_env(self.study.study_name, trial_dir, self.slot, self.opts), **sf.wandb_env(self.sweep)}
        env[SWEEP_PARAMS_ENV] = json.dumps(sf.varied(self.sweep, params), default=str)
        return env

    def adopt_finished(self, trial: optuna.Trial, dead: list[FrozenTrial]) -> bool:
        """If a run of any trial this one retries finished (its child ended after its sweep died, perhaps
        several retries back), take its result: the point is never trained twice."""
        for earlier in dead:
            folder = earlier.user_attrs.get("trial_dir")
            record = finished_record(Path(folder), self.search.metrics) if folder else None
            if record is not None:
                reason = f"trial {earlier.number}'s run finished after its sweep died; result adopted"
                trial.set_user_attr("reason", reason)
                trial.set_user_attr("trial_dir", folder)
                self.tell(trial, 0, None, record, Path(folder))
                return True
        return False

    def follow(self, trial: optuna.Trial, child: subprocess.Popen, trial_dir: Path) -> str | None:
        """Wait for the child; heartbeat; report each new value of the metric (the last ones too, once it
        has exited). Returns "pruned" or "interrupted" when it stopped the child, None when it ended."""
        reported, noted = 0, False
        try:
            while child.poll() is None:
                if not noted:
                    noted = self.runner.quietly(note_run, trial, trial_dir) or False
                if self.runner.stop.is_set():
                    stop_child(child)
                    return "interrupted"
                now = self.catch_up(trial, trial_dir, reported, report=True)  # one read of the record a poll
                if now > reported:
                    reported = now
                    if self.runner.quietly(trial.should_prune):
                        stop_child(child)
                        return "pruned"
                time.sleep(0.5)
        except BaseException:
            stop_child(child)
            raise
        self.catch_up(trial, trial_dir, reported, report=True)
        self.runner.quietly(note_run, trial, trial_dir)
        return None

    def catch_up(self, trial: optuna.Trial, trial_dir: Path, reported: int, report=False) -> int:
        """How many values of the metric the child's record holds; with `report`, report the new ones at
        the step W&B plots them at (`trainer/global_step`, the record's `wandb_step`; else `step`) and
        return how many are now reported. A multi-objective trial reports nothing:
        Optuna's intermediate values feed pruners, which rank one value."""
        if self.search.multi_objective:
            return 0
        record = latest_record(trial_dir)
        history = [h for h in (record.history if record else []) if self.metric in h]
        if not report:
            return len(history)

        def send():
            for index in range(reported, len(history)):
                row = history[index]
                trial.report(row[self.metric], row.get("wandb_step", row.get("step", index + 1)))
            return len(history)

        return self.runner.quietly(send) or reported

    def tell(self, trial, returncode: int, outcome: str | None, record: RunRecord | None, trial_dir: Path) -> None:
        final = record.final if record else {}
        if outcome == "interrupted":
            reason = f"stopped by {self.runner.stop_signal_name()}; re-queued"
            self.runner.finish(self.study, trial, TrialState.FAIL, reason=reason, requeue_as=(reason, False))
        elif outcome == "pruned":
            reported = internals.stored_trial(self.study, trial).intermediate_values  # a live Trial has none
            reason = f"pruned at validation {len(reported)}"
            self.runner.finish(self.study, trial, TrialState.PRUNED, reason=reason)
        elif returncode == 0 and finite(final, self.search.metrics):
            for key, value in final_attrs(final).items():  # optuna-dashboard shows them beside the objective
                self.runner.quietly(trial.set_user_attr, key, value)
            values = [final[m] for m in self.search.metrics]
            value = values if self.search.multi_objective else values[0]
            self.runner.finish(self.study, trial, TrialState.COMPLETE, value=value)
        else:
            missing = next((m for m in self.search.metrics if not finite(final, [m])), self.metric)
            reason = failure_reason(returncode, record, missing, trial_dir)
            died = crashed(returncode, record)
            self.runner.finish(
                self.study, trial, TrialState.FAIL, reason=reason, requeue_as=(reason, True) if died else None
            )


MAX_FINAL_ATTRS = 64


def final_attrs(final: dict) -> dict[str, float]:
    """A finished trial's final summary metrics as Optuna user attributes, e.g. {"final/val/acc_ood": 0.41}: the
    ones a sweep does not optimise (val/acc_ood beside val/acc) show in optuna-dashboard and `study.trials`.
    Per-length values (`_len_`) stay in the run record; at most MAX_FINAL_ATTRS, by name."""
    scalars = {k: float(v) for k, v in final.items() if isinstance(v, (int, float)) and "_len_" not in k}
    return {f"final/{k}": scalars[k] for k in sorted(scalars)[:MAX_FINAL_ATTRS]}
