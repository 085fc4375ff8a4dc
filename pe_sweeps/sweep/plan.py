"""`cli.py sweep FILE --dry-run` on this machine (the local launcher; with `--launcher slurm` it prints the sbatch
script instead): the plan before the spend. It prints the number of trials (the grid's points, else run_cap), then
an estimate of the wall time from a short calibration: one trial per distinct `data.task` (else per value of the
first varied parameter), run as its trial would be (same command, environment and threads per trial) for
CALIBRATION_STEPS training steps (`--trainer.max_steps`), in a temporary folder that is removed. From each run's
record: the start-up (process start to the first step, plus what follows the last) and the seconds per training
step after it; a trial is estimated at start-up + its max_steps x that, and the sweep at the sum over its trials
divided by --workers. `--parts P` splits the grid by the values of that parameter into P resumable parts of
about equal estimated time, each run as one `--set KEY=VALUE` study per value (each study resumes on its own),
with its trials and hours.

It opens no study database and writes nothing under --out_dir. Start-up is measured cold (a new interpreter): the
sweep's fork server starts trials warm, so start-up is an upper bound; trials running side by side share memory
bandwidth, which one calibration trial alone does not see.
"""

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from pe_core.errors import ConfigError
from pe_sweeps import layout
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.options import SweepOptions
from pe_sweeps.sweep.run import check_options
from pe_sweeps.sweep.study_protocol import apply_overrides, base_name
from pe_sweeps.sweep.trial_child import build_command, child_env, last_error_line, latest_record
from pe_sweeps.sweep.trial_devices import check_devices, trial_threads

CALIBRATION_STEPS = 20  # training steps of each calibration trial
CALIBRATION_TIMEOUT = 900  # seconds; a calibration trial past it is stopped and left out of the estimate
STEPS_OPTION = "--trainer.max_steps"


@dataclass
class Calibration:
    """One calibration trial: its wall time, the seconds per training step after start-up (None when its run
    wrote no step timing) and the rest of its wall time (start-up and teardown)."""

    wall: float
    step_seconds: float | None
    startup: float

    def trial_seconds(self, steps: int | None) -> float:
        """A trial of `steps` training steps; the calibration's own wall time when it cannot be extrapolated."""
        if self.step_seconds is None or steps is None:
            return self.wall
        return self.startup + steps * self.step_seconds


def check_plan_options(opts: SweepOptions) -> None:
    """--parts is the dry run's (a real run runs each part with the commands the plan prints): one line."""
    if not isinstance(opts.parts, int) or isinstance(opts.parts, bool) or opts.parts < 1:
        raise ConfigError(f"--parts must be an integer >= 1, got {opts.parts!r}")
    if opts.parts > 1 and not opts.dry_run:
        raise ConfigError("--parts splits the plan of --dry-run; run each part with the --set commands it prints")
    if opts.dry_run and (opts.reseed or opts.per):
        raise ConfigError("--dry-run plans one sweep; with --reseed / --per the second stage depends on the first's "
                          "results: plan the first stage without them")  # fmt: skip


def group_key(sweep: dict) -> str | None:
    """The parameter the calibration runs one trial per value of: data.task when it varies, else the first varied
    parameter that lists values; None when nothing varies."""
    params = sweep.get("parameters") or {}
    varied = [k for k, s in params.items() if len(s.get("values") or []) > 1]
    return "data.task" if "data.task" in varied else (varied[0] if varied else None)


def representative(sweep: dict, key: str | None, value) -> dict:
    """One trial's parameters with `key` at `value`: the grid's first such point; for other methods, each
    parameter's first listed value, else the low end of its range."""
    if sweep["method"] == "grid":
        return next(p for p in sf.grid_points(sweep) if key is None or p[key] == value)
    params = {}
    for name, spec in (sweep.get("parameters") or {}).items():
        listed = sf.spec_values(spec)
        if listed or "min" in spec:
            params[name] = listed[0] if listed else spec["min"]
    if key is not None:
        params[key] = value
    return params


def declared_steps(sweep: dict, params: dict) -> int | None:
    """The trial's training steps as its command declares them (its --config files, then --trainer.max_steps, the
    last one winning; a `trainer.max_steps` parameter over both); None when not declared (or -1: epochs)."""
    if "trainer.max_steps" in params:
        return int(params["trainer.max_steps"])
    steps, words = None, [str(w) for w in sweep.get("command", sf.DEFAULT_COMMAND)]
    for i, word in enumerate(words):
        name, _, value = word.partition("=")
        value = value or (words[i + 1] if i + 1 < len(words) else "")
        if name == "--config" and Path(layout.shipped_path(value)).is_file():
            config = yaml.safe_load(Path(layout.shipped_path(value)).read_text()) or {}
            found = (config.get("trainer") or {}).get("max_steps") if isinstance(config, dict) else None
            steps = found if found is not None else steps
        elif name == STEPS_OPTION and value:
            steps = int(value)
    return steps if steps is not None and steps > 0 else None


def calibrate(sweep: dict, params: dict, opts: SweepOptions, folder: Path) -> Calibration | str:
    """Run one trial for CALIBRATION_STEPS steps in `folder` and time it; a one-line reason when it failed."""
    folder.mkdir(parents=True)
    argv = [*build_command(sweep, params, folder), f"{STEPS_OPTION}={CALIBRATION_STEPS}"]
    env = {**child_env("dry-run", folder, 0, opts), **sf.wandb_env(sweep)}  # as the sweep's first trial's
    env["WANDB_MODE"] = "offline"  # nothing leaves the machine
    log = folder / "calibration.log"
    start = time.monotonic()
    try:
        with log.open("wb") as out:
            code = subprocess.run(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=CALIBRATION_TIMEOUT
            ).returncode
    except subprocess.TimeoutExpired:
        return f"still running after {CALIBRATION_TIMEOUT} s"
    wall = time.monotonic() - start
    if code != 0:
        return f"exit {code}: {last_error_line(log)[:200]}"
    record = latest_record(folder)
    first, at, last, end = (
        getattr(record, k, None) for k in ("first_step", "first_step_at", "global_step", "updated_at")
    )
    if None in (first, at, last, end) or last < first:
        return Calibration(wall, None, wall)
    steps = last - first + 1
    per_step = max(0.0, (end - at) / steps)
    return Calibration(wall, per_step, max(0.0, wall - steps * per_step))


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min"


def plan_sweep(opts: SweepOptions) -> None:
    """Print the sweep's trials and estimated time (per part with --parts); exits 1 when no calibration trial ran."""
    check_plan_options(opts)
    check_options(opts)
    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), opts.set.split(",") if opts.set else [])
    if opts.devices_per_trial is None:
        check_devices(opts, sweep)  # resolves --workers auto as the sweep would
    name = base_name(opts, sweep) + (f"-{suffix}" if suffix else "")
    trials = sf.trial_budget(sweep)
    print(f"plan: sweep {name} ({opts.file}), method {sweep['method']}: "
          + (f"{trials} trials" if trials is not None else "no run_cap: it runs until stopped"))  # fmt: skip
    if trials is None:
        return
    key = group_key(sweep)
    grid = sf.grid_points(sweep) if sweep["method"] == "grid" else None
    if sweep["method"] == "grid" and "run_cap" in sweep:
        grid = grid[: sweep["run_cap"]]
    values = list(dict.fromkeys(p[key] for p in grid)) if grid and key else [None]
    if key is not None and grid is None:
        values = sf.spec_values(sweep["parameters"][key])
    if opts.parts > 1 and (grid is None or key is None or opts.parts > len(values)):
        raise ConfigError(f"--parts {opts.parts}: the parts split a grid by the values of one parameter"
                          + (f" ({key} has {len(values)})" if key and grid else "") + "; pass fewer parts")  # fmt: skip
    where = f"one trial per {key} ({len(values)})" if key else "one trial"
    print(f"calibration: {where}, {CALIBRATION_STEPS} steps each, {trial_threads(opts)} thread(s), in a temporary "
          "folder removed after")  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="pe-dry-run-"))
    results = {}
    try:
        for i, value in enumerate(values):
            params = representative(sweep, key, value)
            result = calibrate(sweep, params, opts, root / f"trial-{i}")
            label = f"{key}={value}" if key else "the trial"
            steps = declared_steps(sweep, params)
            if isinstance(result, str):
                print(f"  {label}: calibration failed ({result})", file=sys.stderr)
                continue
            results[value] = result
            rate = f"{1 / result.step_seconds:.1f} steps/s" if result.step_seconds else "no step timing"
            print(f"  {label}: start-up {result.startup:.1f} s, {rate} -> {result.trial_seconds(steps):.1f} s a trial"
                  + (f" of {steps} steps" if steps else ""), flush=True)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not results:
        print("error: no calibration trial ran; no estimate", file=sys.stderr)
        raise SystemExit(1)
    fallback = Calibration(*(sum(getattr(c, f) or 0 for c in results.values()) / len(results)
                             for f in ("wall", "step_seconds", "startup")))  # fmt: skip

    def seconds(params: dict) -> float:
        calibration = results.get(params.get(key) if key else None, fallback)
        return calibration.trial_seconds(declared_steps(sweep, params))

    per_value = {}
    for params in grid if grid is not None else [representative(sweep, key, values[0])] * trials:
        value = params.get(key) if key else None
        count, total = per_value.get(value, (0, 0.0))
        per_value[value] = (count + 1, total + seconds(params))
    total = sum(t for _, t in per_value.values())
    print(f"estimate: {trials} trials, {total / trials:.1f} s a trial on average, {opts.workers} worker(s): "
          f"{hours(total / opts.workers)} (start-up measured cold: an upper bound for warm starts)")  # fmt: skip
    if opts.parts > 1:
        print_parts(opts, key, values, per_value)


def split_parts(values: list, seconds: dict, parts: int) -> list[list]:
    """`values` in order, cut into `parts` contiguous non-empty parts of about equal estimated time."""
    total, chunks, done = sum(seconds.values()), [[]], 0.0
    for i, value in enumerate(values):
        each_its_own = len(values) - i == parts - len(chunks)  # one value left for each part still to open
        if chunks[-1] and len(chunks) < parts and (done >= total * len(chunks) / parts or each_its_own):
            chunks.append([])
        chunks[-1].append(value)
        done += seconds[value]
    return chunks


def print_parts(opts: SweepOptions, key: str, values: list, per_value: dict) -> None:
    """The grid split by `key`'s values into opts.parts contiguous parts of about equal time: each part's trials,
    hours and command (one `--set` study per value: each resumes on its own by the same command)."""
    chunks = split_parts(values, {v: per_value[v][1] for v in values}, opts.parts)
    fixed = shlex.quote(opts.set + ",") if opts.set else ""  # the user's own --set values stay fixed
    for i, chunk in enumerate(chunks, 1):
        count = sum(per_value[v][0] for v in chunk)
        seconds = sum(per_value[v][1] for v in chunk)
        words = " ".join(shlex.quote(str(v)) for v in chunk)
        command = f'python cli.py sweep {shlex.quote(opts.file)} --set {fixed}"{key}=$v" --workers {opts.workers}'
        print(f"part {i}/{len(chunks)}: {count} trials, {hours(seconds / opts.workers)}: "
              f"for v in {words}; do {command}; done")  # fmt: skip
