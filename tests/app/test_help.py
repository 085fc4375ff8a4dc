"""Every --help of the command line (issue 45.6): within 80 columns, naming no function of the code, and quick:
`cli.py --help`, `sweep --help` and `compare --help` import neither torch, Lightning, W&B nor Optuna, and a help
that needs them (`fit --help`, `probe --help`) is printed from its cache once built (pe_sweeps/help_cache.py).
Imports are checked, not times (benchmarks/help_time.py measures those)."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from datamodules.registry import DATA_MODULES
from lightning_modules.registry import TASK_MODULE_PATHS
from pe_sweeps import help_cache
from pe_sweeps.cli import cli_main
from pe_sweeps.light_commands import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
HELPS = [
    ["--help"],
    *([name, "--help"] for name in SUBCOMMANDS),
    *(["fit", "--model.help", name] for name in sorted(TASK_MODULE_PATHS)),
    *(["fit", "--data.help", name] for name in sorted(DATA_MODULES)),
]
HEAVY = ("torch", "pytorch_lightning", "lightning_fabric", "wandb", "optuna", "datasets", "transformers")


def project_functions() -> set[str]:
    """Every function and method name defined in the project's packages, less Lightning's public Trainer and
    LightningCLI methods that the project overrides (PECLI.fit): Lightning's own help text names `trainer.fit`."""
    from pytorch_lightning import Trainer
    from pytorch_lightning.cli import LightningCLI

    lightnings = {name for cls in (Trainer, LightningCLI) for name in dir(cls) if not name.startswith("_")}
    return {
        node.name for package in ("pe_core", "lightning_modules", "datamodules", "pe_sweeps")
        for path in (ROOT / package).rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    } - lightnings  # fmt: skip


def internal_names(text: str, functions: set[str]) -> set[str]:
    """Names of the code's functions a help shows as code: `resolve_workers`, `check()`, `x.make_cli`, `_private`
    (an option's value such as `encoding` or a task name like `even_pairs` in a list is the user's word)."""
    named = set()
    for quoted in re.findall(r"`([A-Za-z_][\w.]*)(?:\(\))?`", text):
        last = quoted.rsplit(".", 1)[-1]
        if last in functions and ("_" in last or quoted.endswith("()") or "." in quoted):
            named.add(quoted)
    named |= set(re.findall(r"(?<![\w.-])([a-z]\w*_\w*)\(\)", text)) & functions
    return named


def help_text(argv: list[str], capsys) -> str:
    """What `cli.py ARGV` prints, run in this process."""
    with pytest.raises(SystemExit) if argv != ["--help"] else _nothing() as exit_:
        cli_main(list(argv))
    assert exit_ is None or exit_.value.code in (0, None)
    return capsys.readouterr().out


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
def test_every_help_fits_80_columns_and_names_no_internal_function(argv, capsys, monkeypatch):
    """Before: `fit --help` had 53 lines of 81-113 columns (its usage listed every --trainer.* again, a heading was
    a whole docstring line), `--data.help SyntheticDataModule` a 400-column list of tasks, and `sweep --help` once
    said "see `resolve_workers`"."""
    monkeypatch.setenv("COLUMNS", "80")
    text = help_text(argv, capsys)
    assert text.strip()
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide[:3]
    assert not internal_names(text, project_functions())


def test_the_internal_name_check_finds_what_it_should():
    functions = {"resolve_workers", "make_cli", "overview", "even_pairs"}
    assert internal_names("auto: see `resolve_workers`", functions) == {"resolve_workers"}
    assert internal_names("built by `pe_sweeps.cli.make_cli`, then overview()", functions) == {"pe_sweeps.cli.make_cli"}
    assert not internal_names("tasks {copy,even_pairs}; `overview` of `encoding`", functions)


def imported(argv: list[str], env: dict) -> tuple[str, set[str]]:
    """stdout of `python -X importtime cli.py ARGV` and the modules it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "cli.py"), *argv], capture_output=True,
                          text=True, cwd=os.getcwd(), env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, set(re.findall(r"^import time:.*\| +(\S+)$", done.stderr, re.MULTILINE))


LIGHT = [(["--help"], HEAVY), (["sweep", "--help"], HEAVY), (["compare", "--help"], HEAVY),
         (["probe", "--help"], tuple(name for name in HEAVY if name != "torch") + ("sklearn",))]  # fmt: skip


@pytest.mark.parametrize(("argv", "heavy"), LIGHT, ids=[" ".join(argv) for argv, _ in LIGHT])
def test_helps_built_afresh_import_only_what_they_need(argv, heavy):
    """Before: `cli.py --help` imported torch, Lightning and transformers (3,800 modules, 9 s on an idle 2-core
    machine), `sweep --help` W&B and Optuna (1,275 modules), `probe --help` Lightning and scikit-learn (4,450
    modules; it needs the encoding registry's names only, hence torch). Checked without the cache."""
    out, modules = imported(argv, {**os.environ, "PE_CACHE_DIR": "", "COLUMNS": "80"})
    assert "usage:" in out
    assert not [name for name in heavy if name in modules]


CACHED = [["fit", "--help"], ["probe", "--help"], ["fit", "--model.help", "SyntheticTaskModel"]]


@pytest.mark.parametrize("argv", CACHED, ids=" ".join)
def test_a_help_once_built_is_printed_again_without_torch(argv, tmp_path, monkeypatch, capsys):
    """`fit --help` needs Lightning's classes (13 s of imports under -X importtime); once printed, the same help
    is printed from the cache, importing none of them, until what it is built from changes."""
    monkeypatch.setenv("PE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")
    assert help_cache.cached_help(argv) is None
    with pytest.raises(SystemExit), help_cache.recorded_help(argv):
        cli_main(list(argv))
    built = capsys.readouterr().out
    assert help_cache.cached_help(argv) == built
    out, modules = imported(argv, dict(os.environ))
    assert out == built
    assert not [name for name in HEAVY if name in modules]


def test_the_cache_key_follows_the_sources_and_the_environment(tmp_path, monkeypatch):
    """A changed source file, library, default-setting variable or width is another key: never a stale help."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("x = 1\n")
    monkeypatch.setattr(help_cache, "PROJECT", tmp_path)
    monkeypatch.setattr(help_cache, "SOURCES", ("pkg",))
    monkeypatch.setenv("COLUMNS", "80")
    argv = ["fit", "--help"]
    first = help_cache.help_key(argv)
    assert help_cache.help_key(argv) == first
    (package / "mod.py").write_text("x = 12\n")
    assert help_cache.help_key(argv) != first
    second = help_cache.help_key(argv)
    monkeypatch.setenv("WANDB_PROJECT", "another")
    assert help_cache.help_key(argv) != second
    third = help_cache.help_key(argv)
    monkeypatch.setenv("COLUMNS", "120")
    assert help_cache.help_key(argv) != third
    assert help_cache.help_key(["validate", "--help"]) != help_cache.help_key(argv)


@pytest.mark.parametrize(
    ("argv", "is_help"),
    [(["fit", "--help"], True), (["probe", "-h"], True), (["fit", "--model.help", "X"], True),
     (["fit", "--data.help=X", "--help"], True), (["fit", "--config", "c.yaml", "--help"], False),
     (["sweep", "s.yaml", "--help"], False), (["fit"], False), (["--help"], False), (["nope", "--help"], False)],
)  # fmt: skip
def test_only_a_bare_help_is_cached(argv, is_help):
    """A help with a --config (whose file can change) or other arguments is always built afresh."""
    assert help_cache.is_help(argv) is is_help
