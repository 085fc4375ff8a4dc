"""The dependency rules of the source tree, read from the import statements (ast; nothing is imported): the
floors (pe_core at the bottom, imports none of the project; lightning_modules on it, never datamodules or the
application; datamodules on both, never the application; pe_sweeps on top), each room of pe_sweeps entered only
through the modules its `__all__` names, no module imports itself through others, no code writes its own process
environment (runs/wandb_setup.py aside: W&B's mode), and the distribution installs every package of the tree and
no generic top-level module. One test imports the models and data with the application blocked."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pe_core", "lightning_modules", "datamodules", "pe_sweeps")
ROOMS = ("pe_sweeps.sweep", "pe_sweeps.storages", "pe_sweeps.runs", "pe_sweeps.compare", "pe_sweeps.launchers")
TOP_LEVEL = ("cli",)  # a three-line script in a checkout (`python cli.py`), not installed
# runs.wandb_setup sets WANDB_MODE / WANDB_SILENT for the W&B client it starts; sweep.warm_start's
# forked child takes on the trial's environment (what a cold child gets from its parent)
ENV_WRITERS = {"pe_sweeps.runs.wandb_setup", "pe_sweeps.sweep.warm_start"}


def source_files() -> dict[str, Path]:
    """{dotted module name: file} of every project module."""
    files = {name: ROOT / f"{name}.py" for name in TOP_LEVEL}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imports(path: Path, modules: set[str]) -> set[str]:
    """Project modules `path` imports anywhere (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # a submodule, else the module
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            ]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    files = source_files()
    return {name: imports(path, set(files)) - {name} for name, path in files.items()}


FLOORS = {  # package -> the project packages it may import
    "pe_core": set(),
    "lightning_modules": {"pe_core"},
    "datamodules": {"pe_core", "lightning_modules"},
    "pe_sweeps": {"pe_core", "lightning_modules", "datamodules"},
}


def test_each_floor_imports_only_the_floors_below_it():
    bad = {
        (m, d) for m, deps in graph().items() if m != "cli" for d in deps
        if d.split(".")[0] != m.split(".")[0] and d.split(".")[0] not in FLOORS[m.split(".")[0]]
    }  # fmt: skip
    assert not bad, sorted(bad)


def public_modules(room: str) -> set[str]:
    """The modules a room's `__init__.py` names in `__all__` (read with ast)."""
    init = ROOT / room.replace(".", "/") / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            return {f"{room}.{name}" for name in ast.literal_eval(node.value)}
    raise AssertionError(f"{init} has no __all__")


def test_rooms_are_entered_through_their_public_modules():
    """Outside a room of pe_sweeps, code imports only the modules its `__all__` names (tests may reach in)."""
    modules = set(source_files())
    for room in ROOMS:
        public = public_modules(room)
        assert public <= modules, public - modules
        inside = {m for m in modules if m.startswith(room + ".")}
        bad = {(m, d) for m, deps in graph().items() if not m.startswith(room + ".") for d in deps & inside - public}
        assert not bad, (room, sorted(bad))


BLOCKED_IMPORT = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pe_sweeps" or name.startswith("pe_sweeps."):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Blocked())
from lightning_modules.arch import ArchConfig
from lightning_modules.synthetic_model import SyntheticTaskModel
SyntheticTaskModel(ArchConfig("rope", dim=16, depth=1, num_heads=2))
"""


def test_models_and_data_work_without_the_application():
    """Every model and data module imports, and a model builds, with pe_sweeps unimportable."""
    out = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT + "import " + ", ".join(sorted(project_modules()))],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]


def project_modules() -> set[str]:
    """Every module of lightning_modules and datamodules (the ones the blocked import must load)."""
    return {
        m for m in source_files() if m.split(".")[0] in ("lightning_modules", "datamodules") and "__main__" not in m
    }


def test_no_import_cycles():
    deps = graph()
    cycles = []

    def visit(module: str, path: list[str], done: set[str]) -> None:
        for dep in sorted(deps[module]):
            if dep in path:
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in done:
                visit(dep, [*path, dep], done)
        done.add(module)

    done: set[str] = set()
    for module in sorted(deps):
        if module not in done:
            visit(module, [module], done)
    assert not cycles, cycles[:3]


def test_no_module_writes_its_own_environment():
    writers = set()
    for name, path in source_files().items():
        for node in ast.walk(ast.parse(path.read_text())):
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "func", None)
            text = ast.unparse(target) if target is not None else ""
            if text.startswith("os.environ[") or text in ("os.environ.setdefault", "os.putenv", "os.environ.update"):
                writers.add(name)
    assert writers <= ENV_WRITERS, writers - ENV_WRITERS


def test_the_distribution_lists_every_package_and_no_loose_module():
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py-modules" not in setup  # generic names (errors, layout) would shadow a user's own modules
    listed = set(setup["packages"])
    on_disk = {
        ".".join(path.parent.relative_to(ROOT).parts) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }
    assert on_disk <= listed, on_disk - listed
    assert sorted(p.stem for p in ROOT.glob("*.py")) == list(TOP_LEVEL)


COMPARE_WITHOUT_TORCH = """
import sys
from pathlib import Path
from pe_sweeps.runs.records import RunRecord, write_record

root = Path(sys.argv[1])
for seed, acc in enumerate([0.9, 0.7, 0.8]):
    final = {"val/acc": acc, "val/acc_ood": acc / 2}
    config = {"seed_everything": seed, "model": {"init_args": {"arch": {"encoding": "rope"}}},
              "data": {"init_args": {"task": "copy"}}}
    record = RunRecord.from_dict({"name": f"copy-rope-s{seed}", "task": "copy", "encoding": "rope", "seed": seed,
                                  "status": "finished", "config": config, "final": final, "best": final})
    write_record(root / "runs" / f"r{seed}" / "record.json", record)
sys.argv = ["cli.py", "compare", "--out_dir", str(root), "--metric", "val/acc,val/acc_ood"]
from pe_sweeps.entry import main
assert main() is None  # `pe-sweeps` hands it to sys.exit: a value would be printed, exit 1
heavy = sorted(m for m in ("torch", "pytorch_lightning", "lightning_fabric", "transformers", "torchmetrics", "wandb")
               if m in sys.modules)
print("HEAVY", heavy)
"""


def test_compare_starts_without_torch_lightning_or_wandb(tmp_path):
    """`cli.py compare` reads JSON records: it imports none of the training stack (6.4 s of imports before; issue
    29), and still prints the table."""
    result = subprocess.run([sys.executable, "-c", COMPARE_WITHOUT_TORCH, str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout, result.stdout[-500:]
    assert "rope" in result.stdout and "val/acc_ood" in result.stdout


SWEEP_WITHOUT_TORCH = """
import sys
from pathlib import Path
import yaml

root, fake = Path(sys.argv[1]), sys.argv[2]
sweep = {"program": fake, "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
         "parameters": {"x": {"values": [1, 2]}}, "command": ["${env}", "${interpreter}", "${program}", "${args}"]}
(root / "s.yaml").write_text(yaml.safe_dump(sweep))
sys.argv = ["cli.py", "sweep", str(root / "s.yaml"), "--out_dir", str(root), "--cold_start"]
from pe_sweeps.entry import main
assert main() is None  # `pe-sweeps` hands it to sys.exit: a value would be printed, exit 1
heavy = sorted(m for m in ("torch", "pytorch_lightning", "lightning_fabric", "transformers", "torchmetrics")
               if m in sys.modules)
print("HEAVY", heavy)
"""


def test_a_sweep_process_starts_without_torch_or_lightning(tmp_path):
    """The sweep process only schedules trials (each trial, or the warm-start server, imports the training
    stack): `cli.py sweep` imports neither torch nor Lightning (~6 s of a start on 2 busy cores), and its grid
    still runs to the end."""
    fake = str(ROOT / "tests" / "fake_fit.py")
    result = subprocess.run([sys.executable, "-c", SWEEP_WITHOUT_TORCH, str(tmp_path), fake], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "WANDB_MODE": "disabled",
                            "FAKE_SLEEP": "0.1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout, result.stdout[-500:]
    assert "done 2  running 0  failed 0" in result.stdout, result.stdout[-1500:]  # both grid points ran


def test_test_files_have_unique_names():
    """Test rooms have no __init__.py (pytest's prepend import mode): two test files of one name would collide."""
    names = [path.name for path in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(name for name in set(names) if names.count(name) > 1)


def test_a_test_module_imports_test_modules_of_its_own_room_only():
    """pytest puts each test file's own folder on sys.path: a test module of another room imports only when some
    earlier test happened to load it (order-dependent), so shared helpers live in tests/*.py instead."""
    rooms = {path.stem: path.parent for path in (ROOT / "tests").rglob("test_*.py")}
    bad = []
    for name, room in rooms.items():
        for node in ast.walk(ast.parse((room / f"{name}.py").read_text())):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            imported += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            bad += [(name, m) for m in imported if m in rooms and rooms[m] != room]
    assert not bad, bad
