"""`cli.py sweep --trials_per_gpu K`: K trials share each GPU, each with a cap on its memory and its own cores.
The sweep side (each worker slot's CUDA_VISIBLE_DEVICES, PE_TRIAL_GPU_MEMORY_FRACTION, PE_TRIAL_CPUS and
OMP_NUM_THREADS) with mocked GPU counts and affinity masks, and the trial side (sweep/children.py) in this process."""

import os
import sys
from pathlib import Path

import pytest

from pe_core.errors import ConfigError
from pe_sweeps.cli_options import parse_options
from pe_sweeps.sweep import trial_devices
from pe_sweeps.sweep.children import check_given_gpus, pin_trial_cpus
from pe_sweeps.sweep.run import SweepOptions, check_options
from pe_sweeps.sweep.trial_child import child_env


def machine(monkeypatch, gpus: int, cores: int) -> None:
    """Pretend this process sees `gpus` GPUs and may run on `cores` cores."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(trial_devices, "gpu_driver_loaded", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def slots(opts: SweepOptions) -> list[tuple]:
    """(CUDA_VISIBLE_DEVICES, memory fraction, cores, OMP_NUM_THREADS) of each worker slot's trials."""
    check_options(opts)
    envs = [child_env("s", Path("/t"), slot, opts) for slot in range(opts.workers)]
    return [(env.get("CUDA_VISIBLE_DEVICES"), env.get("PE_TRIAL_GPU_MEMORY_FRACTION"), env.get("PE_TRIAL_CPUS"),
             env["OMP_NUM_THREADS"]) for env in envs]  # fmt: skip


def test_eight_gpus_four_trials_each_on_64_cores(monkeypatch, capsys):
    machine(monkeypatch, gpus=8, cores=64)
    placed = slots(SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1, trials_per_gpu=4))
    assert placed == [(str(s // 4), "0.225", f"{2 * s},{2 * s + 1}", "2") for s in range(32)]
    assert capsys.readouterr().err == ""


def test_one_gpu_eight_trials_on_16_cores(monkeypatch):
    machine(monkeypatch, gpus=1, cores=16)
    placed = slots(SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1, trials_per_gpu=8))
    assert placed == [("0", "0.1125", f"{2 * s},{2 * s + 1}", "2") for s in range(8)]


def test_fewer_cores_than_trials_share_them_evenly_with_one_warning(monkeypatch, capsys):
    machine(monkeypatch, gpus=1, cores=3)
    placed = slots(SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1, trials_per_gpu=8))
    assert [cores for _, _, cores, _ in placed] == ["0", "1", "2", "0", "1", "2", "0", "1"]
    assert {threads for *_, threads in placed} == {"1"}
    assert capsys.readouterr().err.splitlines() == [
        "warning: --workers 8 is more than the 3 core(s) this sweep may use: the trials share them, up to 3 per core"
    ]


def test_unshared_gpus_and_cpu_sweeps_get_cores_but_no_memory_cap(monkeypatch):
    machine(monkeypatch, gpus=2, cores=10)  # 10 cores over 4 CPU workers: 2 each, cores 8 and 9 left to the sweep
    assert slots(SweepOptions(file="s.yaml", workers=4, devices_per_trial=0)) == [
        (None, None, f"{2 * s},{2 * s + 1}", "2") for s in range(4)
    ]
    assert slots(SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1)) == [
        ("0", None, "0,1,2,3,4", "5"), ("1", None, "5,6,7,8,9", "5")
    ]  # fmt: skip
    # --threads_per_trial beyond a worker's share of the cores (10 // 2 = 5): not pinned, the cores oversubscribed
    assert slots(SweepOptions(file="s.yaml", workers=2, devices_per_trial=0, threads_per_trial=6)) == [
        (None, None, None, "6"), (None, None, None, "6")
    ]  # fmt: skip
    monkeypatch.setenv("PE_TRIAL_GPU_MEMORY_FRACTION", "0.5")  # a sweep run as another sweep's trial: its own
    monkeypatch.setenv("PE_TRIAL_CPUS", "9")  # trial's cap and cores are not passed on
    env = child_env("s", Path("/t"), 0, SweepOptions(file="s.yaml", workers=2, threads_per_trial=6))
    assert "PE_TRIAL_GPU_MEMORY_FRACTION" not in env and "PE_TRIAL_CPUS" not in env


@pytest.mark.parametrize(
    "gpus, options, message",
    [
        (2, {"workers": 9, "devices_per_trial": 1, "trials_per_gpu": 4}, "--workers 9 is more than the 8 trial slot(s) "
         "of the 2 visible GPU(s) (CUDA_VISIBLE_DEVICES=0,1) with --devices_per_trial 1 x --trials_per_gpu 4; pass "
         "--workers 8 or fewer, --workers auto, or a larger --trials_per_gpu"),
        (2, {"trials_per_gpu": 0}, "--trials_per_gpu must be an integer >= 1, got 0"),
        (2, {"trials_per_gpu": 2, "devices_per_trial": 0}, "--trials_per_gpu 2 shares GPUs: it needs "
         "--devices_per_trial >= 1"),
    ],
)  # fmt: skip
def test_more_workers_than_shared_slots_and_bad_values_are_one_line(monkeypatch, gpus, options, message):
    machine(monkeypatch, gpus=gpus, cores=8)
    with pytest.raises(ConfigError) as error:
        check_options(SweepOptions(file="s.yaml", **options))
    assert str(error.value) == message


def test_the_old_name_still_works_with_one_warning_line(capsys):
    opts = parse_options(SweepOptions, ["s.yaml", "--trials-per-device=3"])
    assert (opts.trials_per_gpu, opts.trials_per_device) == (3, None)  # a SLURM task's command says --trials_per_gpu
    assert capsys.readouterr().err.splitlines() == [
        "warning: --trials_per_device is deprecated, it is now --trials_per_gpu"
    ]
    assert parse_options(SweepOptions, ["s.yaml", "--trials-per-gpu=2"]).trials_per_gpu == 2


def test_a_trial_caps_its_share_of_the_gpu_memory(monkeypatch):
    import torch

    capped = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, device: capped.append((f, device)))
    monkeypatch.setenv("PE_TRIAL_GPUS", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("PE_TRIAL_GPU_MEMORY_FRACTION", raising=False)
    check_given_gpus()  # GPUs not shared: no cap
    monkeypatch.setenv("PE_TRIAL_GPU_MEMORY_FRACTION", "0.225")
    check_given_gpus()
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank of a 2-GPU trial caps its own GPU
    check_given_gpus()
    assert capped == [(0.225, 0), (0.225, 1)]
    monkeypatch.setenv("PE_TRIAL_GPU_MEMORY_FRACTION", "1.5")
    with pytest.raises(ConfigError, match=r"^PE_TRIAL_GPU_MEMORY_FRACTION must be a number in \(0, 1\], got '1.5'$"):
        check_given_gpus()


PINS = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="the platform cannot pin (macOS)")


@PINS
def test_a_trial_pins_itself_to_its_slots_cores(monkeypatch, capsys):
    """A forked trial pins itself (pid 0, its own environment); a cold one is pinned by its sweep (its pid, the
    environment it was given): both here on this process, restored after."""
    allowed = os.sched_getaffinity(0)
    first, last = min(allowed), max(allowed)
    try:
        monkeypatch.setenv("PE_TRIAL_CPUS", str(first))
        pin_trial_cpus()
        assert os.sched_getaffinity(0) == {first}
        pin_trial_cpus(os.getpid(), {"PE_TRIAL_CPUS": f"{last}"})
        assert os.sched_getaffinity(0) == {last}
        pin_trial_cpus(os.getpid(), {"PE_TRIAL_CPUS": str(last + 4096)})  # not a core of this machine
        assert os.sched_getaffinity(0) == {last}  # unchanged, and said in one line
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("warning: the trial given the cores PE_TRIAL_CPUS=")
    finally:
        os.sched_setaffinity(0, allowed)


@PINS
@pytest.mark.slow
def test_a_cold_child_starts_on_its_slots_cores(tmp_path):
    from pe_sweeps.sweep.children import launch_child

    core = max(os.sched_getaffinity(0))
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    with open(tmp_path / "log", "wb") as log:
        child = launch_child([sys.executable, "-c", code], {**os.environ, "PE_TRIAL_CPUS": str(core)}, log)
        assert child.wait(timeout=30) == 0
    assert (tmp_path / "log").read_text().strip() == f"[{core}]"


def test_pinning_is_skipped_silently_where_the_platform_cannot(monkeypatch, capsys):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    monkeypatch.setenv("PE_TRIAL_CPUS", "0")
    pin_trial_cpus()
    assert capsys.readouterr().err == ""  # nothing said, nothing raised
