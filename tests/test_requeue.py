"""Re-queueing a failed grid point is idempotent (a trial with a retry is never queued twice), and a point
failed for good is left alone. In-memory studies, no processes."""

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tracking.sweep import QUEUED, recover_dead_trials, requeue


def grid_study(state: TrialState, reason: str) -> optuna.Study:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.create_trial(
        state=state, params={"x": 1}, distributions={"x": CategoricalDistribution([1, 2])},
        system_attrs={QUEUED: True, "grid_id": 0}, user_attrs={"reason": reason}, value=None,
    ))  # fmt: skip
    return study


def waiting(study: optuna.Study) -> list:
    return [t for t in study.get_trials() if t.state == TrialState.WAITING]


def test_requeue_twice_queues_one_retry():
    study = grid_study(TrialState.FAIL, "killed")
    (failed,) = study.get_trials()
    assert requeue(study, failed, "killed", max_retries=2, crashed=True)
    assert requeue(study, failed, "killed", max_retries=2, crashed=True)  # e.g. a retried storage call
    (retry,) = waiting(study)
    assert retry.params == {"x": 1} and retry.system_attrs["retry_history"] == [0]


def test_a_point_failed_for_good_is_left_alone():
    study = grid_study(TrialState.FAIL, "error: dim must be divisible by num_heads")
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    assert waiting(study) == []
