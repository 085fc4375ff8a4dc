"""The sweep manifest (runs/manifest.py): written beside the study, it is all `cli.py compare --sweep`
needs of the sweep, whatever storage holds the study; old sweeps without one still read from Optuna."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_compare import grid, rec, write_records

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main
from pe_sweeps.runs import manifest as M

ROOT = Path(__file__).resolve().parents[2]
SWEEP = {
    "name": "study",
    "method": "grid",
    "metric": {"name": "val/loss", "goal": "minimize"},
    "parameters": {
        "model.arch.encoding": {"values": ["rope"]},
        "model.lr": {"values": [0.001, 0.01]},
        "data.task": {"value": "copy"},
        "seed_everything": {"values": [0, 1]},
    },
}


def test_compare_reads_the_manifest_without_any_optuna_database(tmp_path, capsys):
    """The study lives in Redis (a password in its URL): compare reads the manifest and the run records only."""
    study = grid() + [rec("rope", seed=s, acc=0.3, lr=0.01) for s in range(2)]
    write_records(tmp_path, [replace(r, sweep="study") for r in study] + [rec("rope", acc=0.1, sweep="other")])
    M.write_manifest(tmp_path, "study", SWEEP, tmp_path / "study.yaml", "redis://user:s3cret@host:6379/0")
    text = M.manifest_path(tmp_path, "study").read_text()
    manifest = json.loads(text)
    assert "s3cret" not in text and "host" not in text and manifest["storage"] == "redis"
    assert manifest["schema_version"] == M.SCHEMA_VERSION and manifest["fingerprint"] == M.fingerprint(SWEEP)
    assert manifest["metrics"] == [{"name": "val/loss", "goal": "minimize"}]
    assert manifest["roles"] == {"model.arch.encoding": "encoding", "model.lr": "setting", "data.task": "task",
                                 "seed_everything": "seed"}  # fmt: skip
    assert manifest["sweep_file"] == str((tmp_path / "study.yaml").resolve())
    assert not list(tmp_path.rglob("optuna.db"))
    comp = compare_main([f"--out_dir={tmp_path}", "--sweep=study", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert comp.metric == data["metric"] == "val/loss" and data["rows"] == ["encoding", "model.lr"]
    assert comp.cells["rope, 0.01", "copy"].n == 2 and comp.cells["rope, 0.001", "copy"].n == 3


@pytest.mark.parametrize(
    "url, kind",
    [("sqlite:////x/optuna.db", "sqlite"), ("/x/journal.log", "journal"), ("redis://h:6379/1", "redis"),
     ("postgresql+psycopg://u:p@h/db", "postgresql"), ("mysql+pymysql://u:p@h/db", "mysql")],
)  # fmt: skip
def test_storage_kind_is_the_scheme_only(url, kind):
    assert M.storage_kind(url) == kind


def test_a_resume_keeps_the_reseed_rows_of_the_same_sweep_only(tmp_path):
    M.write_manifest(tmp_path, "s", SWEEP, "s.yaml", "/j.log")
    M.set_compare_rows(tmp_path, "s", "encoding,model.lr")
    M.write_manifest(tmp_path, "s", SWEEP, "s.yaml", "/j.log")  # the same sweep resumed
    assert M.read_manifest(tmp_path, "s")["compare_rows"] == "encoding,model.lr"
    M.write_manifest(tmp_path, "s", {**SWEEP, "method": "random"}, "s.yaml", "/j.log")
    assert M.read_manifest(tmp_path, "s")["compare_rows"] is None


@pytest.mark.parametrize(
    "text, why",
    [("{not json", "Expecting property name"), ("[1, 2]", "not a sweep manifest"),
     ('{"schema_version": 99, "parameters": {}}', "schema_version 99, this version reads 1 to 1")],
)  # fmt: skip
def test_a_malformed_manifest_is_one_line_naming_the_file(tmp_path, text, why):
    write_records(tmp_path, [rec(sweep="s")])
    path = M.manifest_path(tmp_path, "s")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"sweep manifest {path}: {why}"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=s"])
    assert M.read_manifest(tmp_path, "s", warn=False) is None


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_a_sweep_writes_its_manifest_and_compare_needs_no_study_database(tmp_path, storage, capsys):
    """A real sweep (fake trials): its manifest beside the trials; with the SQLite database deleted (or a
    journal file elsewhere, deleted too), `cli.py compare --sweep` still prints the sweep's comparison."""
    sweep = {"program": str(ROOT / "tests" / "fake_trial.py"), "method": "grid",
             "metric": {"name": "val/score", "goal": "maximize"}, "parameters": {"x": {"values": [0.2, 0.6]}},
             "command": ["${env}", "${interpreter}", "${program}", "--mode=quadratic", "${args}"]}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}"]
    if storage == "journal":
        argv.append(f"--storage={tmp_path / 'journal.log'}")
    result = subprocess.run(argv, cwd=ROOT, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = M.read_manifest(out, "s")
    assert manifest["storage"] == storage and manifest["roles"] == {"x": "setting"}
    if storage == "sqlite":  # the study's own digest of the sweep, as a resume checks it
        import optuna

        study = optuna.load_study(study_name="s", storage=f"sqlite:///{out / 'sweeps' / 's' / 'optuna.db'}")
        assert manifest["fingerprint"] == study.user_attrs["sweep_digest"]
    for database in [*out.rglob("optuna.db"), tmp_path / "journal.log"]:
        database.unlink(missing_ok=True)
    comp = compare_main([f"--out_dir={out}", "--sweep=s", "--format=json"])
    capsys.readouterr()
    assert comp.metric == "val/score" and comp.goal == "max" and comp.row_keys == ["encoding", "x"]
    assert sorted(comp.cells) == [("fake, 0.2", "fake"), ("fake, 0.6", "fake")]
    assert comp.is_best("fake, 0.2", "fake")  # val/score -(x - 0.3)^2: -0.01 beats -0.09


@pytest.mark.parametrize("sweep_file", ["quickstart.yaml", "chomsky.yaml"])
def test_the_study_and_its_manifest_hold_one_fingerprint(tmp_path, sweep_file):
    """One definition of the sweep's digest: the study's `sweep_digest` (what a resume is checked against) is the
    manifest's `fingerprint`, for the shipped sweep files."""
    import optuna

    from pe_sweeps.sweep import sweep_file as sf
    from pe_sweeps.sweep.options import SweepOptions
    from pe_sweeps.sweep.study_protocol import open_study

    path = ROOT / "sweeps" / sweep_file
    sweep = sf.load_sweep(path)
    study = open_study(sweep, SweepOptions(file=str(path)), optuna.storages.InMemoryStorage(), "s", locked=True)
    M.write_manifest(tmp_path, "s", sweep, path, "sqlite:///x.db")
    assert study.user_attrs["sweep_digest"] == M.read_manifest(tmp_path, "s")["fingerprint"]


def test_the_fingerprint_is_unchanged():
    """The digest the code computed before the study and the manifest shared one definition: a different value
    makes every existing study refuse to resume ("made from a different sweep file")."""
    assert M.fingerprint(SWEEP) == "a5efafc35eab795f"
