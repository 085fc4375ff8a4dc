"""`fit --run.ensemble_seeds K` (pe_sweeps/runs/ensemble_fit.py): K seeds trained as one seed ensemble leave K
ordinary runs, each equal to the solo run of its seed (to float32 rounding: lightning_modules/ensemble.py), and
`compare` sees them as K seeds."""

import json

import pytest
from conftest import TINY

from pe_sweeps.cli import cli_main
from pe_sweeps.runs.records import load_records

TOL = 1e-4  # validation metrics after 4 steps: vmap reassociates float32 sums (tests/models/test_ensemble.py)


@pytest.mark.slow
def test_an_ensemble_writes_one_ordinary_run_per_seed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli_main(["fit", *TINY, f"--run.out_dir={tmp_path / 'ensemble'}", "--seed_everything=5", "--run.ensemble_seeds=3"])
    cli_main(["fit", *TINY, f"--run.out_dir={tmp_path / 'solo'}", "--seed_everything=6"])
    members = {r.seed: r for r in load_records(tmp_path / "ensemble")}
    (solo,) = load_records(tmp_path / "solo")
    assert sorted(members) == [5, 6, 7] and {r.status for r in members.values()} == {"finished"}
    member = members[6]
    assert (member.name, member.group, member.data_seed) == (solo.name, solo.group, solo.data_seed)
    assert [row["step"] for row in member.history] == [row["step"] for row in solo.history] == [2, 4]
    assert set(member.final) == set(solo.final)
    for key, value in solo.final.items():
        assert member.final[key] == pytest.approx(value, abs=TOL), key
    assert member.checkpoints["last"]["step"] == 4 and member.outcomes["val"]["step"] == 4

    capsys.readouterr()
    cli_main(["compare", f"--out_dir={tmp_path / 'ensemble'}", "--format=json"])
    (cell,) = json.loads(capsys.readouterr().out)["comparisons"][0]["cells"]
    assert cell["n"] == 3 and cell["seeds"] == [5, 6, 7]
    assert cell["values"] == [members[seed].final["val/acc"] for seed in (5, 6, 7)]


@pytest.mark.parametrize(
    "option, needs",
    [
        ("--run.test_at_end=true", "test_at_end"),
        ("--trainer.devices=2", "one device"),
        ("--run.ensemble_seeds=0", ">= 1"),
    ],
)
def test_what_an_ensemble_cannot_follow_is_one_line(tmp_path, monkeypatch, capsys, option, needs):
    """Refused before anything is built or any run folder made."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.raises(SystemExit) as stop:
        cli_main(["fit", *TINY, f"--run.out_dir={tmp_path}", "--run.ensemble_seeds=2", option])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and error.startswith("error: --run.ensemble_seeds") and needs in error
    assert "\n" not in error and not (tmp_path / "runs").exists()
