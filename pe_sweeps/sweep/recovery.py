"""Retries and dead trials. A failed trial's retry (`requeue`) is a queued copy of it that remembers its
predecessors (`retry_history`) and how many of them crashed (`CRASHES`, capped by --max_retries); a
RUNNING trial whose sweep process died is failed and re-queued (`recover_dead_trials`): at once on the same
host (`HOST_ID`, its pid is gone), elsewhere once its heartbeat is stale. A retry is always queued before
the failure is written, so a kill between the two loses nothing (`repair_promised_retries`)."""

import os
import socket
import time
import uuid
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from pe_sweeps import internals
from pe_sweeps.failpoints import failpoint
from pe_sweeps.storages import storage
from pe_sweeps.storages.storage import grace_period
from pe_sweeps.sweep.children import pid_alive, process_started

CRASHES = "pe_crashes"  # system attr: how many predecessors of this retry had their child die or crash
TOKEN = uuid.uuid4().hex  # this sweep process, unlike a pid, is never reused
# the one user attribute naming the sweep process that runs a trial ({"host_id", "pid", "pid_started", "token"}):
# optuna-dashboard lists every user attribute, and these four are bookkeeping, not the user's
OWNER = "_pe"
OWNER_KEYS = ("host_id", "pid", "pid_started", "token")


def host_id() -> str:
    """This machine and pid namespace: containers that share a hostname differ in boot id or pid namespace."""
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(path) if path.endswith("/pid") else Path(path).read_text().strip())
        except OSError:
            pass
    return "/".join(parts)


HOST_ID = host_id()


def owner_attrs() -> dict:
    """The user attributes a trial gets as this sweep process takes it: the host (shown to users) and, under
    `OWNER`, what recovery needs to tell whether its process still runs."""
    pid = os.getpid()
    return {"host": socket.gethostname(),
            OWNER: {"host_id": HOST_ID, "pid": pid, "pid_started": process_started(pid), "token": TOKEN}}  # fmt: skip


def owner_of(attrs: dict) -> dict:
    """Which sweep process runs a trial, from its user attributes: `OWNER`, or the same keys at the top level in a
    study written before they were put under it ({} when neither: its sweep died before naming itself)."""
    return dict(attrs.get(OWNER) or {k: attrs[k] for k in OWNER_KEYS if k in attrs})


def predecessors(study: optuna.Study, trial_id: int) -> list[FrozenTrial]:
    """The trials this one retries (its retry history), the latest first."""
    store = internals.storage_of(study)
    history = store.get_trial(trial_id).system_attrs.get("retry_history") or []
    ids = [store.get_trial_id_from_study_id_trial_number(internals.study_id(study), n) for n in reversed(history)]
    return [store.get_trial(i) for i in ids]


def retries_left(trial: FrozenTrial, max_retries: int, crashed: bool) -> bool:
    """Interruptions and dead sweep processes are not the trial's fault and do not count as retries."""
    return trial.system_attrs.get(CRASHES, 0) + crashed <= max_retries


def requeue(study: optuna.Study, trial: FrozenTrial, why: str, max_retries: int, crashed: bool = False) -> bool:
    """Queue a copy of the failed `trial` (same parameters and grid id; `why` in its reason) unless its
    child has died or crashed more than `max_retries` times."""
    if not retries_left(trial, max_retries, crashed):
        return False
    if any(trial.number in t.system_attrs.get("retry_history", []) for t in study.get_trials(deepcopy=False)):
        return True  # queued already (by this trial's own sweep just before it was told, or a repeated call)
    attrs = {**trial.system_attrs, CRASHES: trial.system_attrs.get(CRASHES, 0) + crashed}
    attrs["failed_trial"] = attrs.get("failed_trial", trial.number)
    attrs["retry_history"] = [*attrs.get("retry_history", []), trial.number]
    study.add_trial(optuna.create_trial(
        state=TrialState.WAITING, params=trial.params, distributions=trial.distributions, system_attrs=attrs,
        user_attrs={"reason": f"retry of trial {trial.number}: {why}"[:300]},
    ))  # fmt: skip
    return True


def recover_dead_trials(
    study: optuna.Study,
    max_retries: int,
    heartbeat: int,
    first_seen: dict[int, float] | None = None,
    judge_heartbeats: bool = True,
) -> None:
    """Fail and re-queue RUNNING trials whose sweep process is gone: at once on this host and pid namespace
    (its pid is gone, or is now another process), on any host once their heartbeat is stale (judged on the
    storage's clock, storages/storage.py), and a trial that never got its sweep's name and first heartbeat
    after a grace period on this process's own clock (`first_seen`: when this process first saw it so).
    Then re-queue the retry of any failed trial that promised one and has none (`repair_promised_retries`).
    `judge_heartbeats` False (right after a storage outage, when no sweep could write one): none is stale."""
    grace, first_seen = grace_period(heartbeat), {} if first_seen is None else first_seen
    store, study_id = internals.storage_of(study), internals.study_id(study)
    stale = set(storage.stale_trial_ids(store, study_id)) if judge_heartbeats else set()
    trials = study.get_trials(deepcopy=False)
    for trial in (t for t in trials if t.state == TrialState.RUNNING):
        who, trial_id = owner_of(trial.user_attrs), internals.trial_id(trial)
        same_host = who.get("host_id") == HOST_ID and who.get("token") != TOKEN
        where = f"host {trial.user_attrs.get('host', '?')}, pid {who.get('pid', '?')}"
        if same_host and (who.get("pid") == os.getpid() or not sweep_alive(who)):
            why = f"sweep process died ({where})"
        elif trial_id in stale:
            why = f"no heartbeat for {grace} s from its sweep process ({where})"
        elif "token" not in who and time.monotonic() - first_seen.setdefault(trial_id, time.monotonic()) > grace:
            why = "sweep process died before the trial's first heartbeat"
        else:
            continue
        fail_and_requeue(study, trial, why, max_retries)
    repair_promised_retries(study, study.get_trials(deepcopy=False), max_retries)


def sweep_alive(attrs: dict) -> bool:
    """Whether the sweep process a trial's `owner_of` names (on this host) still runs: its pid, and its start time
    (`pid_started`) so that a later process given the same pid is not taken for it; a trial written before the
    start time was recorded is judged by its pid alone."""
    return pid_alive(attrs.get("pid", -1), attrs.get("pid_started"))


def fail_and_requeue(study: optuna.Study, trial: FrozenTrial, why: str, max_retries: int) -> None:
    """Mark a dead trial failed with its reason and queue its retry. The retry is queued first: a kill
    between the two leaves the trial RUNNING with its retry queued, and the next recovery fails it without
    queueing a second one (`requeue` finds the first)."""
    again = retries_left(trial, max_retries, crashed=False)
    reason = f"{why}; re-queued" if again else f"{why}; not re-queued: --max_retries {max_retries} reached"
    try:
        internals.storage_of(study).set_trial_user_attr(internals.trial_id(trial), "reason", reason[:300])
        if again:
            requeue(study, trial, why, max_retries)
            failpoint("recover:requeued")
        internals.storage_of(study).set_trial_state_values(internals.trial_id(trial), TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:  # another process was first
        pass


def repair_promised_retries(study: optuna.Study, trials: list[FrozenTrial], max_retries: int) -> int:
    """Queue the missing retry of every failed trial whose reason says it was re-queued (a study written by
    an older version, which failed the trial before queueing its retry, or a kill between the two).
    Returns how many were queued."""
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    queued = 0
    for trial in trials:
        reason = trial.user_attrs.get("reason", "")
        if trial.state == TrialState.FAIL and reason.endswith("re-queued") and "not re-queued" not in reason:
            if trial.number not in retried:
                queued += requeue(study, trial, f"{reason.removesuffix('; re-queued')} (retry restored)", max_retries)
    return queued


def retry_given_up(study: optuna.Study, given_up: list[FrozenTrial]) -> int:
    """`--retry_failed`: queue a retry of each of these grid points' latest trials, failed for good, with a fresh
    --max_retries (it resumes from their last checkpoint, as any retry does). A point whose retry another
    process queued meanwhile is skipped. Returns how many were queued."""
    retried = {n for t in study.get_trials(deepcopy=False) for n in t.system_attrs.get("retry_history", [])}
    queued = 0
    for trial in (t for t in given_up if t.number not in retried):
        attrs = {**trial.system_attrs, CRASHES: 0, "failed_trial": trial.system_attrs.get("failed_trial", trial.number)}
        attrs["retry_history"] = [*trial.system_attrs.get("retry_history", []), trial.number]
        study.add_trial(optuna.create_trial(
            state=TrialState.WAITING, params=trial.params, distributions=trial.distributions, system_attrs=attrs,
            user_attrs={"reason": f"retry of trial {trial.number} (--retry_failed), failed for good: "
                                  f"{trial.user_attrs.get('reason', 'no reason')}"[:300]},
        ))  # fmt: skip
        queued += 1
    return queued
