"""Warm start for sweep trials: a fork server that has imported torch, Lightning, W&B and this project, and
forks one child per trial, so a trial starts without paying the ~3 s of imports, nor the ~0.5 s of building
LightningCLI's parser (built once in the server, `cli.prepare_fork_server`; the environment-dependent defaults,
`RunOptions`, are read again in each child).

The sweep (sweep/run.py) starts the server at its first warm trial (`main`, in its own session) and
asks it for a child whenever a trial's command is this project's `cli.py` run by the sweep's
interpreter (`warm_program`). Per trial the sweep connects to the server's Unix socket and sends the
trial's argv, environment and working directory plus two file descriptors (the trial's output log and
the sweep's stdin). The server forks; the child

- calls `setsid()`: its own session and process group (pid == pgid), as `start_new_session=True` gives a
  cold child, so the sweep stops it with the same `os.killpg`;
- points fds 0, 1, 2 at the sweep's stdin and the output log, replaces `os.environ` with the trial's
  environment, `sys.argv` with `[program, *args]`, `sys.path[0]` with the program's folder, and changes
  to the trial's working directory: what `python program args` sees;
- sets torch's intra-op threads from the trial's OMP_NUM_THREADS (OpenMP read the server's environment
  when torch was imported) and reseeds NumPy's global generator from the OS (Python's `random` reseeds
  itself after a fork; torch's generator is untouched in the server, so it starts from its default seed
  as in a fresh process);
- runs the program as `__main__` with `runpy.run_path` and leaves through the interpreter's normal exit:
  an exception prints its traceback and exits 1, `SystemExit` keeps its code, atexit handlers run.

Only the sweep's own user can reach the server: its socket is a file in a directory of its own made with
mode 0700 (`tempfile.mkdtemp`; an abstract socket would have no permissions, and any local user could make it
run a program as the researcher), and `accept` checks the peer's uid with SO_PEERCRED before reading a request,
refusing any other uid with one line in the server's log. The server removes the socket and its directory
when it exits.

The server reaps its children and writes each one's status on that trial's connection; the sweep side
(`WarmChild`) exposes it as `subprocess.Popen` does (`pid`, `poll`, `wait`, `returncode`, negative for a
signal), so `TrialRun.follow`, `stop_child`, heartbeats and re-queueing are the cold path's code.

Why forking here is safe: the server is single-threaded (checked before every fork: one thread in
`threading` and one task in /proc/self/task, so no OpenMP pool, W&B service thread or lock held by another
thread is copied), it has initialised no CUDA context (checked: `torch.cuda.is_initialized()` is False,
and Lightning's cached device count is empty, so a child's CUDA_VISIBLE_DEVICES is read by the child's own
CUDA initialisation) and it has started no W&B run (`wandb.init` happens in the child). If a check fails,
the server cannot start, or it dies, the sweep prints one warning line and starts trials cold.

What the server preloads depends on the program it serves, known from the sweep's first warm trial (a sweep
has one command): this project's cli.py gets PRELOAD; any other program (`--warm_any`, e.g. the tests' fake
trials) nothing beyond this module's own imports (no torch, Lightning or W&B: ~0.2 s instead of ~8 s), and
its own imports run in each child after the fork, as in a cold child. A child forked from such a server that
runs cli.py after all imports torch itself, after the fork: correct, only without the head start.

Differences from a cold child, all outside what a trial can observe through its record: PE_PARENT_PID names
the server (the child's parent; the server exits when the sweep does, and the child's watchdog then ends its
process group, sweep/children.py), and warnings printed while importing go to the server's log
(`<study>/warm_start.log`), not the trial's. Linux only (fork after importing torch is unsafe on macOS).
"""

import gc
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from datamodules.registry import DATA_MODULES
from lightning_modules.registry import TASK_MODULE_PATHS, modules_of
from pe_sweeps import internals
from pe_sweeps.layout import PACKAGE, PARENT_ENV, is_project_program
from pe_sweeps.sweep.children import launch_child, pid_reused, pin_trial_cpus, process_started

HEADER = struct.Struct("!I")  # request length, sent with the two file descriptors
PEER = struct.Struct("3i")  # SO_PEERCRED's struct ucred: pid, uid, gid
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes, the last a NUL
# imported by the server: cli.py's own imports, then every model and data module a config names, and W&B
PRELOAD = (
    "pe_sweeps.cli", "wandb", "pytorch_lightning.loggers.wandb", "pandas",  # pandas: W&B's per-length table imports it
    # imported by a trial on its way to the first step (found by diffing sys.modules there): wandb.init's
    # telemetry imports requests (~0.1 s), an offline or online run W&B's public API and launch modules
    # (~1.5 s), the rest are small; none starts a thread (checked before forking)
    "requests", "certifi", "http.cookies", "encodings.idna", "wandb.wandb_run", "wandb.sdk.lib.gitlib",
    "wandb.apis.public", "wandb.sdk.launch", "wandb.docker",
    "torch.utils.serialization", "fsspec.implementations.chained", "rich._emoji_codes", "pe_sweeps.runs.summary",
    *modules_of(TASK_MODULE_PATHS.values()), "lightning_modules.task_modules", *modules_of(DATA_MODULES.values()),
)  # fmt: skip
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read when a library loads


def warm_program(argv: list[str], cwd: str, any_python: bool = False) -> str | None:
    """The program to run warm when `argv` is `[/usr/bin/env] <this interpreter> <program.py> args...` with
    program this project's cli.py (or, with `any_python`, any Python file); else None (start it cold)."""
    rest = argv[1:] if argv and argv[0] == "/usr/bin/env" else argv
    if len(rest) < 2 or rest[0] != sys.executable or not rest[1].endswith(".py"):
        return None
    program = (Path(cwd) / rest[1]).resolve()
    return rest[1] if is_project_program(program) or (any_python and program.is_file()) else None


def preload_for(program: str, cwd: str) -> tuple[str, ...]:
    """The modules a fork server serving `program` (run from `cwd`) imports before forking: PRELOAD for this
    project's cli.py; none for any other program (`--warm_any`), which imports what it needs in each child."""
    return PRELOAD if is_project_program(Path(cwd) / program) else ()


def available() -> str | None:
    """Why this platform cannot fork trials (None: it can)."""
    if sys.platform != "linux" or not hasattr(socket, "send_fds"):
        return f"the warm start needs Linux and Python >= 3.9 (here {sys.platform}, {sys.version.split()[0]})"
    return None


# ---------------------------------------------------------------------------------------------- sweep side


class WarmChild:
    """A forked trial as the runner sees it: the parts of `subprocess.Popen` that sweep/trial_run.py and
    sweep/children.py use. The status comes from the server on this trial's connection; `started` (its
    start time, read by the server before it reaps the child) tells the child from a later process of its pid."""

    def __init__(self, connection: socket.socket, pid: int, args: list[str], started: int | None = None):
        self.connection, self.pid, self.args, self.started = connection, pid, args, started
        self.returncode: int | None = None
        self.buffer = b""

    def poll(self) -> int | None:
        return self._read(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def _read(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            chunk = b"-"  # (a status already buffered needs no read)
            if b"\n" not in self.buffer:
                if not select.select([self.connection], [], [], left)[0]:
                    return None
                chunk = self.connection.recv(4096)
                self.buffer += chunk
            if b"\n" in self.buffer:
                self.returncode = int(json.loads(self.buffer.split(b"\n", 1)[0])["status"])
            elif not chunk:  # the server died: the child's watchdog ends it; make sure, and call it killed
                if not pid_reused(self.pid, self.started):  # init may have reaped it and its pid moved on
                    kill_child(self.pid)
                self.returncode = -signal.SIGKILL
            if self.returncode is not None:
                self.connection.close()
        return self.returncode


def kill_child(pid: int) -> None:
    """SIGKILL a forked trial's process group, or the child alone while it has no group yet: a server that dies
    right after forking (a server that preloaded little forks in microseconds) may leave it before its `setsid`."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue
        except PermissionError:
            return


class ForkServer:
    """The sweep's handle on its fork server: started once, asked for one child per warm trial."""

    def __init__(self, folder: Path, modules: tuple[str, ...] = PRELOAD):
        self.folder, self.modules = folder, modules  # what it preloads (`preload_for`)
        self.socket_dir = private_socket_dir()
        self.name = str(self.socket_dir / "fork.sock")
        self.ready_pipe: int | None = None
        self.log = folder / "warm_start.log"
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.ready: bool | None = None  # None: not yet known
        self.failure = ""

    def start(self, env: dict) -> None:
        """Start importing in the background; `launch` waits for it to be ready."""
        read, write = os.pipe()
        env = {k: v for k, v in env.items() if k not in (*THREAD_ENV, PARENT_ENV)}
        env["OPENBLAS_NUM_THREADS"] = "1"  # NumPy's and SciPy's OpenBLAS start a thread pool when loaded
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from pe_sweeps.sweep.warm_start import main; main()", self.name,
                 str(os.getpid()), str(write), ",".join(self.modules)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write,),
                start_new_session=True, cwd=PACKAGE.parent,
            )  # fmt: skip
        os.close(write)
        self.ready_pipe = read

    def wait_ready(self) -> bool:
        with self.lock:
            if self.ready is None:
                with os.fdopen(self.ready_pipe, "rb") as pipe:
                    line = pipe.readline().decode(errors="replace").strip()
                self.ready = line == "ready"
                self.failure = line or f"exited with code {self.process.wait()}: {last_line(self.log)}"
            return self.ready

    def launch(self, argv: list[str], env: dict, log, cwd: str) -> WarmChild:
        """Fork one trial child; raises OSError (or RuntimeError with the server's reason) if it cannot."""
        if not self.wait_ready():
            raise RuntimeError(self.failure)
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.name)
            socket.send_fds(connection, [HEADER.pack(len(request))], [log.fileno(), 0])
            connection.sendall(request)
            reply = b""
            while b"\n" not in reply:
                chunk = connection.recv(4096)
                if not chunk:
                    raise RuntimeError(f"the fork server closed the connection: {last_line(self.log)}")
                reply += chunk
        except BaseException:
            connection.close()
            raise
        line, rest = reply.split(b"\n", 1)  # `rest`: the exit status already, if the child was that quick
        answer = json.loads(line)
        if "error" in answer:
            connection.close()
            raise RuntimeError(answer["error"])
        child = WarmChild(connection, int(answer["pid"]), argv, answer.get("started"))
        child.buffer = rest
        return child

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.ready is None and self.ready_pipe is not None:
            os.close(self.ready_pipe)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def private_socket_dir() -> Path:
    """A new directory only this user can enter (mode 0700), for the server's socket: under $XDG_RUNTIME_DIR
    (itself 0700) when set, else the temporary folder, else /tmp when that path would be too long for a
    socket address."""
    for parent in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):
        if (
            parent
            and os.path.isdir(parent)
            and len(os.path.join(parent, "pe-warm-xxxxxxxx", "fork.sock")) <= SOCKET_PATH_MAX
        ):
            return Path(tempfile.mkdtemp(prefix="pe-warm-", dir=parent))
    raise OSError("no folder with a short enough path for the fork server's socket")


class TrialStarter:
    """Starts each trial's child: forked by the fork server when `warm_program` says so (the server is
    started at the first such trial), else a new interpreter (`launch_child`). The first failure of the
    server prints one warning line; from then on every trial of this sweep starts cold."""

    def __init__(self, folder: Path, cold: bool = False, any_python: bool = False):
        self.folder, self.cold, self.any_python = folder, cold, any_python
        self.server: ForkServer | None = None
        self.broken = False
        self.lock = threading.Lock()
        self.stamp: tuple | None = None  # the project's source files when the server started (`source_stamp`)

    def launch(self, argv: list[str], env: dict, log):
        cwd = os.getcwd()
        if self.stamp is not None and not self.broken and source_stamp() != self.stamp:
            # the server runs the code it imported; a trial must run what is on disk now (jsonargparse also
            # reads a data module's source for its forwarded options, which would no longer match its code)
            self._give_up("the project's source files changed since the fork server started", warn="note")
        program = None if self.cold or self.broken else warm_program(argv, cwd, self.any_python)
        if program:
            try:
                server = self._server(env, preload_for(program, cwd))
                return server.launch(argv, {**env, PARENT_ENV: ""}, log, cwd)  # the server names itself
            except (OSError, RuntimeError, ValueError) as error:
                self._give_up(str(error))
        return launch_child(argv, env, log)

    def _server(self, env: dict, modules: tuple[str, ...]) -> "ForkServer":
        """The sweep's one fork server, started (preloading `modules`) at its first warm trial."""
        with self.lock:
            if self.broken:
                raise RuntimeError("already given up")
            if self.server is None:
                reason = available()
                if reason:
                    raise RuntimeError(reason)
                self.stamp = source_stamp()
                self.server = ForkServer(self.folder, modules)
                self.server.start(env)
            return self.server

    def _give_up(self, reason: str, warn: str = "warning: warm start failed") -> None:
        with self.lock:
            if not self.broken:
                print(f"{warn} ({reason.splitlines()[0][:200] if reason else 'no reason'}); starting trials cold",
                      file=sys.stderr)  # fmt: skip
            self.broken = True

    def close(self) -> None:
        with self.lock:
            if self.server is not None:
                self.server.close()


def source_stamp() -> tuple:
    """(path, mtime_ns, size) of every source file of the project's packages: what a fork server preloaded."""
    return tuple(
        (str(path), stat.st_mtime_ns, stat.st_size)
        for package in ("pe_sweeps", "lightning_modules", "datamodules")
        for path in sorted((PACKAGE.parent / package).rglob("*.py"))
        if (stat := path.stat())
    )


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return (lines or ["no output"])[-1].strip()[:200]


# --------------------------------------------------------------------------------------------- server side


def fork_unsafe() -> str | None:
    """Why this process must not fork now (None: it may)."""
    threads = threading.active_count()
    tasks = len(os.listdir("/proc/self/task"))
    if threads > 1 or tasks > 1:
        return f"the fork server runs {max(threads, tasks)} threads (imports started some)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "the fork server initialised CUDA"
    if torch is not None and getattr(torch.cuda, "_cached_device_count", None) is not None:
        return (
            "the fork server counted the GPUs (torch caches the count: a child's CUDA_VISIBLE_DEVICES would be ignored)"
        )
    return None


def preload(names: tuple[str, ...]) -> None:
    """Import `names` (`preload_for`: PRELOAD for cli.py, none for another program), then run each module's
    `prepare_fork_server()` if it has one (pe_sweeps/cli.py builds a trial's LightningCLI parser there, once);
    found by name, so this module imports no command line."""
    import importlib

    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError as error:  # an optional extra (e.g. transformers) that is not installed
            print(f"warm start: not preloaded: {name}: {error}", flush=True)
    for module in modules:
        if callable(getattr(module, "prepare_fork_server", None)):
            module.prepare_fork_server()
    # Everything imported so far is never freed: move it out of the collector's reach, so that a child's
    # collections neither walk it nor write its GC headers, which would copy every page of it (Python's
    # advice for fork servers, `gc.freeze`); about 0.05 s of CPU per trial
    gc.collect()
    gc.freeze()


def receive(connection: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(connection, HEADER.size, 2)
    (size,) = HEADER.unpack(header)
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("request cut short")
        data += chunk
    return json.loads(data), fds


def serve(address: str, sweep_pid: int, ready_fd: int, names: tuple[str, ...]) -> dict | None:
    """The server's loop. Returns only in a forked child, with the request it is to run."""
    sys.path[0] = str(PACKAGE.parent)  # started with `-c` there: '' would follow a child's chdir
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")  # pyarrow (via pandas): no thread
    started, before = time.monotonic(), dict(os.environ)
    try:
        preload(names)
        problem = fork_unsafe()
    except Exception as error:  # noqa: BLE001  (any import failure: the sweep starts its trials cold)
        problem = f"preloading failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    with os.fdopen(ready_fd, "w") as ready:
        if problem:
            ready.write(problem + "\n")
            return None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)  # the socket file is born 0600 (its 0700 folder already keeps others out)
        try:
            listener.bind(address)
        finally:
            os.umask(old_mask)
        listener.listen(64)
        print(f"warm start: {len(sys.modules)} modules imported in {time.monotonic() - started:.1f} s", flush=True)
        ready.write("ready\n")
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so the wake-up fd hears SIGCHLD
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    children: dict[int, socket.socket] = {}
    written = {k: v for k, v in os.environ.items() if before.get(k) != v}  # by imports, e.g. Lightning's
    while os.getppid() == sweep_pid:
        readable = select.select([listener, wake_read], [], [], 0.5)[0]
        if wake_read in readable:
            while os.read(wake_read, 512) == 512:
                pass
        reap(children)
        if listener in readable:
            request = accept(listener, children)
            if request is not None:  # in the child
                request["env"] = {**request["env"], **written}  # as the same imports write them in a cold child
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_read, wake_write):
                    os.close(fd)
                return request
    for pid in children:  # the sweep is gone: stop its trials as its own watchdog would
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    return None


def reap(children: dict[int, socket.socket]) -> None:
    """Send each exited child's status (as Popen.returncode) on its connection."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            except OSError:  # the sweep side went away
                pass
            connection.close()


def accept(listener: socket.socket, children: dict[int, socket.socket]) -> dict | None:
    """Take one request and fork its child; returns the request in the child, None in the server."""
    connection, _ = listener.accept()
    if not own_user(connection):
        connection.close()
        return None
    fds: list[int] = []
    try:
        request, fds = receive(connection)
        request["env"][PARENT_ENV] = str(os.getpid())  # the child's parent; it exits when the sweep does
        problem = fork_unsafe()
        if problem or len(fds) != 2:
            raise RuntimeError(problem or "expected two file descriptors")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except Exception as error:  # noqa: BLE001  (reported to the sweep, which starts this trial cold)
        for fd in fds:
            os.close(fd)
        try:
            connection.sendall(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode() + b"\n")
        except OSError:
            pass
        connection.close()
        return None
    if pid == 0:
        listener.close()
        for other in children.values():
            other.close()
        connection.close()
        request["fds"] = fds
        return request
    for fd in fds:
        os.close(fd)
    children[pid] = connection
    connection.sendall(json.dumps({"pid": pid, "started": process_started(pid)}).encode() + b"\n")  # not reaped yet
    return None


def own_user(connection: socket.socket) -> bool:
    """Whether the peer runs as this server's user (SO_PEERCRED); any other is refused in one logged line."""
    pid, uid, _ = PEER.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEER.size))
    if uid == os.getuid():
        return True
    print(f"warm start: refused a connection from uid {uid} (pid {pid}): only uid {os.getuid()} may start trials",
          flush=True)  # fmt: skip
    return False


def become_trial(request: dict) -> str:
    """In the forked child: take on the trial's session, files, environment, arguments and threads."""
    os.setsid()
    log, stdin = request["fds"]
    os.dup2(stdin, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(stdin)
    os.environ.clear()
    os.environ.update(request["env"])
    pin_trial_cpus()  # its worker slot's cores, before any thread starts
    os.chdir(request["cwd"])
    argv = request["argv"]
    args = argv[argv.index(sys.executable) + 1 :]
    sys.argv = list(args)
    sys.path[0] = str(Path(request["cwd"], args[0]).resolve().parent)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threads = request["env"].get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:  # else torch reads it at its import
        sys.modules["torch"].set_num_threads(int(threads))
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    own_media_dir()
    return args[0]


def own_media_dir() -> None:
    """W&B stages tables and images in one temporary folder made at import time, which every forked trial
    would share and the first to exit would delete under the others: give this trial its own."""
    internals.own_wandb_media_dir()  # the server's folder stays the server's


def main() -> None:
    address, sweep_pid, ready_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    names = tuple(name for name in sys.argv[4].split(",") if name)  # what to preload (`preload_for`)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle (it stops us)
    request = serve(address, sweep_pid, ready_fd, names)
    if request is None:  # the server is leaving: its socket and folder go with it (a killed sweep made them)
        shutil.rmtree(Path(address).parent, ignore_errors=True)
        return
    run_program(become_trial(request))


def run_program(program: str) -> None:
    """Run `program` as `__main__` and exit as the interpreter would (status, traceback, threads joined,
    atexit handlers, stdio flushed), minus the module teardown, which only frees memory: with the ~4,000
    modules of a trial it takes seconds, and a cold child of cli.py pays them as well."""
    import runpy
    import traceback

    code, interrupted = 0, False
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if not isinstance(exit.code, int | None):
            print(exit.code, file=sys.stderr)
    except BaseException as error:  # as the interpreter: print the traceback, exit 1 (or by SIGINT)
        interrupted = isinstance(error, KeyboardInterrupt)
        code = 1
        try:
            sys.excepthook(type(error), error, error.__traceback__)
        except BaseException:  # noqa: BLE001  (a broken hook: the default one)
            traceback.print_exception(error)
    internals.join_non_daemon_threads()  # as Py_Finalize does first
    internals.run_atexit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:  # a Ctrl-C that nothing caught ends the process by SIGINT, as CPython does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)
