"""The dependency rules of the source tree, read from the import statements (ast; nothing is imported):
lightning_modules depends on neither datamodules nor pe_sweeps.tracking, no module imports itself through others,
no code writes its own process environment (tracking/wandb_setup.py aside: W&B's mode), and the distribution
installs every package of the tree and no generic top-level module."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lightning_modules", "datamodules", "pe_sweeps")
TOP_LEVEL = ("cli",)  # a three-line script in a checkout (`python cli.py`), not installed
# tracking.wandb_setup sets WANDB_MODE / WANDB_SILENT for the W&B client it starts; tracking.warm_start's
# forked child takes on the trial's environment (what a cold child gets from its parent)
ENV_WRITERS = {"pe_sweeps.tracking.wandb_setup", "pe_sweeps.tracking.warm_start"}


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


def test_lightning_modules_import_neither_datamodules_nor_tracking():
    bad = {
        (m, d) for m, deps in graph().items() if m.startswith("lightning_modules") for d in deps
        if d.split(".")[0] == "datamodules" or d.startswith("pe_sweeps.tracking") or d == "pe_sweeps.cli"
    }  # fmt: skip
    assert not bad


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
