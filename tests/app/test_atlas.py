"""The atlas (issue 49, 1): sweeps/atlas.yaml and sweeps/atlas_pilot.yaml are what `python scripts/make_atlas.py`
writes from the registries now (a new encoding or task fails here until they are regenerated), they load as sweep
files, their grids span encodings x tasks x seeds, and each task's chance level is the one its runs log."""

import pytest

from pe_sweeps import atlas
from pe_sweeps.sweep.sweep_file import grid_points, load_sweep
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # imports the data modules (Lightning)


@pytest.fixture(scope="module")
def files():
    return atlas.atlas_files()


@pytest.mark.parametrize("path", [atlas.ATLAS_PATH, atlas.PILOT_PATH], ids=str)
def test_committed_atlas_is_what_the_registries_make(files, path):
    committed = (ROOT / path).read_text() if (ROOT / path).exists() else ""
    assert committed == files[path], f"{path} is out of date with the registries: run `{atlas.COMMAND}`"


def test_grids_span_encodings_tasks_and_seeds(files, tmp_path):
    from datamodules.tasks import TASKS
    from lightning_modules.encodings import ENCODINGS

    encodings, left_encodings = atlas.encodings()
    tasks, left_tasks = atlas.tasks()
    assert sorted([*encodings, *left_encodings]) == sorted(ENCODINGS) and sorted([*tasks, *left_tasks]) == sorted(TASKS)
    for path, points in ((atlas.ATLAS_PATH, len(encodings) * len(tasks) * 2), (atlas.PILOT_PATH, 3 * len(tasks))):
        (tmp_path / path.name).write_text(files[path])
        sweep = load_sweep(tmp_path / path.name)
        assert len(grid_points(sweep)) == points
        assert set(sweep["parameters"]) == {"model.arch.encoding", "data.task", "seed_everything"}
        assert len(sweep["compare"]["precondition"]) == len(tasks)  # one per task column
    assert len(encodings) >= 30 and len(tasks) >= 30  # left-outs are exceptions, named in the header


def test_a_new_task_changes_the_atlas(files, monkeypatch):
    from datamodules import tasks

    monkeypatch.setitem(tasks.TASKS, "copy_again", tasks.TASKS["copy"])
    assert "copy_again:val/acc >" in atlas.atlas_files()[atlas.ATLAS_PATH]


@pytest.mark.parametrize("task", ["copy", "parity_check"])
def test_chance_level_is_what_the_runs_log(task):
    from datamodules.synthetic import SyntheticDataModule

    logged = []
    for seed in atlas.SEEDS:
        data = SyntheticDataModule(task=task, causal=atlas.CAUSAL, seed=seed, **atlas.DATA)
        data.setup("validate")
        logged.append(data.constant_accuracy("val"))
    assert atlas.chance_level(task) == pytest.approx(sum(logged) / len(logged))
    assert 0 < atlas.chance_level(task) < atlas.threshold(atlas.chance_level(task)) + 1e-4
