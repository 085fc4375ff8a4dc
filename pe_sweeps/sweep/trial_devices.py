"""The cores and GPUs each trial gets: `--devices_per_trial` (by default from the sweep file's own
trainer.devices and the visible GPUs), `--trials_per_gpu` (K trials sharing each group of GPUs, each capped at
`memory_fraction` of a GPU's memory), `--workers auto`, each worker slot's own cores (`slot_cpus`) and each
trial's OMP_NUM_THREADS. The trial applies the cores and the memory cap itself (sweep/children.py)."""

import os
import sys

from pe_core.errors import ConfigError
from pe_sweeps.sweep.options import SweepOptions


def check_devices(opts: SweepOptions, sweep: dict | None) -> None:
    """Resolve `--devices_per_trial` (default: from the sweep file's own trainer.devices and the visible GPUs)
    and `--workers auto`, and check the GPU slots: one line each."""
    if opts.devices_per_trial is None:
        opts.devices_per_trial = default_devices_per_trial(sweep or {})
    if opts.trials_per_gpu > 1 and not opts.devices_per_trial:
        raise ConfigError(f"--trials_per_gpu {opts.trials_per_gpu} shares GPUs: it needs --devices_per_trial >= 1")
    if opts.workers == "auto":
        opts.workers = resolve_workers(opts)
    if opts.devices_per_trial:
        check_gpu_slots(opts)
    cores = cpu_cores()
    if opts.workers > cores:
        print(f"warning: --workers {opts.workers} is more than the {cores} core(s) this sweep may use: the trials "
              f"share them, up to {-(-opts.workers // cores)} per core", file=sys.stderr)  # fmt: skip


def cpu_set() -> set[int]:
    """The cores this process may run on (its affinity mask, e.g. a container's or taskset's), else all."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def cpu_cores() -> int:
    """How many cores this process may run on (`cpu_set`)."""
    return len(cpu_set())


GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")  # NVIDIA's driver, ROCm's


def gpu_driver_loaded() -> bool:
    """Whether this machine has a GPU driver torch.cuda could use (NVIDIA's, or AMD's ROCm, which torch.cuda
    also drives); without one a sweep never imports torch (pe_sweeps/entry.py)."""
    return any(os.path.exists(path) for path in GPU_DRIVER_FILES)


def visible_gpus() -> list[str]:
    """The GPUs this sweep may hand its trials, named as its own CUDA_VISIBLE_DEVICES names them (indices or
    UUIDs, passed on verbatim; CUDA ignores the entries after the first it cannot use, hence only the first
    `device_count()`), else 0 .. N-1. Counted in this process only: the fork server never counts them."""
    if not gpu_driver_loaded():
        return []  # torch would count 0, after seconds of importing it at every sweep's start
    import torch

    count = torch.cuda.device_count()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return [str(index) for index in range(count)]
    return [entry.strip() for entry in mask.split(",") if entry.strip()][:count]


def sweep_devices(sweep: dict):
    """The trainer.devices a sweep file sets: a fixed parameter's `value`, or `--trainer.devices X` in its
    command; "varied" for a parameter with several values; None when it sets none."""
    for key, spec in (sweep.get("parameters") or {}).items():
        if key in ("trainer.devices", "trainer.init_args.devices") and isinstance(spec, dict):
            return spec["value"] if "value" in spec else "varied"
    command = [str(chunk) for chunk in sweep.get("command") or []]
    for index, chunk in enumerate(command):
        option, equals, value = chunk.partition("=")
        if option in ("--trainer.devices", "--trainer.init_args.devices"):
            return value if equals else (command[index + 1] if index + 1 < len(command) else None)
    return None


def default_devices_per_trial(sweep: dict) -> int:
    """GPUs per trial when --devices_per_trial is not given: the number the sweep's trainer.devices asks for,
    not pinned (0) when it asks for something else (auto, -1, a list, several values), else one GPU per trial
    when GPUs are visible (the shipped configs' `devices: auto` would otherwise make every trial DDP over all
    of them, with a global batch N times the config's); 0 without GPUs."""
    if not visible_gpus():
        return 0
    asked = sweep_devices(sweep)
    if asked is None:
        return 1
    return int(asked) if str(asked).isdigit() and int(asked) > 0 else 0


def gpu_slots(opts: SweepOptions, visible: int) -> int:
    """Trials that can run at once on `visible` GPUs: whole groups of --devices_per_trial, each shared by
    --trials_per_gpu trials."""
    return visible // opts.devices_per_trial * opts.trials_per_gpu


def resolve_workers(opts: SweepOptions) -> int:
    """`--workers auto`: on CPU, cores // --threads_per_trial (one single-threaded trial per core by default);
    on GPUs, (visible GPUs // --devices_per_trial) x --trials_per_gpu."""
    if not opts.devices_per_trial:
        return max(1, cpu_cores() // max(1, opts.threads_per_trial))
    visible = len(visible_gpus())
    if opts.devices_per_trial > visible:
        raise ConfigError(f"--workers auto: --devices_per_trial {opts.devices_per_trial} is more than the {visible} "
                          "visible GPU(s) (CUDA_VISIBLE_DEVICES)")  # fmt: skip
    return gpu_slots(opts, visible)


def check_gpu_slots(opts: SweepOptions) -> None:
    """More workers than GPU slots would leave some trials without a GPU (training on the CPU): one line."""
    visible = visible_gpus()
    slots = gpu_slots(opts, len(visible))
    seen = f"{len(visible)} visible GPU(s) (CUDA_VISIBLE_DEVICES={','.join(visible)})" if visible else "no visible GPU"
    if not slots:
        raise ConfigError(f"--devices_per_trial {opts.devices_per_trial} is more than the {seen}; pass "
                          f"--devices_per_trial {len(visible)} or fewer, or 0 to train on the CPU")  # fmt: skip
    if opts.workers > slots:
        raise ConfigError(
            f"--workers {opts.workers} is more than the {slots} trial slot(s) of the {seen} with --devices_per_trial "
            f"{opts.devices_per_trial} x --trials_per_gpu {opts.trials_per_gpu}; pass --workers {slots} or "
            "fewer, --workers auto, or a larger --trials_per_gpu"
        )


def trial_threads(opts: SweepOptions) -> int:
    """--threads_per_trial, else the cores split between the trials that run at once and, on GPUs, between a
    trial's processes (one DDP rank per GPU with `trainer.devices: auto`)."""
    return opts.threads_per_trial or max(1, cpu_cores() // (opts.workers * max(1, opts.devices_per_trial or 0)))


GPU_MEMORY_RESERVE = 0.1  # of each GPU's memory, kept out of the trials' caps: their CUDA contexts (~0.5 GB each)
# and the driver's own use lie outside torch's allocator, which is all a cap limits


def memory_fraction(opts: SweepOptions) -> float | None:
    """The share of a GPU's memory each of the --trials_per_gpu K trials sharing it may allocate, (1 - reserve) / K,
    so that one trial running out of memory fails alone; None when trials do not share GPUs."""
    if not opts.devices_per_trial or opts.trials_per_gpu <= 1:
        return None
    return (1 - GPU_MEMORY_RESERVE) / opts.trials_per_gpu


def slot_cpus(opts: SweepOptions, slot: int) -> list[int]:
    """The cores worker `slot`'s trials run on: an equal share of this sweep's cores (`cpu_set`) per worker, the
    cores left over staying with the sweep process; with fewer cores than workers, the workers take the cores in
    turn (each core shared by up to ceil(workers / cores) trials; check_devices warns). None (not pinned) when
    --threads_per_trial asks a trial's processes for more threads than its share has cores."""
    cores = sorted(cpu_set())
    share = max(1, len(cores) // opts.workers)
    if opts.threads_per_trial * max(1, opts.devices_per_trial or 0) > share:
        return []
    if opts.workers > len(cores):
        return [cores[slot % len(cores)]]
    return cores[slot * share : (slot + 1) * share]
