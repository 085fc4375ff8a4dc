"""What W&B's runs table, parallel coordinates and sweeps read of a run (issue 45, point 4): a plain `val/acc`
summary is the run's final value (W&B shows a `{"max", "last"}` summary as `val/acc.max` / `val/acc.last`
columns and no `val/acc` number), the best value is a key of its own (`best/val/acc`); standard errors, example
counts and per-length values are hidden from the automatic panels and never summarised as a min or max;
`train/lr` is its last value. Under a W&B agent (its config locked by "sweep") no config update is refused with a
warning, and the run's project is the run's (`--run.project`, "pe-sweeps"), not the checkout's folder name.

The unit tests use the fake run of tests/helpers.py (and wandb's own Config, locked as an agent locks it); one
real offline fit under a faked agent checks the run file itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY
from helpers import FakeRun, offline_run_records
from helpers import record as make_record

from pe_sweeps.runs import wandb_setup as ws

ROOT = Path(__file__).resolve().parents[2]
HEADLINE = ("val/acc", "val/acc_ood", "val/loss", "val/tok_acc", "test/acc")
DIAGNOSTIC = ("val/acc_se", "val/acc_ood_se", "val/examples", "val/acc_se_len_3", "val/tok_acc_len_3",
              "val/acc_len_3", "val/ppl_ctx_128")  # fmt: skip


class Logger(ws.DirectedWandbLogger):
    """DirectedWandbLogger writing to a fake run (no W&B process)."""

    def __init__(self, run: FakeRun, best: dict | None = None):
        super().__init__(project="p", best=best)  # starts no W&B run: WandbLogger's `experiment` does
        self.run = run

    @property
    def experiment(self):
        return self.run


def logged(values: list[dict]) -> FakeRun:
    run = FakeRun()
    logger = Logger(run)
    for step, metrics in enumerate(values):
        logger.log_metrics(metrics, step=step)
    return run


@pytest.mark.parametrize("key", HEADLINE + ("train/loss", "train/lr"))
def test_a_metric_summarises_as_its_final_value(key):
    """W&B's default summary (no `summary=`) is the plain last value; any `summary=` makes it a dict."""
    run = logged([{key: 0.5}])
    assert run.defined[key].get("summary") is None, run.defined[key]
    assert run.defined[key]["step_metric"] == ws.STEP and not run.defined[key].get("hidden")


@pytest.mark.parametrize("key", DIAGNOSTIC)
def test_standard_errors_counts_and_per_length_values_are_hidden_and_not_min_or_max(key):
    run = logged([{key: 0.1}])
    assert run.defined[key]["hidden"] is True
    assert run.defined[key].get("summary") is None, run.defined[key]  # no `min: 0` standard error
    assert not any(k.startswith("best/") for k in run.summary)


@pytest.mark.parametrize(
    "key, values, best",
    [("val/acc", [0.2, 0.7, 0.4], 0.7), ("val/loss", [3.0, 1.0, 2.0], 1.0), ("val/acc_ood", [0.1, 0.0], 0.1)],
)
def test_the_best_value_is_a_summary_key_of_its_own(key, values, best):
    run = logged([{key: v} for v in values])
    assert run.summary[f"best/{key}"] == best
    assert [row[key] for row in run.logged] == values  # the history (and so the plain summary) is every value


def test_a_resumed_run_keeps_the_best_of_its_earlier_part():
    run = FakeRun()
    logger = Logger(run, best={"val/acc": 0.9, "val/loss": 0.5, "val/acc_se": 0.0})
    logger.log_metrics({"val/acc": 0.6, "val/loss": 0.4, "val/acc_se": 0.01}, step=10)
    assert run.summary == {"best/val/acc": 0.9, "best/val/loss": 0.4}


def test_compare_reads_final_and_best_back_from_plain_summaries():
    """runs/wandb_records.py reads what the logger writes, and still the `{"last", "max"}` of older runs."""
    from pe_sweeps.runs.wandb_records import wandb_values

    summary = {"val/acc": 0.4, "best/val/acc": 0.7, "val/acc_se": 0.05, "val/loss": {"last": 2.0, "min": 1.0}}
    final, best = wandb_values(summary, [])
    assert final == {"val/acc": 0.4, "val/acc_se": 0.05, "val/loss": 2.0}
    assert best["val/acc"] == 0.7 and best["val/loss"] == 1.0 and "best/val/acc" not in final


def test_an_agents_locked_config_is_not_updated(monkeypatch):
    """A W&B agent's run locks the keys of its sweep config (`seed_everything`, the swept parameters): updating
    one prints "Config item ... was locked by 'sweep'" in every run. describe_run leaves them as the agent set them."""
    import wandb
    from wandb.sdk.wandb_config import Config

    run = FakeRun()
    run.config = Config()
    run.config.update_locked({"seed_everything": 2, "lr": 0.002}, user="sweep")
    warned = []
    monkeypatch.setattr(wandb, "termwarn", lambda message, *args, **kwargs: warned.append(message))
    monkeypatch.setattr(ws, "wandb_run", lambda trainer: run)
    monkeypatch.setenv("PE_SWEEP_PARAMS", '{"model.lr": 0.002, "seed_everything": 2}')
    ws.describe_run(None, make_record(task="copy", encoding="rope", seed=2, config={}))
    assert warned == []
    assert run.config["seed_everything"] == 2 and run.config["seed"] == 2 and run.config["encoding"] == "rope"


@pytest.mark.slow
def test_an_offline_fit_under_an_agent_summarises_final_values_in_its_own_project(tmp_path):
    """A real offline fit as a W&B agent starts it (WANDB_SWEEP_ID and the agent's parameter file, no
    WANDB_PROJECT): read back from the run's .wandb file."""
    from wandb.sdk.lib.config_util import save_config_file_from_dict

    from pe_sweeps.runs.records import load_records

    params = tmp_path / "sweep-abc" / "config-r1.yaml"
    save_config_file_from_dict(str(params), {"seed_everything": {"value": 2}, "model.lr": {"value": 0.002}})
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "WANDB_SWEEP_ID": "abc",
           "WANDB_SWEEP_PARAM_PATH": str(params)}  # fmt: skip
    env.pop("WANDB_PROJECT", None)
    result = subprocess.run(
        [sys.executable, "cli.py", "fit", *TINY, f"--run.out_dir={tmp_path / 'out'}", "--seed_everything=2",
         "--model.lr=0.002"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "was locked by" not in output and "Ignoring project" not in output, output[-3000:]
    (record,) = load_records(tmp_path / "out")
    assert record.wandb["path"].startswith("pe-sweeps/")
    (run_dir,) = Path(record.run_dir).glob("wandb/offline-run-*")
    records = offline_run_records(run_dir)
    if records is None:
        pytest.skip("`wandb leet inspect` is not available: the rest reads the .wandb log through it")
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "pe-sweeps" and run["sweep_id"] == "abc"
    summary = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update", {}))
    for key in ("val/acc", "val/loss", "val/acc_ood", "train/lr", "val/acc_se", "val/examples", "val/acc_se_len_3"):
        assert isinstance(summary[key], (int, float)), (key, summary[key])
    assert summary["val/acc"] == pytest.approx(record.final["val/acc"])
    assert summary["best/val/acc"] == pytest.approx(record.best["val/acc"])
    assert summary["best/val/loss"] == pytest.approx(record.best["val/loss"])
    assert not any(k.startswith("best/") and ("_se" in k or "examples" in k or "_len_" in k) for k in summary)
    metrics = {r["metric"].get("name"): r["metric"] for r in records if r["type"] == "metric"}
    for key in ("val/acc_se", "val/acc_ood_se", "val/examples", "val/acc_se_len_3", "val/acc_len_3"):
        assert metrics[key]["options"].get("hidden"), key
    assert not metrics["val/acc"].get("options", {}).get("hidden")
    assert not any(set(m.get("summary", {})) & {"min", "max"} for m in metrics.values())
