"""runs/records.py on hand-built trainers and folders: the record rewritten at every validation (final,
best by the metric's direction, history), the status of each way a run ends, the diverged-loss line, and
which run a `run:NAME` reference picks.

Claims of docs/training.md covered here:
- "record.json: identity (task, encoding, seed, sweep), status (running, finished, failed, diverged, interrupted),
  final and best value of every metric, and the validation history. It is rewritten at every validation, so a
  killed run keeps what it measured": test_record_is_rewritten_at_every_validation, test_status_of_each_ending
- "A non-finite training loss stops the run with one line saying the step and what to try, and the record says
  diverged": test_non_finite_loss_is_one_line_with_the_step_and_what_to_try, test_status_of_each_ending
- "--model.init_from takes ... run:NAME (the newest finished run of that name under the output directory;
  {encoding} and other model arguments are filled in ...)": test_run_reference_is_the_newest_finished_run_of_its_name
"""

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_modules.optim import check_finite
from pe_core.errors import ConfigError, DivergedError
from pe_sweeps.runs.record_writer import RecordWriter, status_of
from pe_sweeps.runs.records import (
    RECORD_FILE,
    SCHEMA_VERSION,
    RunRecord,
    find_checkpoint,
    load_records,
    read_record,
    write_record,
)


def trainer(step: int, **metrics: float) -> SimpleNamespace:
    """What RecordWriter reads from a Lightning trainer at the end of a validation."""
    return SimpleNamespace(
        callback_metrics={k: torch.tensor(v) for k, v in metrics.items()}, global_step=step, is_global_zero=True,
        sanity_checking=False, state=SimpleNamespace(fn="fit"), interrupted=False,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=step - 1)),
    )  # fmt: skip


def test_record_is_rewritten_at_every_validation(tmp_path):
    identity = {"name": "copy-rope-s0", "task": "copy", "encoding": "rope", "seed": 0, "sweep": None}
    record = RecordWriter(tmp_path, identity, {"model": {}})
    path = tmp_path / RECORD_FILE
    record.on_validation_end(trainer(10, **{"val/acc": 0.5, "val/loss": 2.0}), None)
    first = json.loads(path.read_text())  # on disk after the first validation: a killed run keeps it
    assert {k: first[k] for k in identity} == identity and first["status"] == "running"
    assert first["final"] == first["best"] == {"val/acc": 0.5, "val/loss": 2.0}
    assert first["history"] == [{"step": 10, "wandb_step": 9, "val/acc": 0.5, "val/loss": 2.0}]  # W&B: 1 less
    record.on_validation_end(trainer(20, **{"val/acc": 0.25, "val/loss": 1.0}), None)
    second = json.loads(path.read_text())
    assert second["final"] == {"val/acc": 0.25, "val/loss": 1.0}
    assert second["best"] == {"val/acc": 0.5, "val/loss": 1.0}  # max for accuracy, min for loss
    assert [h["step"] for h in second["history"]] == [10, 20]
    sanity = trainer(0, **{"val/acc": 1.0})
    sanity.sanity_checking = True
    record.on_validation_end(sanity, None)  # Lightning's sanity check is not a validation of the run
    assert json.loads(path.read_text())["history"] == second["history"]


def test_status_of_each_ending(tmp_path):
    assert status_of(DivergedError("train/loss is nan at step 3")) == "diverged"
    assert status_of(KeyboardInterrupt()) == "interrupted"
    assert status_of(type("SIGTERMException", (Exception,), {})()) == "interrupted"
    assert status_of(ValueError("boom")) == "failed"
    record = RecordWriter(tmp_path, {"name": "n"}, {})
    record.on_exception(trainer(7), None, DivergedError("train/loss is nan at step 7"))
    saved = json.loads((tmp_path / RECORD_FILE).read_text())
    assert saved["status"] == "diverged" and saved["global_step"] == 7 and "step 7" in saved["error"]


def test_non_finite_loss_is_one_line_with_the_step_and_what_to_try():
    check_finite(torch.tensor(1.5), step=3, lr=0.1)  # finite: nothing happens
    for bad in (float("nan"), float("inf")):
        with pytest.raises(DivergedError) as error:
            check_finite(torch.tensor(bad), step=42, lr=0.1)
        message = str(error.value)
        assert "\n" not in message and "step 42" in message
        assert "--model.lr" in message and "gradient_clip_val" in message


def fake_run(root: Path, folder: str, name: str, encoding: str, status: str, age: int) -> Path:
    run = root / "runs" / folder
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(b"x")
    os.utime(checkpoint, (1_000_000 - age, 1_000_000 - age))
    (run / RECORD_FILE).write_text(json.dumps({"name": name, "status": status, "encoding": encoding}))
    return checkpoint


def test_run_reference_is_the_newest_finished_run_of_its_name(tmp_path):
    fake_run(tmp_path, "old", "mlm-rope", "rope", "finished", age=200)
    newest = fake_run(tmp_path, "new", "mlm-rope", "rope", "finished", age=100)
    fake_run(tmp_path, "running", "mlm-rope", "rope", "running", age=0)  # newer, but not finished
    fake_run(tmp_path, "other", "mlm-alibi", "alibi", "finished", age=0)
    assert find_checkpoint("run:mlm-rope", str(tmp_path), {}) == str(newest)
    assert find_checkpoint("run:mlm-{encoding}", str(tmp_path), {"encoding": "rope"}) == str(newest)
    assert find_checkpoint("some/path.ckpt", str(tmp_path), {}) == "some/path.ckpt"  # a path is taken as given
    with pytest.raises(ConfigError, match="cannot fill"):
        find_checkpoint("run:mlm-{size}", str(tmp_path), {"encoding": "rope"})


# a record as `cli.py fit` wrote it before records had a schema version (and a key this version does not know)
OLD_RECORD = """{"name": "copy-rope-s0", "group": "pe-sweeps/copy/rope", "task": "copy", "encoding": "rope", "seed": 0,
 "distinct": {"model.lr": 0.001}, "sweep": null, "subcommand": "fit", "status": "finished",
 "config": {"model": {"init_args": {"lr": 0.001}}},
 "final": {"val/acc": 0.75}, "best": {"val/acc": 0.8}, "history": [{"step": 10, "val/acc": 0.75}],
 "world_size": 1, "precision": "32-true", "global_step": 10, "updated_at": 5.0, "sweep_params": "lr=0.001"}"""


def test_an_old_record_reads_into_the_typed_record_and_writes_back_unchanged(tmp_path):
    path = tmp_path / "run" / RECORD_FILE
    path.parent.mkdir()
    path.write_text(OLD_RECORD)
    record = read_record(path)
    assert isinstance(record, RunRecord) and record.schema_version == SCHEMA_VERSION
    assert (record.name, record.task, record.encoding, record.seed, record.status) == ("copy-rope-s0", "copy", "rope",
                                                                                       0, "finished")  # fmt: skip
    assert record.final == {"val/acc": 0.75} and record.history[0]["step"] == 10 and record.world_size == 1
    assert record.resumes == [] and record.wandb == {} and record.error is None  # absent then: defaults
    assert record.run_dir == str(path.parent) and record.extra == {"sweep_params": "lr=0.001"}
    assert record.distinct == {"model.lr": 0.001}  # a top-level key before it was a field: read into the field
    write_record(path, record)
    again = json.loads(path.read_text())
    assert {k: again[k] for k in json.loads(OLD_RECORD)} == json.loads(OLD_RECORD)  # nothing lost, unknown key kept
    assert again["schema_version"] == SCHEMA_VERSION and "run_dir" not in again
    assert read_record(path) == record


@pytest.mark.parametrize(
    "text, why",
    [("{not json", "Expecting property name"), ("[1]", "not a JSON object"),
     ('{"schema_version": 99}', f"schema_version 99: this version reads 0 to {SCHEMA_VERSION}"),
     ('{"final": [1, 2]}', "final is a list, not a dict"), ('{"status": 3}', "status 3 is not one of running"),
     ('{"final": {"val/acc": "high"}}', "final['val/acc'] is 'high', not a number"),
     ('{"best": {"val/acc": true}}', "best['val/acc'] is True, not a number"),
     ('{"history": [{"step": 1, "val/acc": 0.5}, {"step": 2, "val/acc": [0.5]}]}',
      "history[1]['val/acc'] is [0.5], not a number"), ('{"history": [3]}', "history[0] is 3, not a dict")],
)  # fmt: skip
def test_a_malformed_record_is_one_line_naming_the_file(tmp_path, capsys, text, why):
    good, bad = tmp_path / "a" / RECORD_FILE, tmp_path / "b" / RECORD_FILE
    for path, content in ((good, OLD_RECORD), (bad, text)):
        path.parent.mkdir()
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"^run record {bad}: {re.escape(why)}"):
        read_record(bad)
    assert read_record(bad, warn=False) is None  # a sweep polling a trial's record
    assert [r.name for r in load_records(tmp_path)] == ["copy-rope-s0"]  # a folder scan skips it, saying so
    assert f"warning: skipping unreadable run record {bad}: " in capsys.readouterr().err


def test_compare_skips_a_record_with_a_metric_that_is_not_a_number_saying_so(tmp_path, capsys, monkeypatch):
    """`"val/acc": "high"` in one record was compare's TypeError traceback (exit 1): that record is skipped with one
    warning line naming the file and the key, and the others are compared."""
    from helpers import cli_in_process

    for seed, acc in enumerate([0.75, 0.8, "high"]):
        record = json.loads(OLD_RECORD) | {"seed": seed, "final": {"val/acc": acc}, "best": {"val/acc": acc}}
        path = tmp_path / "runs" / f"run-{seed}" / RECORD_FILE
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))
    code, out, err = cli_in_process(["compare", f"--out_dir={tmp_path}", "--metric=val/acc", "--format=json"],
                                    capsys, monkeypatch, tmp_path)  # fmt: skip
    bad = tmp_path / "runs" / "run-2" / RECORD_FILE
    assert code == 0 and err.splitlines() == [
        f"warning: skipping unreadable run record {bad}: final['val/acc'] is 'high', not a number"
    ], err
    assert json.loads(out)["cells"][0]["n"] == 2
