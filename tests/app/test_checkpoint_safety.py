"""Every place that opens a checkpoint reads it as plain data only (lightning_modules/checkpoint_io.py
`read_checkpoint`, `torch.load(weights_only=True)`): a crafted pickle whose `__reduce__` would create a marker
file is refused in one line, exit 2, and its code never runs; a checkpoint written by `cli.py fit` still loads
everywhere. Issue 42 point 1: under SLURM, a crafted `hpc_ckpt_1.ckpt` in --trainer.default_root_dir ran its code
(cli.py's stored_run_dir read it with weights_only=False), then a traceback and exit 1.

The CLI cases run with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1, which makes every torch.load that does not pass
weights_only=True itself unsafe (as torch < 2.6 is by default, and Lightning 2.4-2.5 passes weights_only=False):
only the project's own loader keeps the code from running."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
UNSAFE_TORCH = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
SLURM_JOB = {
    "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_ID": "7",
    "SLURM_JOB_NAME": "train", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
}  # fmt: skip


class Evil:
    """Unpickled without weights_only, runs `touch <marker>`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(path: Path, marker: Path, key: str = "pe_run_dir") -> Path:
    """A checkpoint-shaped file whose `key` runs code when unpickled unsafely."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "hyper_parameters": {}, key: Evil(marker)}, path)
    return path


RUNNER = """
import contextlib, io, json, os, shutil, sys, traceback
from pathlib import Path
from pe_sweeps.cli import cli_main
results = []
for step in json.loads(sys.argv[1]):
    if "copy" in step:  # a run's last.ckpt to where Lightning's SLURM requeue looks
        folder, pattern, target = step["copy"]
        shutil.copy(sorted(Path(folder).glob(pattern))[-1], target)
        continue
    if "last" in step:  # LAST in the arguments: the newest file `last` matches now
        found = str(sorted(Path("/").glob(step["last"].lstrip("/")))[-1])
        step["args"] = [arg.replace("LAST", found) for arg in step["args"]]
    saved = dict(os.environ)
    os.environ.update(step["env"])
    err, code, io_class, step_count = io.StringIO(), 0, None, None
    with contextlib.redirect_stderr(err):
        try:
            cli = cli_main(step["args"])
            trainer = getattr(cli, "trainer", None)
            if trainer is not None:
                io_class, step_count = type(trainer.strategy.checkpoint_io).__name__, trainer.global_step
        except SystemExit as exit:
            code = exit.code
        except BaseException:
            code, _ = "raised", err.write(traceback.format_exc())
    os.environ.clear()
    os.environ.update(saved)
    results.append({"code": code, "stderr": err.getvalue(), "io": io_class, "steps": step_count})
print("RESULTS " + json.dumps(results), flush=True)
"""


def run_steps(steps: list[dict]) -> list[dict]:
    """Each step's cli_main in one fresh process (imports paid once), with torch's unsafe default forced."""
    env = {**os.environ, **UNSAFE_TORCH, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    for name in SLURM_JOB:
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(steps)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (outcomes,) = [json.loads(line[8:]) for line in result.stdout.splitlines() if line.startswith("RESULTS ")]
    return outcomes


@pytest.mark.slow
def test_a_crafted_checkpoint_never_runs_code_through_the_cli_and_a_real_one_loads(tmp_path):
    """fit / validate / test / predict --ckpt_path, the SLURM requeue checkpoint and probe --ckpt: one line,
    exit 2, no marker. Then a real run: its trainer restores through SafeCheckpointIO, and its last.ckpt resumes
    (--ckpt_path and as a SLURM requeue checkpoint) and validates."""
    marker = tmp_path / "PWNED"
    evil = str(crafted(tmp_path / "evil.ckpt", marker, key="hyper_parameters_extra"))
    job = tmp_path / "job"
    crafted(job / "hpc_ckpt_1.ckpt", marker)
    out = f"--run.out_dir={tmp_path / 'out'}"
    refused = {
        "fit --ckpt_path": (["fit", *TINY, out, f"--ckpt_path={evil}"], {}, "--ckpt_path: "),
        "validate --ckpt_path": (["validate", *TINY, out, f"--ckpt_path={evil}"], {}, "--ckpt_path: "),
        "test --ckpt_path": (["test", *TINY, out, f"--ckpt_path={evil}"], {}, "--ckpt_path: "),
        "predict --ckpt_path": (["predict", *TINY, out, f"--ckpt_path={evil}"], {}, "--ckpt_path: "),
        "SLURM requeue": (["fit", *TINY, f"--trainer.default_root_dir={job}"], SLURM_JOB, "SLURM requeue checkpoint: "),
        "probe --ckpt": (["probe", "--ckpt", evil], {}, "--ckpt: "),
    }
    real = tmp_path / "real"
    fit = ["fit", *TINY, f"--trainer.default_root_dir={real}"]
    last = f"{real}/runs/*/checkpoints/last.ckpt"
    steps = [{"args": args, "env": env} for args, env, _ in refused.values()] + [
        {"args": fit, "env": {}},
        {"args": [*fit, "--ckpt_path=LAST", "--trainer.max_steps=6"], "env": {}, "last": last},
        {"copy": [str(real), "runs/*/checkpoints/last.ckpt", str(real / "hpc_ckpt_1.ckpt")]},
        {"args": [*fit, "--trainer.max_steps=8"], "env": SLURM_JOB},
        {"args": ["validate", *TINY, f"--run.out_dir={real}", "--ckpt_path=LAST"], "env": {}, "last": last},
    ]
    outcomes = run_steps(steps)
    problems = []
    for (name, (_, _, expected)), outcome in zip(refused.items(), outcomes):
        stderr = outcome["stderr"]
        lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
        if outcome["code"] != 2 or "Traceback" in stderr or len(lines) != 1 or expected not in lines[0]:
            problems.append(f"{name}: exit {outcome['code']}: {stderr[-1500:]}")
        elif "is not a readable checkpoint (not plain data: " not in lines[0]:
            problems.append(f"{name}: {lines[0]}")
    assert not problems, "\n".join(problems)
    assert not marker.exists()
    assert not (job / "runs").exists()  # refused before a run folder was made
    fitted, resumed, requeued, validated = outcomes[len(refused) :]
    for outcome in (fitted, resumed, requeued, validated):
        assert outcome["code"] == 0 and outcome["io"] == "SafeCheckpointIO", outcome["stderr"][-3000:]
    assert (fitted["steps"], resumed["steps"], requeued["steps"]) == (4, 6, 8)
    assert len(list((real / "runs").glob("*/checkpoints"))) == 1  # both resumes continued the one run


def refused_in_one_line(call, option: str) -> str:
    """`call()` raises a ConfigError naming `option` whose message is one line; returns it."""
    from pe_core.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(f"{option}: ") and "\n" not in message and "not plain data" in message, message
    return message


def test_each_loader_refuses_a_crafted_checkpoint_without_running_it(tmp_path, monkeypatch):
    """The loaders outside Lightning's trainer: a sweep retry's resume (`readable`: not resumed), the run a
    checkpoint names (`stored_run_dir`), `--model.init_from` (the classifier's encoder, the GLUE data's
    tokenizer) and probe's model."""
    from datamodules.glue import checkpoint_tokenizer
    from lightning_modules.checkpoint_io import load_checkpoint
    from pe_sweeps.cli import stored_run_dir
    from pe_sweeps.probes import load_checkpoint as probe_checkpoint
    from pe_sweeps.sweep.trial_child import readable

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "PWNED"
    path = crafted(tmp_path / "runs" / "r" / "checkpoints" / "last.ckpt", marker)
    assert not readable(path)
    refused_in_one_line(lambda: stored_run_dir(str(path)), "--ckpt_path")
    refused_in_one_line(lambda: load_checkpoint(str(path)), "init_from")
    refused_in_one_line(lambda: checkpoint_tokenizer(str(path)), "init_from")
    refused_in_one_line(lambda: probe_checkpoint(str(path)), "cannot load")
    assert not marker.exists()


def test_lightnings_own_restore_reads_plain_data_only(tmp_path, monkeypatch):
    """`trainer.strategy.load_checkpoint` (Lightning's restore of --ckpt_path and of the SLURM requeue
    checkpoint) goes through read_checkpoint once cli.py has installed SafeCheckpointIO, whatever weights_only
    Lightning passes; Lightning's default IO, with torch's pre-2.6 default, would run the file's code."""
    from pytorch_lightning import Trainer

    from lightning_modules.checkpoint_io import SafeCheckpointIO, use_safe_checkpoint_io

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "PWNED"
    path = crafted(tmp_path / "hpc_ckpt_1.ckpt", marker)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    use_safe_checkpoint_io(trainer)
    assert isinstance(trainer.strategy.checkpoint_io, SafeCheckpointIO)
    for weights_only in (None, False):
        refused_in_one_line(lambda w=weights_only: trainer.strategy.load_checkpoint(path, weights_only=w), "checkpoint")
    assert not marker.exists()
    real = tmp_path / "real.ckpt"
    torch.save({"state_dict": {"w": torch.arange(3.0)}, "global_step": 4}, real)
    loaded = trainer.strategy.load_checkpoint(real)
    assert loaded["global_step"] == 4 and torch.equal(loaded["state_dict"]["w"], torch.arange(3.0))
    Trainer(accelerator="cpu", logger=False).strategy.load_checkpoint(path)  # the default IO: the test can fail
    assert marker.exists()
