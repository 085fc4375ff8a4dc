"""Issue 25, findings 5 and 6: a run's scale is recorded, a sweep gives each trial one GPU, and a run resumes
as itself (its folder, record and W&B run), one folder whatever the launcher.

Claims of docs/training.md covered here:
- "the record and the W&B config hold what `devices: auto` resolved to (world_size, num_devices, num_nodes,
  precision, global_batch_size = batch_size x world size x accumulate_grad_batches); a fit over several
  processes says so in one line": test_scale_and_its_line, test_the_wandb_config_holds_the_scale,
  test_ddp_fits_leave_one_folder_and_record_their_scale
- "a sweep gives each trial one GPU unless --devices-per-trial or its own trainer.devices asks for more":
  test_a_sweep_pins_each_trial_to_one_gpu
- "fit --ckpt_path=<run>/checkpoints/last.ckpt continues that run": test_a_resumed_record_continues_its_history,
  test_fit_resumed_by_hand_continues_its_run
- "a sweep retry continues its predecessor's run folder, record and W&B run":
  test_a_sweep_retry_continues_the_dead_attempts_run
- "rank > 0 processes make no run folder": test_launch_rank, test_ddp_fits_leave_one_folder_and_record_their_scale
- "--trainer.default_root_dir is respected ... a requeued job's fit, resumed by Lightning from the newest hpc_ckpt,
  continues the run that wrote it": test_default_root_dir_is_the_run_folders_out_dir,
  test_a_checkpoint_names_its_run, test_a_slurm_requeue_resumes_into_its_run
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import TINY
from helpers import record as make_record

from pe_core.errors import ConfigError
from pe_sweeps import layout
from pe_sweeps.runs import wandb_setup as ws
from pe_sweeps.runs.record_writer import RecordWriter, run_scale, scale_line
from pe_sweeps.runs.records import RECORD_FILE
from pe_sweeps.sweep import trial_devices

ROOT = Path(__file__).resolve().parents[2]


class DDPStrategy:  # what scale_line reads of Lightning's strategy and accelerator: their class names
    pass


class CUDAAccelerator:
    pass


class CPUAccelerator:
    pass


def scaled_trainer(world: int, nodes: int = 1, accumulate: int = 1, batch: int = 32, accelerator=CUDAAccelerator):
    return SimpleNamespace(
        world_size=world, num_devices=world // nodes, num_nodes=nodes, precision="bf16-mixed",
        accumulate_grad_batches=accumulate, datamodule=SimpleNamespace(batch_size=batch),
        strategy=DDPStrategy(), accelerator=accelerator(),
    )  # fmt: skip


def test_scale_and_its_line():
    scale = run_scale(scaled_trainer(8))
    assert scale == {"world_size": 8, "num_devices": 8, "num_nodes": 1, "precision": "bf16-mixed",
                     "global_batch_size": 256}  # fmt: skip
    assert scale_line(scaled_trainer(8), scale) == "DDP over 8 GPUs: global batch 256 = 32 x 8"
    two_nodes = scaled_trainer(16, nodes=2, accumulate=4, batch=8)
    assert run_scale(two_nodes)["global_batch_size"] == 8 * 16 * 4
    assert scale_line(two_nodes, run_scale(two_nodes)) == (
        "DDP over 16 GPUs: global batch 512 = 8 x 16 x 4 (accumulate_grad_batches)"
    )
    cpu = scaled_trainer(2, accelerator=CPUAccelerator)
    assert scale_line(cpu, run_scale(cpu)) == "DDP over 2 CPU processes: global batch 64 = 32 x 2"
    assert scale_line(scaled_trainer(1), run_scale(scaled_trainer(1))) is None  # one device: nothing to say


def test_the_wandb_config_holds_the_scale(monkeypatch):
    from helpers import FakeRun

    run = FakeRun()
    monkeypatch.setattr(ws, "wandb_run", lambda trainer: run)
    scale = run_scale(scaled_trainer(8))
    ws.describe_run(None, make_record(task="copy", encoding="rope", seed=0, **scale))
    assert {k: run.config[k] for k in ws.SCALE} == scale
    assert run.config["global_batch_size"] == 256


@pytest.mark.parametrize(
    "env, rank",
    [
        ({}, 0),
        ({"RANK": "3", "LOCAL_RANK": "1"}, 3),  # torchrun
        ({"RANK": "0", "LOCAL_RANK": "0"}, 0),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}, 5),  # srun
        ({"LOCAL_RANK": "1", "NODE_RANK": "0"}, 1),  # Lightning's own launcher: rank 1 of node 0
        ({"NODE_RANK": "1"}, 1),  # the first process of node 1, started by hand
        ({"JSM_NAMESPACE_RANK": "2"}, 2),
    ],
)
def test_launch_rank(env, rank):
    assert layout.launch_rank(env) == rank


def test_rank_above_zero_makes_no_run_folder(tmp_path, monkeypatch):
    from pe_sweeps.cli import PECLI

    for name in layout.LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    path = PECLI._run_dir(str(tmp_path), "copy-rope-s0")
    assert not path.exists() and not (tmp_path / "runs").exists()
    monkeypatch.setenv("RANK", "0")
    assert PECLI._run_dir(str(tmp_path), "copy-rope-s0").is_dir()


def test_a_checkpoint_names_its_run(tmp_path):
    from pe_sweeps.cli import hpc_checkpoint, stored_run_dir

    run = tmp_path / "runs" / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / RECORD_FILE).write_text("{}")
    assert layout.checkpoint_run_dir(run / "checkpoints" / "last.ckpt") == run
    assert layout.checkpoint_run_dir(tmp_path / "elsewhere" / "last.ckpt") is None
    for n in (2, 10, 9):  # Lightning's SLURM requeue checkpoints: the newest version is resumed
        torch.save({"pe_run_dir": str(run)}, tmp_path / f"hpc_ckpt_{n}.ckpt")
    assert hpc_checkpoint(str(tmp_path)) == str(tmp_path / "hpc_ckpt_10.ckpt")
    assert stored_run_dir(hpc_checkpoint(str(tmp_path))) == run  # written by RecordWriter.on_save_checkpoint
    assert hpc_checkpoint(str(tmp_path / "runs")) is None
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="--ckpt_path: .* is not a readable checkpoint"):  # before any run folder
        stored_run_dir(str(tmp_path / "bad.ckpt"))


def test_a_resumed_record_continues_its_history(tmp_path):
    """Resumed from its step-4 checkpoint, a run killed after validating at step 6 keeps steps 2 and 4 (step 6 is
    validated again), its W&B run and its best values up to the checkpoint."""
    history = [
        {"step": s, "wandb_step": s - 1, "val/acc": a, "val/loss": 1 / s} for s, a in ((2, 0.1), (4, 0.3), (6, 0.9))
    ]
    previous = make_record(name="n", status="failed", error="killed", history=history, first_step=1,
                           best={"val/acc": 0.9, "val/loss": 1 / 6, "train/loss": 0.5}, final={"val/acc": 0.9},
                           wandb={"id": "abc", "dirs": ["/w/1"]})  # fmt: skip
    record = RecordWriter(tmp_path, {"name": "n"}, {"trainer": {}}, previous)
    assert record.record.status == "running" and record.record.error is None and record.record.first_step is None
    record.on_train_batch_start(SimpleNamespace(global_step=4, is_global_zero=True), None, None, 0)
    kept = record.record
    assert [h["step"] for h in kept.history] == [2, 4] and kept.first_step == 5
    assert kept.best == {"val/acc": 0.3, "val/loss": 0.25, "train/loss": 0.5}
    assert kept.resumes[0]["previous_status"] == "failed" and kept.resumes[0]["step"] == 4
    assert kept.wandb["id"] == "abc"
    checkpoint = {}
    record.on_save_checkpoint(None, None, checkpoint)
    assert checkpoint["pe_run_dir"] == str(tmp_path.resolve())


def test_offline_sync_of_a_resumed_run_uploads_into_its_one_id():
    from pe_sweeps.runs.summary import summary_lines

    one = make_record(wandb={"id": "abc", "mode": "offline", "dir": "/w/1", "dirs": ["/w/1"]})
    assert summary_lines(one, "r.json")[1] == "W&B (offline): wandb sync /w/1"
    two = make_record(wandb={"id": "abc", "mode": "offline", "dir": "/w/2", "dirs": ["/w/1", "/w/2"]})
    assert summary_lines(two, "r.json")[1] == "W&B (offline): wandb sync --id abc /w/1 /w/2"


def gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(trial_devices, "gpu_driver_loaded", lambda: True)  # as on a GPU machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(
    "count, sweep, options, per_trial",
    [
        (8, {}, {}, 1),  # the shipped configs' devices: auto would be DDP over all 8
        (0, {}, {}, 0),  # no GPU: the CPU, as before
        (8, {}, {"devices_per_trial": 2}, 2),  # asked for more
        (8, {}, {"devices_per_trial": 0}, 0),  # asked for none: not pinned
        (8, {"parameters": {"trainer.devices": {"value": 4}}}, {}, 4),  # the sweep file asks for 4
        (8, {"parameters": {"trainer.devices": {"values": [1, 2]}}}, {}, 0),  # varies: not pinned
        (8, {"command": ["${program}", "fit", "--trainer.devices=2", "${args}"]}, {}, 2),
        (8, {"command": ["${program}", "fit", "--trainer.devices", "auto", "${args}"]}, {}, 0),
    ],
)
def test_a_sweep_pins_each_trial_to_one_gpu(monkeypatch, count, sweep, options, per_trial):
    """With GPUs and no word on devices, each trial sees one GPU (CUDA_VISIBLE_DEVICES of one entry) and
    `--workers auto` runs one trial per GPU: 8 side by side on an 8-GPU box."""
    from pe_sweeps.sweep.run import SweepOptions, check_options
    from pe_sweeps.sweep.trial_child import child_env

    gpus(monkeypatch, count)
    opts = SweepOptions(file="s.yaml", workers="auto", **options)
    check_options(opts, sweep)
    assert opts.devices_per_trial == per_trial
    env = child_env("s", Path("/t"), 0, opts)
    if per_trial:
        assert opts.workers == count // per_trial
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, range(per_trial))) and env["PE_TRIAL_GPUS"] == str(
            per_trial
        )
        assert child_env("s", Path("/t"), opts.workers - 1, opts)["CUDA_VISIBLE_DEVICES"].endswith(str(count - 1))
    else:
        assert "CUDA_VISIBLE_DEVICES" not in env and "PE_TRIAL_GPUS" not in env


def test_default_root_dir_is_the_run_folders_out_dir(tmp_path, monkeypatch):
    """--trainer.default_root_dir is Lightning's (its SLURM requeue checkpoints go there) and, with --run.out_dir
    left at its default, holds the run folder; an explicit --run.out_dir still places the run folder."""
    from pe_sweeps.cli import PECLI, RunOptions

    monkeypatch.delenv("PE_OUT_DIR", raising=False)
    cli = PECLI.__new__(PECLI)
    config = SimpleNamespace(trainer={"default_root_dir": str(tmp_path / "job")})
    assert cli._out_dir(RunOptions(), config) == str(tmp_path / "job")
    assert cli._out_dir(RunOptions(out_dir=str(tmp_path / "o")), config) == str(tmp_path / "o")
    assert cli._out_dir(RunOptions(), SimpleNamespace(trainer={"default_root_dir": None})) == "out"


# ------------------------------------------------------------------ real fits (slow)


def run_cli(*args: str, launcher: list[str] | None = None, **env: str) -> subprocess.CompletedProcess:
    command = [*(launcher or [sys.executable]), str(ROOT / "cli.py"), *args]
    env = {**os.environ, "WANDB_MODE": "disabled", **env}
    for name in layout.LAUNCHER_ENV:
        env.pop(name, None)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["lightning", "torchrun"])
def test_ddp_fits_leave_one_folder_and_record_their_scale(tmp_path, launcher):
    """2 gloo processes, started by Lightning (rank 1 a child of rank 0) or by torchrun (siblings): one run
    folder, world size 2 and global batch 2 x 32 in the record, and the one line saying so."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517"]
    args = ["fit", *TINY, f"--run.out_dir={tmp_path}", "--trainer.max_steps=2", "--trainer.accelerator=cpu",
            "--trainer.devices=2", "--trainer.strategy=ddp", "--model.arch.encoding=alibi"]  # fmt: skip
    result = run_cli(*args, launcher=torchrun if launcher == "torchrun" else None)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / RECORD_FILE).read_text())
    assert record["status"] == "finished" and record["world_size"] == 2 and record["global_batch_size"] == 64
    assert result.stdout.count("DDP over 2 CPU processes: global batch 64 = 32 x 2") == 1


@pytest.mark.slow
def test_fit_resumed_by_hand_continues_its_run(tmp_path):
    """`fit --ckpt_path=<run>/checkpoints/last.ckpt` with more steps: the same folder, record and offline W&B run,
    the history continued from the checkpoint's step."""
    args = ["fit", *TINY, f"--run.out_dir={tmp_path}"]
    assert run_cli(*args, WANDB_MODE="offline").returncode == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    first = json.loads((run_dir / RECORD_FILE).read_text())
    resumed = run_cli(*args, "--trainer.max_steps=6", f"--ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}",
                      WANDB_MODE="offline")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming run {run_dir} (W&B run {first['wandb']['id']})" in resumed.stdout
    assert list((tmp_path / "runs").iterdir()) == [run_dir]
    record = json.loads((run_dir / RECORD_FILE).read_text())
    assert record["status"] == "finished" and record["wandb"]["id"] == first["wandb"]["id"]
    assert [h["step"] for h in record["history"]] == [2, 4, 6] and record["first_step"] == 5
    assert len(record["wandb"]["dirs"]) == 2 and all(d.endswith(first["wandb"]["id"]) for d in record["wandb"]["dirs"])
    assert record["resumes"][0]["previous_status"] == "finished"


@pytest.mark.slow
def test_a_sweep_retry_continues_the_dead_attempts_run(tmp_path):
    """A trial's child is killed (SIGKILL) after its first checkpoint: the sweep's retry resumes it in the same
    trial and run folder, with the same offline W&B run id, and leaves one record, finished."""
    sweep = {
        "program": str(ROOT / "cli.py"), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"model.arch.encoding": {"values": ["rope"]}},
        "command": ["${env}", "${interpreter}", "${program}", "fit", *TINY, "--trainer.max_steps=8", "${args}"],
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    env = {k: v for k, v in os.environ.items() if not layout.launcher_variable(k)}
    sweeper = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={tmp_path}"],
                               cwd=ROOT, env={**env, "WANDB_MODE": "offline"}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    checkpoints, deadline = [], time.time() + 300
    while not checkpoints:
        assert time.time() < deadline and sweeper.poll() is None, "the trial never wrote a checkpoint"
        checkpoints = list((tmp_path / "sweeps" / "s").glob("trial-0/runs/*/checkpoints/last.ckpt"))
        time.sleep(0.05)
    run_dir = checkpoints[0].parents[1]
    os.kill(int(run_dir.name.rsplit("-", 1)[1]), signal.SIGKILL)  # <name>-<date>-<time>-<pid>: the trial's child
    dead_id = json.loads((run_dir / RECORD_FILE).read_text())["wandb"]["id"]
    _, err = sweeper.communicate(timeout=600)
    assert sweeper.returncode == 0, err[-3000:]
    import optuna

    (dead, retry) = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/sweeps/s/optuna.db").trials
    assert "killed by SIGKILL" in dead.user_attrs["reason"] and retry.state.name == "COMPLETE"
    assert retry.user_attrs["trial_dir"] == dead.user_attrs["trial_dir"] == str(run_dir.parents[1])
    assert [p.parent for p in (tmp_path / "sweeps").rglob(RECORD_FILE)] == [run_dir]  # one run, one record
    record = json.loads((run_dir / RECORD_FILE).read_text())
    assert record["status"] == "finished" and record["wandb"]["id"] == dead_id and len(record["resumes"]) == 1
    steps = [h["step"] for h in record["history"]]
    assert steps == sorted(set(steps)) and steps[-1] == 8
    assert retry.user_attrs["wandb_run_id"] == dead_id


ONE_TASK_JOB = {
    "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_ID": "7",
    "SLURM_JOB_NAME": "train", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
}  # fmt: skip


@pytest.mark.slow
def test_a_slurm_requeue_resumes_into_its_run(tmp_path):
    """--trainer.default_root_dir is kept: the run folder goes under it, and a requeued SLURM job (the same
    command, no --ckpt_path) that Lightning resumes from its `hpc_ckpt_<n>.ckpt` there continues the same run.
    The requeue checkpoint is the run's last.ckpt copied (Lightning's SIGUSR1 handler saves the same dump)."""
    import shutil

    job = tmp_path / "job"
    args = ["fit", *TINY, f"--trainer.default_root_dir={job}"]
    assert run_cli(*args).returncode == 0
    (run_dir,) = (job / "runs").iterdir()
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", job / "hpc_ckpt_1.ckpt")
    requeued = run_cli(*args, "--trainer.max_steps=6", **ONE_TASK_JOB)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert f"resuming run {run_dir}" in requeued.stdout and list((job / "runs").iterdir()) == [run_dir]
    record = json.loads((run_dir / RECORD_FILE).read_text())
    assert [h["step"] for h in record["history"]] == [2, 4, 6] and record["first_step"] == 5
