"""`fit --run.ensemble_seeds K` (pe_sweeps/runs/ensemble_fit.py): K seeds trained as one seed ensemble leave K
ordinary runs, each equal to the solo run of its seed (to float32 rounding: lightning_modules/ensemble.py), and
`compare` sees them as K seeds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

from pe_sweeps.cli import cli_main
from pe_sweeps.runs.ensemble_fit import fit_ensemble
from pe_sweeps.runs.records import load_records

ROOT = Path(__file__).resolve().parents[2]
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
        ("--run.ensemble_seeds=[1,2]", "the first being --seed_everything"),
        ("--model.arch.encoding=kerple_log", "cannot train as a seed ensemble"),  # made 2 run folders first
    ],
)
def test_what_an_ensemble_cannot_follow_is_one_line(tmp_path, monkeypatch, capsys, option, needs):
    """Refused before anything is built or any run folder made."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.raises(SystemExit) as stop:
        cli_main(["fit", *TINY, f"--run.out_dir={tmp_path}", "--run.ensemble_seeds=2", option])
    error = capsys.readouterr().err.strip()
    assert (
        stop.value.code == 2 and error.startswith(("error: --run.ensemble_seeds", "error: encoding")) and needs in error
    )
    assert "\n" not in error and not (tmp_path / "runs").exists()


def tiny_members(tmp_path, seeds):
    """(build, data, members): a tiny copy model per seed, its data module, and one Member per seed whose run
    folder is tmp_path / s<seed>."""
    from datamodules.synthetic import SyntheticDataModule
    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel
    from pe_sweeps.runs.ensemble_fit import Member
    from pe_sweeps.runs.record_writer import RecordWriter

    def data(seed):
        return SyntheticDataModule(task="copy", train_max_len=4, eval_max_len=6, train_size=64, eval_per_length=4,
                                   batch_size=8, seed=seed, num_workers=0)  # fmt: skip

    def build(seed):
        module = data(0)
        arch = ArchConfig(dim=16, depth=1, num_heads=2, vocab_size=module.vocab_size, max_length=module.max_seq_len)
        return SyntheticTaskModel(arch=arch)

    members = [Member(s, data(s), RecordWriter(tmp_path / f"s{s}", {"name": f"s{s}", "seed": s}, {})) for s in seeds]
    return build, data, members


@pytest.mark.slow
def test_a_diverged_member_stops_and_the_others_finish(tmp_path):
    """Member 1 starts with an infinite weight: its loss is not finite at step 1, it is frozen and its record says
    `diverged` with a solo run's one-line reason, while members 0 and 2 train on to the end."""
    import torch

    tiny, _, members = tiny_members(tmp_path, (0, 1, 2))

    def build(seed):
        model = tiny(seed)
        if seed == 1:
            with torch.no_grad():
                model.head.bias[0] = float("inf")
        return model

    fit_ensemble(build, members, max_steps=4, val_every=2, clip=None)
    records = [m.writer.record for m in members]
    assert [r.status for r in records] == ["finished", "diverged", "finished"]
    assert records[1].global_step == 1 and records[1].error.startswith("DivergedError: train/loss is ")
    assert not records[1].history and [row["step"] for row in records[0].history] == [2, 4]
    assert [r.checkpoints.get("last", {}).get("step") for r in records] == [4, None, 4]


@pytest.mark.parametrize("crafted", [{"seed": 0}, "junk", "members"])
def test_a_crafted_member_checkpoint_is_one_line_before_any_run_folder(tmp_path, monkeypatch, capsys, crafted):
    """A checkpoint whose `pe_ensemble` lacks what resuming reads (or has it malformed) is refused in one line at
    start-up, before any run folder is made: not a KeyError from the middle of the resume."""
    import torch

    monkeypatch.setenv("WANDB_MODE", "disabled")
    saved = {"seed": 0, "step": 2, "optimizer": {}, "schedule": {}, "loader": {"epoch": 0, "loader": None},
             "train_rows": [], "members": [{"seed": 0, "run_dir": 3}]}  # fmt: skip
    checkpoint = {"state_dict": {}, "pe_ensemble": saved if crafted == "members" else crafted}
    path = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(SystemExit) as stop:
        cli_main(["fit", *TINY, f"--run.out_dir={tmp_path / 'out'}", f"--ckpt_path={path}"])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "is not a seed ensemble member's checkpoint" in error and "\n" not in error
    assert not (tmp_path / "out").exists()


def test_a_member_its_sweep_pruned_stops_at_the_next_validation(tmp_path):
    """A sweep that prunes member 1's trial leaves PRUNE_FILE in its run folder: at the next validation (step 2)
    the ensemble freezes it, its record says it was stopped (`interrupted`, as a solo trial's child stopped by its
    sweep), and members 0 and 2 train on to step 4."""
    from pe_sweeps.layout import PRUNE_FILE

    build, data, members = tiny_members(tmp_path, (0, 1, 2))
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / PRUNE_FILE).touch()
    fit_ensemble(build, members, max_steps=4, val_every=2, clip=None)
    records = [m.writer.record for m in members]
    assert [r.status for r in records] == ["finished", "interrupted", "finished"]
    assert [row["step"] for row in records[1].history] == [2] and records[1].global_step == 2
    assert [row["step"] for row in records[0].history] == [2, 4]


@pytest.mark.slow
def test_each_member_gets_its_own_wandb_run(tmp_path):
    """In a process of its own: W&B keeps the mode of the first run a process started (other tests' disabled)."""
    from helpers import offline_run_records

    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "cli.py", "fit", *TINY, f"--run.out_dir={tmp_path}", "--run.ensemble_seeds=2"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    records = sorted(load_records(tmp_path), key=lambda r: r.seed)
    assert [r.seed for r in records] == [0, 1] and records[0].wandb["id"] != records[1].wandb["id"]
    for record in records:
        (run_dir,) = (tmp_path / "runs").glob(f"*/wandb/offline-run-*{record.wandb['id']}")
        assert run_dir.parents[1].resolve() == Path(record.run_dir).resolve()
        logged = offline_run_records(run_dir)
        if logged is None:
            pytest.skip("`wandb leet inspect` is not available: the rest reads the .wandb log through it")
        summary, config = {}, {}
        for row in logged:
            if row["type"] == "summary":
                summary.update(row["summary"].get("update", {}))
            if row["type"] == "config":
                config.update(row["config"].get("update", {}))
        assert summary["val/acc"] == pytest.approx(record.final["val/acc"])
        assert summary["train/loss"] == pytest.approx(record.final["train/loss"])
        assert summary["best/val/loss"] == pytest.approx(record.best["val/loss"])
        assert summary["trainer/global_step"] == 3  # the last step's values, numbered as Lightning's loggers do
        assert (config["seed"], config["data_seed"], config["encoding"]) == (record.seed, record.seed, "rope")


@pytest.mark.slow
def test_a_killed_ensemble_resumes_every_member_exactly_once(tmp_path, monkeypatch):
    """Killed (SIGKILL) right after its step-2 validation, an ensemble of seeds 0, 1, 2 goes on from its members'
    checkpoints (weights, AdamW moments, schedule, data position): seed 1 alone (`--ckpt_path` of its checkpoint,
    the sweep's retry of one member) and seeds 0 and 2 together (`--run.ensemble_seeds=[0,2]`). Each member's
    validations are each done once, in its own run folder, and its results are an uninterrupted ensemble's."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    killed = tmp_path / "killed"
    env = {**os.environ, "PE_FAULT_AT": "ensemble:validated", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "cli.py", "fit", *TINY, f"--run.out_dir={killed}", "--run.ensemble_seeds=3"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == -9, (result.stdout + result.stderr)[-3000:]
    before = {r.seed: r for r in load_records(killed)}
    assert {s: [row["step"] for row in r.history] for s, r in before.items()} == {0: [2], 1: [2], 2: [2]}

    def checkpoint(seed):
        return f"{before[seed].run_dir}/checkpoints/last.ckpt"

    cli_main(["fit", *TINY, f"--run.out_dir={killed}", "--seed_everything=1", f"--ckpt_path={checkpoint(1)}"])
    cli_main(["fit", *TINY, f"--run.out_dir={killed}", "--run.ensemble_seeds=[0,2]", f"--ckpt_path={checkpoint(0)}"])
    cli_main(["fit", *TINY, f"--run.out_dir={tmp_path / 'whole'}", "--run.ensemble_seeds=3"])
    resumed = {r.seed: r for r in load_records(killed)}
    whole = {r.seed: r for r in load_records(tmp_path / "whole")}
    assert sorted(resumed) == [0, 1, 2]  # no new run folder
    for seed, record in resumed.items():
        assert record.status == "finished" and [row["step"] for row in record.history] == [2, 4]
        assert [r["step"] for r in record.resumes] == [2] and record.run_dir == before[seed].run_dir
        for key, value in whole[seed].final.items():
            assert record.final[key] == pytest.approx(value, abs=1e-5), (seed, key)
