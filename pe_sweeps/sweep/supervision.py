"""The sweep process's workers: one thread per `--workers` slot asks the study for a trial and runs it
(sweep/trial_run.py) until the budget is spent, a stop signal or a failure streak stops them; a heartbeat
thread beats for every trial the process holds; each ask and tell is one locked step
(storages/study_lock.py) whose storage errors are retried."""

import re
import signal
import sys
import threading
import time
from contextlib import nullcontext

import optuna
import sqlalchemy
from optuna.trial import TrialState

from pe_core.errors import ConfigError
from pe_sweeps import internals, layout
from pe_sweeps.failpoints import failpoint
from pe_sweeps.runs.manifest import write_manifest
from pe_sweeps.storages import storage
from pe_sweeps.storages.storage import open_storage, retrying, storage_error
from pe_sweeps.storages.storage_url import storage_url
from pe_sweeps.storages.study_lock import StudyLock, close_study
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.core_claims import CoreClaim
from pe_sweeps.sweep.ensemble_run import EnsembleRun, siblings
from pe_sweeps.sweep.options import SweepOptions
from pe_sweeps.sweep.recovery import (
    TOKEN,
    owner_attrs,
    owner_of,
    recover_dead_trials,
    requeue,
    retries_left,
    retry_given_up,
)
from pe_sweeps.sweep.search import build_search
from pe_sweeps.sweep.study_protocol import QUEUED, base_name, budget_left, given_up_points, open_study
from pe_sweeps.sweep.trial_child import rejected_option
from pe_sweeps.sweep.trial_devices import trial_threads
from pe_sweeps.sweep.trial_run import TrialRun
from pe_sweeps.sweep.warm_start import TrialStarter


class Heartbeats:
    """A thread that beats, every `interval` seconds, for each trial this sweep process holds: from the moment
    `ask` gives it until its result is told, so a live trial is never declared dead while its sweep waits
    for the study lock, the fork server or the storage."""

    def __init__(self, storage_, interval: int, quietly):
        self.storage, self.interval, self.quietly = storage_, interval, quietly
        self.held: set[int] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.beat, daemon=True, name="heartbeats")

    def hold(self, trial_id: int) -> None:
        with self.lock:
            self.held.add(trial_id)

    def release(self, trial_id: int) -> None:
        with self.lock:
            self.held.discard(trial_id)

    def start(self) -> None:
        self.thread.start()

    def beat(self) -> None:
        while not self.done.wait(self.interval):
            with self.lock:
                held = sorted(self.held)
            for trial_id in held:
                self.quietly(storage.record_heartbeat, self.storage, trial_id)

    def close(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)


class FailureStreak:
    """Trials told failed in a row with the same reason (numbers and paths aside); `stopped()` says why the
    sweep should stop once there are `limit` of them (0: never), e.g. a parameter every trial rejects. It
    stops at the first when the trial's command rejected an option that no trial varies (a `--set` value, a
    constant parameter or the sweep's command, `sweep_file.same_for_every_trial`): the rest would fail alike."""

    def __init__(self, limit: int, sweep: dict | None = None):
        self.limit, self.sweep, self.key, self.count, self.reason = limit, sweep, None, 0, ""
        self.rejected: str | None = None  # the option every trial is given alike and the command rejects

    def add(self, state: TrialState, reason: str | None) -> None:
        if state != TrialState.FAIL:
            self.key, self.count = None, 0
            return
        key = re.sub(r"\d+|/\S+", "#", reason or "")[:120]
        self.count = self.count + 1 if key == self.key else 1
        self.key, self.reason = key, reason or "no reason"
        option = rejected_option(self.reason)
        if self.sweep is not None and option and sf.same_for_every_trial(self.sweep, option):
            self.rejected = option

    def stopped(self) -> str | None:
        if self.limit and self.rejected:
            values = sf.spec_values((self.sweep.get("parameters") or {}).get(self.rejected) or {})
            given = f"--{self.rejected}" + (f"={values[0]}" if values else "")
            why = self.reason.removeprefix("exit code 2: error: ")
            return (f"stopped at the first failed trial: every trial is given the same {given} (a --set value, a "
                    f"constant parameter or the sweep's command) and the command rejects it: {why[:240]}")  # fmt: skip
        if self.limit and self.count >= self.limit:
            return (f"stopped after {self.count} trials in a row failed with the same reason "
                    f"(--max_failures_in_a_row {self.limit}): {self.reason[:200]}")  # fmt: skip
        return None


class Sweep:
    """Workers that ask the study for trials and run them until the budget is spent or a signal stops them."""

    def __init__(self, sweep: dict, opts: SweepOptions):
        self.sweep, self.opts = sweep, opts
        self.study_name = opts.study_name or base_name(opts, sweep)
        self.search = build_search(sweep, self.study_name)
        url = storage_url(opts, self.study_name)
        self.url = url
        try:
            self.lock = StudyLock(url, self.study_name)
            with self.lock:  # creating the tables and queueing the grid happen once
                storage.check_clock(url, opts.heartbeat)  # staleness needs one clock
                if warning := storage.network_filesystem_warning(url):
                    print(warning, file=sys.stderr)
                self.storage = open_storage(url, opts.heartbeat)
                close_study(url, opts.out_dir, self.study_name)  # SQLite makes its file 0644
                locked = self.lock.process is not None
                self.study = retrying(open_study, sweep, opts, self.storage, self.study_name, locked, self.search)
                if opts.retry_failed:
                    given_up = given_up_points(retrying(self.study.get_trials, False))
                    queued = retrying(retry_given_up, self.study, given_up)
                    print(f"--retry_failed: {queued} grid point(s) failed for good queued again")
                write_manifest(opts.out_dir, self.study_name, sweep, opts.file, url)  # what compare reads
        except ConfigError:  # already one line (a storage that cannot be opened, a study of another sweep file)
            raise
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, *storage.transient_errors()) as error:
            raise storage_error(url, error) from None
        storage.OUTAGE.configure(opts.storage_outage, 2 * opts.heartbeat + 5)  # then every live sweep has beaten
        self.display_failed = False
        self.errors: list[str] = []
        self.first_seen: dict[int, float] = {}  # trials seen RUNNING without a sweep's name (recover_dead_trials)
        self.heartbeats = Heartbeats(self.storage, opts.heartbeat, self.quietly)
        self.streak = FailureStreak(opts.max_failures_in_a_row, sweep)
        self.starter = TrialStarter(layout.study_dir(opts.out_dir, self.study_name), opts.cold_start, opts.warm_any)
        self.stop = threading.Event()
        self.stop_signal: int | None = None

    def stop_signal_name(self) -> str:
        return signal.Signals(self.stop_signal).name if self.stop_signal else "a stop request"

    def request_stop(self, signum: int, frame=None) -> None:
        self.stop_signal = self.stop_signal or signum
        self.stop.set()

    def quietly(self, action, *args):
        """A storage call that may fail (heartbeat, report, display): an outage is noted (its one line, never
        its limit: the workers' steps stop the sweep) and the next loop tries again. Its end is the workers'
        steps' to note: these actions may succeed without reaching the storage."""
        try:
            return action(*args)
        except Exception as error:
            if not storage.is_transient(error):
                raise
            storage.OUTAGE.failed(error, may_raise=False)
            return None

    def show(self, on_tick) -> None:
        """Refresh the live display, which never ends the sweep: a storage error is an outage the workers ride
        out, any other failure one warning line (the first), and the display is tried again next time."""
        try:
            self.quietly(on_tick, self.study)
        except Exception as error:
            if not self.display_failed:
                print(f"warning: live status: {storage.error_line(error)}; the sweep goes on", file=sys.stderr)
            self.display_failed = True

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None:
        with self.lock:
            if self.stop.is_set():
                return None
            judge = storage.OUTAGE.judging_heartbeats()  # not right after an outage, when no heartbeat was written
            recover_dead_trials(study, self.opts.max_retries, self.opts.heartbeat, self.first_seen, judge)
            if not budget_left(study, self.sweep):
                return None
            if self.search.terminator and self.search.terminator(study):  # the optimizer factory's stop rule
                return None
            trial = study.ask()
            self.own(study, trial)
            queued = QUEUED in internals.stored_trial(study, trial).system_attrs
            if self.sweep["method"] == "grid" and not queued:
                trial.set_user_attr("reason", "grid already covered by other workers")
                study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)  # lost a race for the last point
                self.heartbeats.release(internals.trial_id(trial))
                return None
            return trial

    def own(self, study: optuna.Study, trial: optuna.Trial) -> None:
        """Before anything else: a first heartbeat and who runs it, so the trial is never stranded; from now
        until its result is told, this process's heartbeat thread beats for it (waits for the lock included)."""
        storage.record_heartbeat(internals.storage_of(study), internals.trial_id(trial))
        self.heartbeats.hold(internals.trial_id(trial))
        for key, value in owner_attrs().items():
            trial.set_user_attr(key, value)

    def claim_siblings(self, study: optuna.Study, first: optuna.Trial) -> list[optuna.Trial]:
        """With --ensemble_seeds K: the queued trials of `first`'s grid point with other seeds (up to K - 1),
        taken for one seed-ensemble child (sweep/ensemble_run.py)."""
        taken = []
        with self.lock:
            for waiting in siblings(study, first, self.opts.ensemble_seeds):
                trial = internals.claim_waiting_trial(study, waiting)
                if trial is not None:
                    self.own(study, trial)
                    taken.append(trial)
        return taken

    def others_running(self, study: optuna.Study) -> bool:
        """Grid points another sweep process is running: this one waits for them instead of exiting, so a
        point whose process dies is re-queued (stale heartbeat) and finished here, and the exit status
        reports the whole grid."""
        if self.stop.is_set() or self.sweep["method"] != "grid":
            return False
        running = retrying(study.get_trials, False, (TrialState.RUNNING,))
        return any(QUEUED in t.system_attrs and owner_of(t.user_attrs).get("token") != TOKEN for t in running)

    def finish(self, study, trial, state, value=None, reason=None, requeue_as=None) -> None:
        """Tell the trial's result (skipped if another process already failed it) and re-queue it if asked."""

        def tell():
            with self.lock:
                if internals.stored_trial(study, trial).state.is_finished():
                    return  # another process found it stale, failed and re-queued it
                current = internals.stored_trial(study, trial)
                again = bool(requeue_as) and retries_left(current, self.opts.max_retries, requeue_as[1])
                note = reason
                if requeue_as and not again:
                    note = f"{reason[:220]}; not re-queued: --max_retries {self.opts.max_retries} reached"
                if note:
                    trial.set_user_attr("reason", note[:300])
                if again:  # first: killed before the tell, the trial stays RUNNING and recovery finds its retry
                    requeue(study, current, requeue_as[0], self.opts.max_retries, crashed=requeue_as[1])
                    failpoint("finish:requeued")
                try:
                    study.tell(trial, value, state=state)
                except optuna.exceptions.UpdateFinishedTrialError:
                    return  # another host's recovery failed it meanwhile
                if not (requeue_as and not requeue_as[1]):  # a stop signal's re-queue is not the trial's failure
                    self.streak.add(state, note)

        retrying(tell)
        self.heartbeats.release(internals.trial_id(trial))
        if self.streak.stopped() and not self.stop.is_set():
            self.errors.append(self.streak.stopped())
            self.stop.set()

    def worker(self, slot: int) -> None:
        try:
            sampler = self.search.make_sampler(self.opts.seed + slot)
            study = retrying(lambda: optuna.load_study(
                study_name=self.study_name, storage=self.storage, sampler=sampler, pruner=self.search.pruner,
            ))  # fmt: skip
            while (trial := retrying(self.next_trial, study)) is not None or self.others_running(study):
                if trial is None:  # another process runs the last points: wait, and take them over if it dies
                    self.stop.wait(min(2.0, self.opts.heartbeat))
                    continue
                group = [trial]
                try:
                    if self.opts.ensemble_seeds > 1:
                        group += retrying(self.claim_siblings, study, trial)
                    if len(group) > 1:
                        EnsembleRun(self, study, slot).run_group(group)
                    else:
                        TrialRun(self, study, slot).run(trial)
                except storage.StorageOutage:
                    raise  # the trials stay RUNNING; the next run finds their sweep process gone and retries them
                except Exception as error:  # a bug or a storage failure: the trials are failed, not stranded
                    for member in group:
                        self.fail_on_error(study, member, error)
                finally:
                    for member in group:
                        self.heartbeats.release(internals.trial_id(member))
        except Exception as error:  # reported by the main thread; a trial left RUNNING is recovered later
            if isinstance(error, storage.StorageOutage):
                self.stop.set()  # every worker stops its child: their results could not be told
            self.errors.append(f"worker {slot} stopped: {storage.error_line(error)}")

    def fail_on_error(self, study: optuna.Study, trial: optuna.Trial, error: Exception) -> None:
        """A trial whose run raised in this process: failed (re-queued for a storage error), never stranded."""
        if storage.is_transient(error):  # not the trial's fault: retried, not counted as a crash
            reason = f"storage error: {storage.error_line(error)}; re-queued"
            self.finish(study, trial, TrialState.FAIL, reason=reason, requeue_as=(reason, False))
        else:
            reason = f"sweep runner error: {storage.error_line(error)}"
            self.finish(study, trial, TrialState.FAIL, reason=reason)

    def run(self, on_tick=None) -> None:
        threads = [threading.Thread(target=self.worker, args=(slot,), daemon=True) for slot in range(self.opts.workers)]
        cpu = not self.opts.devices_per_trial  # GPU trials' threads feed their GPU: no claim on the cores
        claim = CoreClaim(self.opts.workers * trial_threads(self.opts), self.study_name) if cpu else nullcontext()
        self.heartbeats.start()
        try:
            with claim:
                for thread in threads:
                    thread.start()
                    time.sleep(0.2)  # stagger the first asks
                while any(thread.is_alive() for thread in threads):
                    if on_tick:
                        self.show(on_tick)
                    time.sleep(0.5)
        finally:
            self.heartbeats.close()
            self.starter.close()
            self.lock.close()
        if on_tick:
            self.show(on_tick)
