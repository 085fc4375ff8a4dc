"""The untouched test fold (issue 44.1): a `test/...` metric is reported as a run ended (`--value final`) and is
never a selection metric: `--value best`, a `--best-over` choice made on it, or a sweep file optimising it is one
line, whatever --allow_ood_selection says."""

import pytest
import yaml
from helpers import record

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main
from pe_sweeps.runs.records import write_record
from pe_sweeps.sweep import sweep_file as sf


def rec(encoding: str, seed: int, lr: float, val: float, test: float):
    config = {
        "seed_everything": seed,
        "trainer": {"max_steps": 100},
        "model": {"class_path": "M", "init_args": {"arch": {"encoding": encoding}, "lr": lr}},
        "data": {"class_path": "D", "init_args": {"preset": "mr"}},
    }
    final = {"val/acc": val, "test/acc": test}
    return record(name=f"mr-{encoding}-lr{lr}-s{seed}", group=f"mr/{encoding}", task="mr", encoding=encoding,
                  seed=seed, subcommand="fit", status="finished", config=config, final=final,
                  best={k: v + 0.01 for k, v in final.items()}, history=[], updated_at=1.0,
                  run_dir=f"out/runs/mr-{encoding}-lr{lr}-s{seed}")  # fmt: skip


@pytest.fixture
def out_dir(tmp_path):
    runs = [rec(e, s, lr, val=base + s / 100 + lr, test=base - s / 100 + 10 * lr)
            for e, base in (("rope", 0.8), ("alibi", 0.6)) for s in range(3) for lr in (1e-3, 1e-2)]  # fmt: skip
    for i, run in enumerate(runs):
        write_record(tmp_path / "runs" / f"run-{i}" / "record.json", run)
    return tmp_path


@pytest.mark.parametrize(
    "args, how",
    [
        (["--metric=test/acc", "--value=best"], "--value best picks each run's best evaluation of it"),
        (["--metric=test/acc", "--best-over=model.lr"], "--best-over model.lr is chosen on it"),
        (["--metric=test/acc,val/acc", "--best-over=model.lr"], "--best-over model.lr is chosen on it"),
        (["--metric=val/acc,test/acc", "--value=best", "--allow_ood_selection"], "--value best picks each run's"),
    ],
)
def test_selection_on_a_test_fold_metric_is_one_line(out_dir, args, how):
    with pytest.raises(ConfigError) as error:
        compare_main([f"--out_dir={out_dir}", *args])
    message = str(error.value)
    assert message.startswith(f"test/acc is the untouched test fold: {how}") and "\n" not in message
    assert message.endswith("select on a val/ metric (--metric val/...,test/...: --best-over chooses on the first)")


def test_the_test_fold_is_reported_as_the_runs_ended(out_dir):
    final = compare_main([f"--out_dir={out_dir}", "--metric=test/acc", "--rows=encoding,model.lr", "--format=json"])
    assert {key: cell.mean for key, cell in final.cells.items()} == pytest.approx(
        {
            (f"{e}, {lr}", "mr"): base - 0.01 + 10 * lr
            for e, base in (("rope", 0.8), ("alibi", 0.6))
            for lr in (0.001, 0.01)
        }
    )  # the runs' final test/acc: (base - s / 100 + 10 lr) averaged over s = 0, 1, 2
    val, test = compare_main([f"--out_dir={out_dir}", "--metric=val/acc,test/acc", "--best-over=model.lr"])
    # the learning rate is chosen on val/acc (1e-2 for both) and kept for test/acc
    assert test.cells["rope", "mr"].mean == pytest.approx(0.8 - 0.01 + 0.1) and val.cells["rope", "mr"].mean > 0.8


def test_a_sweep_optimising_a_test_fold_metric_is_refused(tmp_path):
    command = ["${env}", "${interpreter}", "${program}", "fit", "--run.test_at_end=true", "${args}"]
    sweep = {"program": "cli.py", "method": "grid", "metric": {"name": "test/acc", "goal": "maximize"},
             "parameters": {"model.arch.encoding": {"values": ["rope", "alibi"]}}, "command": command}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    with pytest.raises(ConfigError, match=r"metric 'test/acc' is a test-fold metric, which is reported at the end"):
        sf.load_sweep(path)
    sweep["metric"]["name"] = "val/acc"  # select on validation, report the test fold at each run's end
    path.write_text(yaml.safe_dump(sweep))
    assert sf.load_sweep(path)["metric"]["name"] == "val/acc"
