"""Issue 44, point 6: a cell whose model never learned the task is not ranked like any other. A precondition per
column (the sweep file's `compare: {precondition: ...}` or --precondition: `METRIC OP NUMBER`, per column
`COL:METRIC OP NUMBER`, or `baseline`: beating the task's best constant output), judged on the cell's
in-distribution metric; a cell that fails it is marked in every format, has no rank, its pairs say "precondition
failed" (outside the Holm family) and its row is left out of the mean rank, MRR and IQM.

Claims of docs/compare.md covered here:
- "a failed cell is marked (table, markdown, LaTeX: a mark and a legend line; csv and json: precondition_ok)":
  test_a_failed_cell_is_marked_in_every_format
- "its pairs say precondition failed and leave the family; its row leaves the across-column aggregates; it has no
  rank": test_a_failed_cell_leaves_the_verdicts_ranks_and_aggregates
- "declared in the sweep file or with --precondition; per column COL:...": test_the_precondition_is_declared_in_the_
  sweep_file_or_with_the_option, test_a_per_column_precondition_applies_to_its_column_only
- "a bad precondition is one line naming the syntax; a beyond-training-length metric is refused":
  test_a_bad_precondition_is_one_line, test_a_sweep_files_precondition_is_checked
- "baseline: the cell's interval lies above the task's best constant output (val/acc_constant)":
  test_baseline_precondition_needs_the_interval_above_the_constant_output
"""

import csv
import io
import json

import pytest
import yaml
from helpers import record as make_record

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.preconditions import parse_preconditions
from pe_sweeps.compare.statistics import compare_metrics
from pe_sweeps.runs.manifest import write_manifest
from pe_sweeps.runs.records import write_record
from pe_sweeps.sweep import sweep_file as sf

SWEEP = {"program": "cli.py", "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
         "parameters": {"model.arch.encoding": {"values": ["rope", "alibi", "none"]}},
         "command": ["${env}", "${interpreter}", "${program}", "fit", "${args}"]}  # fmt: skip
# none never learned reverse: a constant model's share of the short examples, over every seed (the run)
VALUES = {
    ("rope", "copy"): [0.95, 0.96, 0.97],
    ("alibi", "copy"): [0.91, 0.92, 0.93],
    ("none", "copy"): [0.97, 0.98, 0.99],
    ("rope", "reverse"): [0.93, 0.94, 0.95],
    ("alibi", "reverse"): [0.90, 0.91, 0.92],
    ("none", "reverse"): [0.2062, 0.2055, 0.2055],
}


def rec(encoding: str, task: str, seed: int, metrics: dict, sweep: str | None = None):
    config = {
        "seed_everything": seed,
        "trainer": {"max_steps": 100},
        "model": {"class_path": "M", "init_args": {"arch": {"encoding": encoding}, "lr": 1e-3}},
        "data": {"class_path": "D", "init_args": {"task": task, "train_max_len": 4}},
    }
    return make_record(name=f"{task}-{encoding}-s{seed}", group=f"{task}/{encoding}", task=task, encoding=encoding,
                       seed=seed, sweep=sweep, subcommand="fit", status="finished", config=config, final=metrics,
                       best=metrics, history=[], updated_at=1.0,
                       run_dir=f"out/runs/{task}-{encoding}-s{seed}")  # fmt: skip


def runs(values: dict = VALUES, sweep: str | None = None, constant: float | None = None) -> list:
    extra = {} if constant is None else {"val/acc_constant": constant}
    return [rec(e, t, s, {"val/acc": v, "val/acc_ood": v / 2, **extra}, sweep)
            for (e, t), vs in values.items() for s, v in enumerate(vs)]  # fmt: skip


def write_records(root, records) -> None:
    for i, record in enumerate(records):
        write_record(root / "runs" / f"run-{i}" / "record.json", record)


def test_a_failed_cell_leaves_the_verdicts_ranks_and_aggregates():
    (before,) = compare_metrics(runs(), ["val/acc"])
    assert before.ranks["none", "reverse"] == 3 and "none" in before.mean_rank and before.protocol.family == 6
    (comp,) = compare_metrics(
        runs(), ["val/acc"], preconditions=parse_preconditions("val/acc >= 0.9", "--precondition")
    )
    assert set(comp.failed) == {("none", "reverse")} and "0.2057 < 0.9" in comp.failed["none", "reverse"]
    assert ("none", "reverse") not in comp.ranks and comp.ranks["none", "copy"] == 1  # a passing cell keeps its rank
    assert comp.ranks["rope", "reverse"] == 1 and comp.ranks["alibi", "reverse"] == 2
    verdicts = {(p["a"], p["b"]): p["verdict"] for p in comp.pairs["reverse"]}
    assert verdicts[("rope", "none")] == verdicts[("alibi", "none")] == "precondition failed"
    assert verdicts[("rope", "alibi")] in ("better", "inconclusive")
    assert comp.protocol.family == 4  # 3 pairs in copy, 1 in reverse: the failed cell's pairs are not tests
    assert "none" not in comp.mean_rank and "none" not in comp.mrr and "none" not in comp.iqm
    assert set(comp.mean_rank) == {"rope", "alibi"} and comp.mean_rank["rope"] == 1.0
    assert comp.is_best("rope", "reverse") and not comp.is_best("none", "reverse")


@pytest.mark.parametrize("fmt", ["table", "markdown", "latex", "csv", "json"])
def test_a_failed_cell_is_marked_in_every_format(tmp_path, capsys, fmt):
    write_records(tmp_path, runs())
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", f"--format={fmt}", "--precondition=val/acc >= 0.9"])
    out = capsys.readouterr().out
    if fmt == "json":
        data = json.loads(out)
        ok = {(c["row"], c["col"]): c["precondition_ok"] for c in data["cells"]}
        assert ok.pop(("none", "reverse")) is False and all(ok.values())
        failed = next(c for c in data["cells"] if c["row"] == "none" and c["col"] == "reverse")
        assert failed["rank"] is None and "0.2057 < 0.9" in failed["precondition_failed"]
        assert data["precondition"] == ["val/acc >= 0.9"] and data["protocol"]["family_size"] == 4
        assert {p["verdict"] for p in data["pairs"]["reverse"] if "none" in (p["a"], p["b"])} == {"precondition failed"}
    elif fmt == "csv":
        rows = {(r["encoding"], r["task"]): r for r in csv.DictReader(io.StringIO(out))}
        assert rows["none", "reverse"]["precondition_ok"] == "False" and rows["none", "reverse"]["rank"] == ""
        assert rows["none", "copy"]["precondition_ok"] == "True"
    else:
        flat = " ".join(out.split())  # the table wraps its caption to the terminal
        assert "✗" in out or r"$\times$" in out  # the failed cell's mark
        assert "fails the precondition val/acc >= 0.9" in flat.replace("$>=$", ">=")
        assert "rope vs none: precondition failed" in flat or "precondition failed" in flat


def test_the_precondition_is_declared_in_the_sweep_file_or_with_the_option(tmp_path, capsys):
    sweep = {**SWEEP, "compare": {"precondition": "val/acc >= 0.9"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    write_manifest(tmp_path, "s", sf.load_sweep(path), path, "sqlite:///x.db")
    write_records(tmp_path, runs(sweep="s"))
    compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--format=json"])
    data = json.loads(capsys.readouterr().out)["comparisons"][0]  # val/acc and val/acc_ood side by side
    assert data["precondition"] == ["val/acc >= 0.9"] and data["precondition_source"] == "in the sweep file"
    assert [(c["row"], c["col"]) for c in data["cells"] if not c["precondition_ok"]] == [("none", "reverse")]
    compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--format=json", "--precondition=val/acc >= 0.1"])
    data = json.loads(capsys.readouterr().out)["comparisons"]
    assert data[0]["precondition_source"] == "with --precondition on the command line"
    assert all(c["precondition_ok"] for c in data[0]["cells"])
    # the beyond-length companion's cells follow the in-distribution precondition (its own values are halved)
    compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--format=json"])
    ood = json.loads(capsys.readouterr().out)["comparisons"][1]
    assert ood["metric"] == "val/acc_ood"
    assert [(c["row"], c["col"]) for c in ood["cells"] if not c["precondition_ok"]] == [("none", "reverse")]


def test_a_per_column_precondition_applies_to_its_column_only():
    both = parse_preconditions("val/acc >= 0.5, copy:val/acc > 0.975", "--precondition")
    (comp,) = compare_metrics(runs(), ["val/acc"], preconditions=both)
    assert set(comp.failed) == {("none", "reverse"), ("rope", "copy"), ("alibi", "copy")}
    with pytest.raises(ConfigError, match=r"^--precondition 'sort:val/acc >= 0.5': no column 'sort'; columns: copy, "
                                          r"reverse$"):  # fmt: skip
        compare_metrics(runs(), ["val/acc"], preconditions=parse_preconditions("sort:val/acc >= 0.5", "--precondition"))


def test_a_sweep_files_precondition_for_a_column_without_runs_yet_is_skipped_with_a_note(capsys):
    """One part of an atlas (a `--set` study) or an unfinished sweep has no runs of some tasks the file declares
    preconditions for: compare goes on with the columns it has and says so in one line."""
    declared = parse_preconditions("copy:val/acc > 0.975, sort:val/acc >= 0.5", "sweep file compare.precondition")
    (comp,) = compare_metrics(runs(), ["val/acc"], preconditions=declared)
    assert set(comp.failed) == {("rope", "copy"), ("alibi", "copy")}
    note = capsys.readouterr().err.strip()
    assert note.startswith("note: 1 column(s)") and "(sort)" in note and "\n" not in note


@pytest.mark.parametrize(
    "text, message",
    [
        ("val/acc ~ 0.9", "'val/acc ~ 0.9': a precondition is METRIC OP NUMBER"),
        ("val/acc >= high", "'val/acc >= high': a precondition is METRIC OP NUMBER"),
        ("", "'': a precondition is METRIC OP NUMBER"),
    ],
)
def test_a_bad_precondition_is_one_line(tmp_path, text, message):
    write_records(tmp_path, runs())
    expected = "^--precondition " + message + r" \(OP: >=, >, <=, <\), COL:METRIC OP NUMBER for one column, or baseline"
    with pytest.raises(ConfigError, match=expected) as error:
        compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", f"--precondition={text}"])
    assert "\n" not in str(error.value)


def test_a_precondition_on_a_beyond_training_length_metric_is_refused(tmp_path):
    write_records(tmp_path, runs())
    with pytest.raises(
        ConfigError,
        match=r"^--precondition 'val/acc_ood >= 0.5': val/acc_ood is measured beyond the "
        r"training length; a precondition is judged on an in-distribution metric",
    ):
        compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--precondition=val/acc_ood >= 0.5"])
    with pytest.raises(ConfigError, match=r"^--precondition 'val/nope >= 0.5': no run has val/nope"):
        compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--precondition=val/nope >= 0.5"])


@pytest.mark.parametrize(
    "block, message",
    [
        (
            {"precondition": "val/acc => 0.9"},
            "compare.precondition 'val/acc => 0.9': a precondition is METRIC OP NUMBER",
        ),
        ({"precondition": 0.9}, "compare.precondition 0.9: a precondition is METRIC OP NUMBER"),
        ({"alpha": 0.1}, "compare key 'alpha' is unknown; known: margin, precondition, primary"),
    ],
)
def test_a_sweep_files_precondition_is_checked(tmp_path, block, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, "compare": {"precondition": ["val/acc >= 0.9", "copy:val/acc > 0.5"]}}))
    assert sf.load_sweep(path)["compare"]["precondition"] == ["val/acc >= 0.9", "copy:val/acc > 0.5"]
    path.write_text(yaml.safe_dump({**SWEEP, "compare": block}))
    with pytest.raises(ConfigError, match="^sweep file .*: " + message.replace("(", r"\(").replace(")", r"\)")):
        sf.load_sweep(path)


def test_baseline_precondition_needs_the_interval_above_the_constant_output():
    """`baseline`: the cell's interval of val/acc lies wholly above the runs' val/acc_constant (the accuracy of the
    best constant output, which the synthetic tasks log); none's 0.2062 / 0.2055 / 0.2055 against a constant model's
    0.2055 does not, though its mean is above it."""
    (comp,) = compare_metrics(
        runs(constant=0.2055), ["val/acc"], preconditions=parse_preconditions("baseline", "--precondition")
    )
    assert set(comp.failed) == {("none", "reverse")}
    assert "does not beat the best constant output 0.2055" in comp.failed["none", "reverse"]
    (comp,) = compare_metrics(
        runs(constant=0.1), ["val/acc"], preconditions=parse_preconditions("baseline", "--precondition")
    )
    assert not comp.failed
    with pytest.raises(ConfigError, match=r"^--precondition 'baseline': no run has val/acc_constant"):
        compare_metrics(runs(), ["val/acc"], preconditions=parse_preconditions("baseline", "--precondition"))
