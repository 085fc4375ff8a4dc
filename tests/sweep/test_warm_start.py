"""sweep/warm_start.py: which trials start warm, the worker packing options, and a forked trial that sees
what a cold one sees (argv, environment, folders, session, exit status) and trains to the same numbers.
The sweep-level fault and resume tests run on both paths in tests/sweep/test_faults.py and tests/sweep/test_sweep.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY

from pe_core.errors import ConfigError
from pe_sweeps.layout import PROGRAMS
from pe_sweeps.sweep import trial_devices
from pe_sweeps.sweep.children import stop_child
from pe_sweeps.sweep.run import SweepOptions, check_options
from pe_sweeps.sweep.warm_start import PRELOAD, TrialStarter, WarmChild, preload_for, warm_program

ROOT = Path(__file__).resolve().parents[2]
PROBE = """import gc, json, os, sys, threading, time
if sys.argv[1] == "sleep":
    time.sleep(60)
print(json.dumps({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "path0": sys.path[0],
                  "session_leader": os.getsid(0) == os.getpid() == os.getpgid(0), "name": __name__,
                  "stdin": os.path.realpath(f"/proc/self/fd/0"), "threads": threading.active_count(),
                  "preloaded": [m for m in ("torch", "wandb", "pe_sweeps.cli") if m in sys.modules],
                  "frozen": gc.get_freeze_count(), "cpus": sorted(os.sched_getaffinity(0))}))
raise SystemExit(int(sys.argv[1]))
"""


def running(pid: int, wait: float = 5.0) -> bool:
    """Whether `pid` still runs after up to `wait` seconds (a zombie, or a pid gone, does not)."""
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except (FileNotFoundError, ProcessLookupError):
            return False
        time.sleep(0.1)
    return True


def test_only_this_projects_cli_run_by_this_interpreter_starts_warm(tmp_path):
    python, other = sys.executable, tmp_path / "train.py"
    CLI = PROGRAMS[0]
    other.write_text("")
    assert warm_program(["/usr/bin/env", python, str(CLI), "fit"], "/") == str(CLI)
    assert warm_program([python, "cli.py", "fit"], str(ROOT)) == "cli.py"
    installed = str(PROGRAMS[1])  # the package's __main__.py: what `program: cli.py` runs outside a checkout
    assert warm_program([python, installed, "fit"], "/") == installed
    assert warm_program(["/usr/bin/env", "python", str(CLI)], "/") is None  # another interpreter
    assert warm_program(["/usr/bin/env", python, "-u", str(CLI)], "/") is None  # interpreter options
    assert warm_program(["/usr/bin/env", "A=1", python, str(CLI)], "/") is None
    assert warm_program([python, str(other)], "/") is None  # another program: cold unless --warm_any
    assert warm_program([python, str(other)], "/", any_python=True) == str(other)
    assert warm_program(["bash", "-c", "true"], "/", any_python=True) is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"trials_per_gpu": 0}, "--trials_per_gpu must be an integer >= 1, got 0"),
        ({"workers": "auto", "devices_per_trial": 64}, "--devices_per_trial 64 is more than the"),  # no GPU here
        ({"workers": 0}, "--workers must be an integer >= 1 or auto, got 0"),
        (
            {"trials_per_gpu": 2, "devices_per_trial": 0},
            "--trials_per_gpu 2 shares GPUs: it needs --devices_per_trial >= 1",
        ),
        ({"cold_start": True, "warm_any": True}, "--cold_start and --warm_any contradict each other"),
    ],
)
def test_bad_packing_options_are_one_line(options, message):
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        check_options(SweepOptions(file="s.yaml", **options))


def test_workers_auto_on_cpu_is_cores_over_threads_per_trial(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    for threads, workers in ((0, 8), (1, 8), (3, 2), (16, 1)):
        opts = SweepOptions(file="s.yaml", workers="auto", threads_per_trial=threads, devices_per_trial=0)
        check_options(opts)
        assert opts.workers == workers


def gpus(monkeypatch, count: int, mask: str | None = None, cores: int = 8) -> None:
    """Pretend this process sees `count` GPUs (torch.cuda.device_count) through CUDA_VISIBLE_DEVICES `mask`."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(trial_devices, "gpu_driver_loaded", lambda: True)  # as on a GPU machine
    if mask is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)


def placement(opts: SweepOptions) -> list[tuple[str, str]]:
    """(CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS) of each worker slot's trials, after the sweep's own checks."""
    from pe_sweeps.sweep.trial_child import child_env

    check_options(opts)
    envs = [child_env("s", Path("/t"), slot, opts) for slot in range(opts.workers)]
    return [(env.get("CUDA_VISIBLE_DEVICES"), env["OMP_NUM_THREADS"]) for env in envs]


def test_trials_per_gpu_share_a_gpu_group(monkeypatch):
    gpus(monkeypatch, 4)
    opts = SweepOptions(file="s.yaml", workers=4, devices_per_trial=2, trials_per_gpu=2)
    # 8 cores over 4 running trials of 2 ranks each
    assert placement(opts) == [("0,1", "1"), ("0,1", "1"), ("2,3", "1"), ("2,3", "1")]


@pytest.mark.parametrize(
    "mask, count, groups",
    [
        ("4,5,6,7", 4, ["4", "5", "6", "7"]),  # the sweep's own mask, not 0..3
        ("GPU-abc,GPU-def", 2, ["GPU-abc", "GPU-def"]),  # UUIDs passed on verbatim
        ("3, 1", 2, ["3", "1"]),
        ("2,1,x,0", 2, ["2", "1"]),  # CUDA stops at the first entry it cannot use
        (None, 3, ["0", "1", "2"]),
    ],
)
def test_trials_get_subsets_of_the_sweeps_visible_gpus(monkeypatch, mask, count, groups):
    gpus(monkeypatch, count, mask)
    opts = SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1)
    assert [group for group, _ in placement(opts)] == groups
    assert {threads for _, threads in placement(opts)} == {str(8 // len(groups))}  # packed GPU trials split cores


def test_packed_gpu_trials_split_the_cores(monkeypatch):
    gpus(monkeypatch, 2, cores=12)
    opts = SweepOptions(file="s.yaml", workers="auto", devices_per_trial=1, trials_per_gpu=3)
    assert placement(opts) == [("0", "2")] * 3 + [("1", "2")] * 3
    opts = SweepOptions(file="s.yaml", workers=2, devices_per_trial=1, threads_per_trial=5)
    assert placement(opts) == [("0", "5"), ("1", "5")]


@pytest.mark.parametrize(
    "count, options, message",
    [
        (2, {"workers": 4, "devices_per_trial": 1}, "--workers 4 is more than the 2 trial slot(s) of the 2 visible "
         "GPU(s) (CUDA_VISIBLE_DEVICES=0,1) with --devices_per_trial 1 x --trials_per_gpu 1; pass --workers 2"),
        (2, {"workers": 5, "devices_per_trial": 1, "trials_per_gpu": 2}, "--workers 5 is more than the 4 trial"),
        (0, {"devices_per_trial": 1}, "--devices_per_trial 1 is more than the no visible GPU; pass"),
        (3, {"devices_per_trial": 4}, "--devices_per_trial 4 is more than the 3 visible GPU(s)"),
    ],
)  # fmt: skip
def test_more_trials_than_gpu_slots_is_one_line(monkeypatch, count, options, message):
    gpus(monkeypatch, count)
    with pytest.raises(ConfigError) as error:
        check_options(SweepOptions(file="s.yaml", **options))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_sweep_with_more_workers_than_gpus_exits_2_before_writing(tmp_path, monkeypatch, capsys):
    from helpers import cli_in_process

    gpus(monkeypatch, 2)
    path = tmp_path / "s.yaml"
    path.write_text(
        "method: grid\nmetric: {name: val/acc, goal: maximize}\nparameters: {seed_everything: {values: [0]}}\n"
    )
    args = ["sweep", str(path), f"--out_dir={tmp_path / 'out'}", "--workers=4", "--devices_per_trial=1"]
    code, _, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--workers 4 is more than" in err
    assert not (tmp_path / "out").exists()


def test_a_trial_given_a_gpu_it_cannot_see_fails_in_one_line(monkeypatch, capsys):
    """Not trained on the CPU: `cli.py fit` stops while parsing, with exit 2 (a sweep does not retry it)."""
    from helpers import cli_in_process

    from pe_sweeps.sweep.children import check_given_gpus

    gpus(monkeypatch, 1, "GPU-abc")
    monkeypatch.setenv("PE_TRIAL_GPUS", "1")
    check_given_gpus()  # it sees the GPU it was given
    gpus(monkeypatch, 0, "7")
    with pytest.raises(ConfigError, match="given 1 GPU\\(s\\) \\(CUDA_VISIBLE_DEVICES='7'\\) but sees 0"):
        check_given_gpus()
    code, _, err = cli_in_process(["fit", *TINY], capsys, monkeypatch, ROOT)
    assert code == 2 and err.strip().splitlines() == [
        "error: this trial was given 1 GPU(s) (CUDA_VISIBLE_DEVICES='7') but sees 0: it would train on the CPU; "
        "check the sweep's --devices_per_trial and --workers against its visible GPUs"
    ]


@pytest.mark.slow
def test_a_forked_trial_sees_what_a_cold_one_sees(tmp_path, capfd):
    """Same argv, environment (but for the parent's pid and what the preloaded imports write, as they would
    in a cold child), working directory, sys.path[0], __main__, stdin, own session; exit codes and signals;
    a server that dies takes its trial with it (killed) and leaves the next trials to start cold."""
    program = tmp_path / "probe.py"
    program.write_text(PROBE)
    starter = TrialStarter(tmp_path / "study", any_python=True)
    core = max(os.sched_getaffinity(0))  # the trial's worker slot's cores: it runs on them, warm or cold
    env = {
        **os.environ,
        "PE_OUT_DIR": str(tmp_path),
        "OMP_NUM_THREADS": "1",
        "CUSTOM": "x y",
        "PE_TRIAL_CPUS": f"{core}",
    }
    seen = {}
    try:
        for start, code in (("cold", 0), ("warm", 0), ("warm", 3)):
            starter.cold = start == "cold"
            argv = ["/usr/bin/env", sys.executable, str(program), str(code), "--a=b c"]
            with open(tmp_path / f"{start}{code}.log", "wb") as log:
                child = starter.launch(argv, env, log)
                assert isinstance(child, WarmChild) == (start == "warm")
                assert child.wait(timeout=120) == code
            seen[start, code] = json.loads((tmp_path / f"{start}{code}.log").read_text().splitlines()[-1])
        with open(tmp_path / "killed.log", "wb") as log:  # the sweep's stop_child: SIGTERM to the group
            child = starter.launch(["/usr/bin/env", sys.executable, str(program), "sleep"], env, log)
            assert child.poll() is None
            with pytest.raises(subprocess.TimeoutExpired):
                child.wait(timeout=0.2)
            stop_child(child)
            assert child.returncode == -signal.SIGTERM
            child = starter.launch(["/usr/bin/env", sys.executable, str(program), "sleep"], env, log)
            starter.server.process.kill()  # the server dies: its trial is ended and counted as killed
            assert child.wait(timeout=60) == -signal.SIGKILL
            assert not running(child.pid)
            child = starter.launch(["/usr/bin/env", sys.executable, str(program), "0"], env, log)
            assert not isinstance(child, WarmChild) and child.wait(timeout=120) == 0  # cold from now on
        assert capfd.readouterr().err.count("warning: warm start failed (") == 1
    finally:
        starter.close()
    cold, warm = seen["cold", 0], seen["warm", 0]
    assert seen["warm", 3]["argv"][1] == "3"
    assert warm["argv"] == cold["argv"] == [str(program), "0", "--a=b c"]
    written = {"PYTORCH_NVML_BASED_CUDA_CHECK", "TORCHINDUCTOR_CACHE_DIR"}  # by the imports a real trial makes
    assert {k: v for k, v in warm["env"].items() if k not in written | {"PE_PARENT_PID"}} == {
        k: v for k, v in cold["env"].items() if k not in written | {"PE_PARENT_PID"}
    }
    for key in ("cwd", "path0", "name", "stdin", "session_leader", "threads", "cpus"):
        assert warm[key] == cold[key], key
    assert warm["cpus"] == [core]
    assert warm["session_leader"] and warm["name"] == "__main__" and warm["threads"] == 1
    # a program other than cli.py is served by a server that preloaded nothing of torch, Lightning, W&B or the
    # command line (its ~8 s of imports; the program imports what it needs after the fork), and the server's
    # objects are out of the collector's reach (gc.freeze: a child's collections do not copy the server's pages)
    assert warm["preloaded"] == cold["preloaded"] == []
    assert warm["frozen"] > 0 and cold["frozen"] == 0


def test_a_fork_server_preloads_the_stack_only_for_this_projects_cli():
    """cli.py's server imports torch, Lightning, W&B and the command line before forking; a server for any other
    program (`--warm_any`, e.g. the tests' stdlib-only fake trials) imports none of them."""
    assert preload_for(str(PROGRAMS[0]), "/") == PRELOAD and preload_for("cli.py", str(ROOT)) == PRELOAD
    assert {"pe_sweeps.cli", "wandb"} <= set(PRELOAD)
    assert preload_for(str(ROOT / "tests" / "fake_trial.py"), "/") == ()


@pytest.mark.slow
def test_a_warm_trial_trains_to_the_same_numbers_as_a_cold_one(tmp_path):
    """The same numbers warm as cold; and a second warm trial, forked from the server that the first one's
    environment started, writes under its own PE_OUT_DIR (the prebuilt parser's defaults are re-read)."""
    starter = TrialStarter(tmp_path / "study")
    finals = {}
    try:
        for start in ("cold", "warm", "warm2"):
            starter.cold = start == "cold"
            out = tmp_path / start
            env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PE_OUT_DIR": str(out)}
            argv = ["/usr/bin/env", sys.executable, str(PROGRAMS[0]), "fit", *TINY, "--model.arch.encoding=alibi"]
            with open(tmp_path / f"{start}.log", "wb") as log:
                child = starter.launch(argv, env, log)
                assert isinstance(child, WarmChild) == (start != "cold")
                assert child.wait(timeout=300) == 0, (tmp_path / f"{start}.log").read_text()[-2000:]
            (record,) = out.glob("runs/*/record.json")
            finals[start] = json.loads(record.read_text())
        maps = Path(f"/proc/{starter.server.process.pid}/maps").read_text()
    finally:
        starter.close()
    assert "libtorch" in maps  # cli.py's server preloaded torch (a server for another program does not)
    for warm in ("warm", "warm2"):
        assert finals[warm]["final"] == finals["cold"]["final"]
        assert finals[warm]["history"] == finals["cold"]["history"]


def test_each_warm_trial_stages_wandb_media_in_its_own_folder():
    """Forked trials shared W&B's import-time media folder and the first to exit deleted it under the others
    (FileNotFoundError on their length tables)."""
    import wandb  # noqa: F401  (makes W&B's media folder)

    from pe_sweeps.internals import wandb_media_dir
    from pe_sweeps.sweep.warm_start import own_media_dir

    shared = wandb_media_dir().name
    own_media_dir()
    assert wandb_media_dir().name != shared and os.path.isdir(wandb_media_dir().name) and os.path.isdir(shared)


ATTACKER = """import json, socket, struct, sys
path, request = sys.argv[1], sys.argv[2].encode()
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    connection.connect(path)
except PermissionError:
    print("no access"); raise SystemExit(0)
try:
    socket.send_fds(connection, [struct.pack("!I", len(request))], [1, 0])
    connection.sendall(request)
    reply = connection.recv(4096).decode()
except (BrokenPipeError, ConnectionResetError):
    reply = ""
print("reply:", reply or "closed")
"""


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to run as nobody")
def test_another_user_cannot_make_the_fork_server_run_code(tmp_path):
    """The server's socket is a file in a 0700 folder (not an abstract socket any user could reach): user
    nobody cannot connect; and if the folder is opened up, the peer's uid (SO_PEERCRED) is refused in one
    logged line and the program it sent never runs."""
    marker = tmp_path / "ran"
    program = tmp_path / "evil.py"
    program.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    starter = TrialStarter(tmp_path / "study", any_python=True)
    try:
        server = starter._server({**os.environ, "OMP_NUM_THREADS": "1"}, preload_for(str(program), "/"))
        assert server.wait_ready(), server.failure
        folder = Path(server.name).parent
        assert folder.stat().st_mode & 0o777 == 0o700 and Path(server.name).stat().st_mode & 0o077 == 0
        assert "@pe-warm" not in Path("/proc/net/unix").read_text()  # no abstract socket left
        request = json.dumps({"argv": [sys.executable, str(program)], "env": {}, "cwd": "/"})
        as_nobody = ["/usr/bin/python3", "-c", ATTACKER, server.name, request]
        run = {"user": 65534, "group": 65534, "capture_output": True, "text": True, "timeout": 60, "cwd": "/"}
        assert subprocess.run(as_nobody, **run).stdout.strip() == "no access"
        folder.chmod(0o711)  # a folder opened up by mistake: the uid check still refuses
        Path(server.name).chmod(0o777)
        attack = subprocess.run(as_nobody, **run)
        assert attack.stdout.strip() == "reply: closed", attack.stderr
        time.sleep(1.0)
        assert not marker.exists()
        refused = [line for line in server.log.read_text().splitlines() if "refused" in line]
        assert len(refused) == 1 and "uid 65534" in refused[0] and "only uid 0 may start trials" in refused[0]
        with open(tmp_path / "own.log", "wb") as log:  # the sweep's own user is still served
            child = starter.launch(["/usr/bin/env", sys.executable, str(program)], os.environ.copy(), log)
            assert isinstance(child, WarmChild) and child.wait(timeout=60) == 0 and marker.exists()
    finally:
        starter.close()
    assert not folder.exists()  # the socket and its folder go with the server


def test_a_storage_password_stays_off_the_command_line(monkeypatch, capsys):
    """A password in --storage is visible in `ps`: one warning line pointing to $PE_SWEEP_STORAGE, which is
    read as the default and never passed on to a trial."""
    from pe_sweeps.sweep.trial_child import child_env

    check_options(SweepOptions(file="s.yaml", storage="postgresql://u:s3cret@127.0.0.1/db"))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "visible to every local user in `ps`" in err and "s3cret" not in err
    check_options(SweepOptions(file="s.yaml", storage="postgresql://u@127.0.0.1/db"))
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PE_SWEEP_STORAGE", "postgresql://u:s3cret@127.0.0.1/db")
    opts = SweepOptions(file="s.yaml")
    check_options(opts)
    assert opts.storage == "postgresql://u:s3cret@127.0.0.1/db" and capsys.readouterr().err == ""
    assert "PE_SWEEP_STORAGE" not in child_env("s", Path("/t"), 0, opts)


def test_trials_start_cold_once_the_projects_source_changed(tmp_path, monkeypatch, capfd):
    """The fork server runs the code it imported: after an edit a trial would run the old code, and jsonargparse
    (which reads a data module's source for the options it forwards to its base) would parse with the new."""
    from pe_sweeps.sweep import warm_start

    program = tmp_path / "p.py"
    program.write_text("")
    started = []
    monkeypatch.setattr(warm_start, "launch_child", lambda argv, env, log: started.append(argv) or "cold child")
    starter = TrialStarter(tmp_path / "study", any_python=True)
    starter.stamp = warm_start.source_stamp()  # as when the server started
    assert len(starter.stamp) > 50 and starter.stamp == warm_start.source_stamp()  # every module, and stable
    monkeypatch.setattr(warm_start, "source_stamp", lambda: (("lightning_modules/x.py", 2, 1),))  # then an edit
    assert starter.launch([sys.executable, str(program)], dict(os.environ), None) == "cold child"
    assert starter.launch([sys.executable, str(program)], dict(os.environ), None) == "cold child"
    err = capfd.readouterr().err
    assert err.count("note (the project's source files changed since the fork server started); starting trials "
                     "cold") == 1  # fmt: skip
    assert len(started) == 2
