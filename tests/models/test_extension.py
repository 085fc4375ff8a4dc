"""The extension promise (issue 28, item 6): a new encoding is one new file plus one line in the encoding
registry, a new task one new module (generator and reference) plus one line in the task registry, and the
registry-parametrised tests pick both up with no other edit: no per-entry table in a test file, no paper sweep
file to extend.

The test copies the tracked tree into tmp_path (a git repository of its own), adds two toy encodings and a toy
task (answer: the first symbol), asserts that git sees exactly the two registry files modified and the three new
files, and runs the tests of the copy restricted to the toy entries (`-k toy`): they must be collected from the
copy and pass. The two encodings are the two kinds a newcomer writes: a stateful one (the scaled sinusoid with
its scale starting at 1, its own `init_reference`) and a stateless bias (a fixed distance penalty with no
parameter, no buffer and no FlexAttention score_mod), which once met two traps: a hard-coded set of encodings
without a FlexAttention path (tests/models/test_flex.py) and `positional_logits` building its positions on the CPU for
a module with no tensors.

Claims of docs/encodings.md and docs/tasks.md covered here:
- "A new encoding is one file ... plus one line in ENCODINGS; the registry-parametrised tests ... pick it up
  with no edit": test_a_toy_encoding_and_task_touch_two_files_and_pass_the_registry_tests
- "A new task is one generator, one reference ... and one line in TASKS":
  test_a_toy_encoding_and_task_touch_two_files_and_pass_the_registry_tests
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENCODING_REGISTRY = "lightning_modules/encodings/__init__.py"
TASK_REGISTRY = "datamodules/tasks/__init__.py"
TOY_ENCODING = "lightning_modules/encodings/toy_sinusoidal.py"
TOY_BIAS = "lightning_modules/encodings/toy_distance_bias.py"
TOY_TASK = "datamodules/tasks/toy.py"

# the registry-parametrised test files (every one runs over ENCODINGS or TASKS), and the sweep and preset tests
REGISTRY_TESTS = [
    "tests/models/test_encodings_contract.py",
    "tests/models/test_encodings_batching.py",
    "tests/models/test_transformer.py",
    "tests/models/test_flex.py",
    "tests/models/test_kv_cache.py",
    "tests/models/test_precision.py",
    "tests/app/test_probes.py",
    "tests/models/test_translation.py",
    "tests/data/test_tasks.py",
    "tests/data/test_synthetic.py",
    "tests/sweep/test_sweep_file.py",
    "tests/app/test_presets.py",
]
# the tests that loop over a whole registry inside one test (a new entry must not break them either)
REGISTRY_WIDE = [
    "test_flex_flag_matches_the_score_mod_hooks", "test_only_shaw_replaces_sdpa", "test_every_option_is_accepted",
    "test_the_documented_options_and_defaults_are_the_encodings", "test_unknown_encoding_names_the_choices",
    "test_cacheable_declarations", "test_families_cover_the_paper_suites", "test_paper_sweeps_list_registered_entries",
    "test_sweep_grids_are_the_documented_ones",
]  # fmt: skip

TOY_ENCODING_SOURCE = '''"""A toy encoding (test_extension.py): the scaled sinusoid, its scale starting at 1."""

from torch import nn

from lightning_modules.encodings.init_reference import ONES
from lightning_modules.encodings.scaled_sinusoidal import ScaledSinusoidal


class ToySinusoidal(ScaledSinusoidal):
    """`scaled_sinusoidal` with the scale initialised to 1 (the plain sinusoid at step 0)."""

    name = "toy_sinusoidal"
    init_reference = {"scale": ONES}

    def __init__(self, **options):
        super().__init__(**options)
        nn.init.ones_(self.scale)
'''

TOY_BIAS_SOURCE = '''"""A toy encoding (test_extension.py): a fixed distance penalty, stateless, no score_mod."""

from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.t5_bias import relative_distance


class ToyDistanceBias(PositionalEncoding):
    """Logit bias -0.1 |i - j| on every head: no parameter, no buffer, no FlexAttention score_mod."""

    name = "toy_distance_bias"
    init_reference = {}
    shift_invariant = True

    def bias(self, positions: Tensor) -> Tensor:
        distance = relative_distance(positions).abs().float().unsqueeze(-3)  # (..., 1, L, L)
        return -0.1 * distance.repeat_interleave(self.num_heads, dim=-3)  # (..., H, L, L)
'''

TOY_TASK_SOURCE = '''"""A toy task (tests/models/test_extension.py): the answer is the prompt's first symbol."""

from datamodules.tasks.tokens import SYMBOL0


def toy_first(rng, n, num_symbols, train_max_len):
    """prompt = x (n random symbols), answer = [x[0]]."""
    x = (SYMBOL0 + rng.integers(0, num_symbols, size=n)).tolist()
    return x, x[:1]


def toy_first_reference(prompt, n, num_symbols, train_max_len):
    return prompt[:1]
'''


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


def copy_tracked_tree(repo: Path) -> None:
    """The tracked files of this checkout (as they are on disk), committed in a fresh repository."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the tracked tree")


def insert_after_last(text: str, pattern: str, line: str) -> str:
    """`line` inserted after the last line matching `pattern` (a registry's import block)."""
    *_, last = re.finditer(pattern, text, flags=re.M)
    return text[: last.end()] + "\n" + line + text[last.end() :]


def register_toys(repo: Path) -> None:
    """What a user writes: two new files and, in each registry, its import and its one entry."""
    (repo / TOY_ENCODING).write_text(TOY_ENCODING_SOURCE)
    (repo / TOY_BIAS).write_text(TOY_BIAS_SOURCE)
    (repo / TOY_TASK).write_text(TOY_TASK_SOURCE)

    path = repo / ENCODING_REGISTRY
    text = insert_after_last(
        path.read_text(), r"^from lightning_modules\.encodings\.\w+ import .*$",
        "from lightning_modules.encodings.toy_sinusoidal import ToySinusoidal\n"
        "from lightning_modules.encodings.toy_distance_bias import ToyDistanceBias",
    )  # fmt: skip
    entries = re.compile(r"(ENCODINGS: dict\[.*?\n(?:    .*\n)*?)(\})")  # the registry's tuples of classes
    assert entries.search(text), f"{ENCODING_REGISTRY}: the ENCODINGS block changed shape; update this test"
    text = entries.sub(lambda m: m[1] + "    + (ToySinusoidal, ToyDistanceBias)\n" + m[2], text, count=1)
    path.write_text(text)

    path = repo / TASK_REGISTRY
    text = insert_after_last(
        path.read_text(), r"^from datamodules\.tasks import .*$", "from datamodules.tasks import toy"
    )
    end = "\n}\n\nCHOMSKY_FAMILIES"  # the end of the TASKS block
    assert end in text, f"{TASK_REGISTRY}: the TASKS block changed shape; update this test"
    path.write_text(text.replace(end, '\n    "toy_first": _entry(toy, "toy_first", "basic"),' + end))


@pytest.mark.slow  # copies the tree and starts a pytest process
def test_a_toy_encoding_and_task_touch_two_files_and_pass_the_registry_tests(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the tracked tree is copied)")
    repo = tmp_path / "repo"
    copy_tracked_tree(repo)
    register_toys(repo)

    status = sorted(git(repo, "status", "--porcelain", "--untracked-files=all").splitlines())
    new = [f"?? {TOY_ENCODING}", f"?? {TOY_BIAS}", f"?? {TOY_TASK}"]
    assert status == sorted([f" M {ENCODING_REGISTRY}", f" M {TASK_REGISTRY}", *new])
    added_lines = {ENCODING_REGISTRY: 3, TASK_REGISTRY: 2}  # an import per new module and one entry line
    for line in git(repo, "diff", "--numstat").splitlines():  # nothing removed
        added, removed, name = line.split("\t")
        assert (int(added), int(removed)) == (added_lines[name], 0), line

    # the copy's modules are the ones imported (cwd first on sys.path; pytest's pythonpath = ["."])
    found = subprocess.run(
        [sys.executable, "-c", "import lightning_modules.encodings as e, datamodules.tasks as t; "
         "print(e.__file__, {'toy_sinusoidal', 'toy_distance_bias'} <= set(e.ENCODINGS), 'toy_first' in t.TASKS)"],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert found == [str(repo / ENCODING_REGISTRY), "True", "True"]

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-o", "addopts=", "-v",
         "-k", " or ".join(["toy", *REGISTRY_WIDE]), *REGISTRY_TESTS],
        cwd=repo, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    outcomes = [line.split() for line in result.stdout.splitlines() if "::" in line and line.startswith("tests/")]
    passed = [test for test, outcome, *_ in outcomes if outcome == "PASSED"]
    for toy in ("toy_sinusoidal", "toy_distance_bias", "toy_first"):  # each reached the registry-parametrised tests
        assert sum(toy in test for test in passed) >= 10, (toy, result.stdout[-2000:])
    assert {test.split("::")[1].split("[")[0] for test in passed} >= set(REGISTRY_WIDE)
    assert (
        "tests/models/test_encodings_contract.py::test_initialisation_matches_the_reference[toy_sinusoidal]" in passed
    )
    for trap in (  # the two places a stateless bias encoding without a score_mod once failed
        "tests/models/test_encodings_contract.py::test_positional_logits_follow_the_module_device[toy_distance_bias]",
        "tests/models/test_flex.py::test_forced_flex_refuses_what_it_cannot_serve[toy_distance_bias]",
    ):
        assert trap in passed, trap
    assert any(test.startswith("tests/data/test_tasks.py::test_answer_matches_the_reference") and "toy_first" in test
               for test in passed)  # fmt: skip
