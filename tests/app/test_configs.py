"""Every config preset parses with cli.py (alone when it is complete, on top of synthetic.yaml when it
is an overlay), so a broken YAML key is caught before anyone trains on it; and every preset runs on a GPU
when there is one and on the CPU otherwise.

Claims of docs/training.md and docs/sweeps.md covered here:
- "the same commands scale to GPUs with Lightning" / "--devices-per-trial 2 # GPUs per trial
  (CUDA_VISIBLE_DEVICES)" / "one agent per GPU with CUDA_VISIBLE_DEVICES=0 wandb agent ...":
  test_presets_pick_the_gpu_when_present, test_devices_per_trial_and_one_agent_per_gpu_resolve
"""

from pathlib import Path
from unittest import mock

import pytest
import yaml
from helpers import cli_in_process
from pytorch_lightning.accelerators import CUDAAccelerator
from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector

from pe_sweeps.sweep import trial_devices

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_parses(path, capsys, monkeypatch):
    config = yaml.safe_load(path.read_text())
    complete = "class_path" in (config.get("model") or {})
    stack = [f"--config={path}"] if complete else ["--config=configs/synthetic.yaml", f"--config={path}"]
    code, out, err = cli_in_process(["fit", *stack, "--print_config"], capsys, monkeypatch, ROOT)
    assert code == 0, err[-2000:]
    resolved = yaml.safe_load(out)
    assert resolved["model"]["class_path"] and resolved["data"]["class_path"]
    assert (resolved["trainer"]["accelerator"], resolved["trainer"]["devices"]) == ("auto", "auto")


def resolve(trainer: dict, visible_gpus: int) -> tuple[str, int, str]:
    """(accelerator, devices, strategy) Lightning resolves for a config's trainer section on a machine that
    shows `visible_gpus` CUDA devices (0 = none), as in a process started with that CUDA_VISIBLE_DEVICES."""
    n = visible_gpus
    with (
        mock.patch.object(CUDAAccelerator, "is_available", staticmethod(lambda: n > 0)),
        mock.patch.object(CUDAAccelerator, "auto_device_count", staticmethod(lambda: n)),
        mock.patch("lightning_fabric.accelerators.cuda.num_cuda_devices", lambda: n),
        mock.patch("torch.cuda.device_count", lambda: n),
        mock.patch("torch.cuda.is_available", lambda: n > 0),
    ):
        connector = _AcceleratorConnector(accelerator=trainer.get("accelerator", "auto"),
                                          devices=trainer.get("devices", "auto"))  # fmt: skip
    kind = "cuda" if isinstance(connector.accelerator, CUDAAccelerator) else "cpu"
    return kind, len(connector._parallel_devices), type(connector.strategy).__name__


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_presets_pick_the_gpu_when_present(path):
    trainer = yaml.safe_load(path.read_text()).get("trainer") or {}
    assert resolve(trainer, 0) == ("cpu", 1, "SingleDeviceStrategy")
    assert resolve(trainer, 1) == ("cuda", 1, "SingleDeviceStrategy")
    assert resolve(trainer, 2) == ("cuda", 2, "DDPStrategy")  # every visible GPU


def test_devices_per_trial_and_one_agent_per_gpu_resolve(monkeypatch):
    """`cli.py sweep --devices-per-trial 2`: worker slot 1 gets GPUs 2,3 and its child trains on both; an agent
    started with CUDA_VISIBLE_DEVICES=0 trains on one GPU; no config is edited."""
    import torch

    from pe_sweeps.sweep.run import SweepOptions
    from pe_sweeps.sweep.trial_child import child_env

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # the sweep sees 4 GPUs
    monkeypatch.setattr(trial_devices, "gpu_driver_loaded", lambda: True)  # as on a GPU machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    trainer = yaml.safe_load((ROOT / "configs" / "synthetic.yaml").read_text())["trainer"]
    opts = SweepOptions(file="s.yaml", workers=2, devices_per_trial=2)
    env = child_env("s", Path("trial-1"), 1, opts)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert resolve(trainer, len(env["CUDA_VISIBLE_DEVICES"].split(","))) == ("cuda", 2, "DDPStrategy")
    assert resolve(trainer, len("0".split(","))) == ("cuda", 1, "SingleDeviceStrategy")  # one agent per GPU


def test_architecture_keys_from_before_arch_config_are_one_line(capsys, monkeypatch):
    args = ["fit", "--config=configs/synthetic.yaml", "--model.encoding=rope", "--print_config"]
    code, _, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 2 and err.strip().splitlines() == [
        "error: --model.encoding is now --model.arch.encoding (one architecture config: --model.help CLASS)"
    ]
