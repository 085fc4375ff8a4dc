"""A run's per-example evaluation outcomes (pe_sweeps/runs/outcomes.py), issue 44.1: every validation and test
writes `outcomes/<stage>-step<k>.npz`, the record points to the latest of each stage, and `compare --save_runs`
carries the tables packed into its file.

Claims covered here:
- "fit writes one outcome file per validation, the test one file, and record.json points to the latest; the
  example ids and fingerprint are the same for every seed and encoding on one evaluation set":
  test_fits_write_outcomes_and_compare_save_runs_carries_them
- "`--save_runs` packs each run's tables (bits, float16, ids as a range), read back equal by `outcome_table`":
  test_fits_write_outcomes_and_compare_save_runs_carries_them, test_pack_round_trips_every_column_kind
- "a run with no outcomes (older, or its folder moved) has none, not an error": test_a_run_without_outcomes_has_none
- "an outcome file stores a float column as float16 where every value keeps 3 significant digits (float32
  otherwise), read back as float32": test_outcome_files_keep_floats_in_float16_where_precise_enough
"""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

from pe_sweeps.cli import cli_main
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.saved_runs import read_saved_runs
from pe_sweeps.runs.outcomes import outcome_table, pack, read_table, unpack, write_table
from pe_sweeps.runs.records import RunRecord, load_records


@pytest.mark.slow  # four seconds-long fits
def test_fits_write_outcomes_and_compare_save_runs_carries_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for encoding in ("rope", "alibi"):
        for seed in (0, 1):
            cli_main(["fit", *TINY, f"--run.out_dir={tmp_path}", f"--model.arch.encoding={encoding}",
                      f"--seed_everything={seed}", "--data.seed=7"])  # fmt: skip
    records = load_records(tmp_path)
    assert len(records) == 4
    fingerprints = set()
    for record in records:
        pointer = record.outcomes["val"]
        assert pointer["path"] == "outcomes/val-step4.npz" and pointer["step"] == 4
        assert pointer["examples"] == 64  # 8 lengths x 8 examples
        steps = sorted(p.name for p in (Path(record.run_dir) / "outcomes").iterdir())
        assert steps == ["val-step2.npz", "val-step4.npz"]  # one per validation (val_check_interval=2)
        table = read_table(Path(record.run_dir) / pointer["path"])
        assert table["id"].tolist() == list(range(64))
        assert table["correct"].mean() == pytest.approx(
            np.mean([record.final[f"val/acc_len_{n}"] for n in range(1, 9)])
        )
        fingerprints.add(pointer["fingerprint"])
    assert len(fingerprints) == 1  # one evaluation set (data.seed fixed): its examples pair across runs
    saved = tmp_path / "saved.json"
    compare_main([f"--out_dir={tmp_path}", "--format=csv", f"--save_runs={saved}"])
    assert saved.stat().st_size < 40_000
    data = json.loads(saved.read_text())
    packed = data["records"][0]["outcomes"]["val"]["table"]
    assert packed["columns"]["id"] == {"range": 64} and packed["columns"]["correct"]["kind"] == "bits"
    for record in read_saved_runs(str(saved)).records:
        original = read_table(tmp_path / record.run_dir / record.outcomes["val"]["path"])  # run_dir: relative
        table = outcome_table(record)
        assert table.keys() == original.keys() - {"hash"}
        assert (table["correct"] == original["correct"]).all() and (table["length"] == original["length"]).all()
        assert table["nll"] == pytest.approx(original["nll"], rel=1e-3)


def test_pack_round_trips_every_column_kind():
    rng = np.random.default_rng(0)
    table = {
        "id": np.array([3, 1, 7]), "correct": np.array([True, False, True]),
        "nll": rng.random(3).astype(np.float32), "length": np.array([1, 300, 70000]), "label": np.array([0, 2, 1]),
    }  # fmt: skip
    back = unpack(json.loads(json.dumps(pack(table))))
    assert back["id"].tolist() == [3, 1, 7] and back["correct"].tolist() == [True, False, True]
    assert back["length"].tolist() == [1, 300, 70000] and back["label"].tolist() == [0, 2, 1]
    assert back["nll"] == pytest.approx(table["nll"], rel=1e-3)
    assert pack({"id": np.arange(5)})["columns"]["id"] == {"range": 5}


def test_a_run_without_outcomes_has_none(tmp_path):
    assert outcome_table(RunRecord(run_dir=str(tmp_path))) is None
    moved = RunRecord(run_dir=str(tmp_path), outcomes={"val": {"path": "outcomes/val-step4.npz", "step": 4}})
    assert outcome_table(moved) is None and outcome_table(moved, "test") is None


def test_outcome_files_keep_floats_in_float16_where_precise_enough(tmp_path):
    """A causal LM's evaluation of 3,000 windows: 16.0 bytes per window with float32 columns, 13.8 in float16;
    the 8-byte content digest is most of the rest."""
    rng, n = np.random.default_rng(0), 3000
    table = {
        "id": np.arange(n), "hash": rng.integers(0, 2**62, n), "nll": (3 + 2 * rng.random(n)).astype(np.float32),
        "tokens": np.full(n, 128), "tok_acc": (rng.integers(0, 129, n) / 128).astype(np.float32),
        "context": np.repeat([128, 256, 512], n // 3), "stride": np.zeros(n, dtype=np.int64),
        "tiny": np.full(n, 1e-7, dtype=np.float32), "huge": np.full(n, 1e6, dtype=np.float32),
        "unservable": np.full(n, np.inf, dtype=np.float32),
    }  # fmt: skip
    pointer = write_table(tmp_path, "val", 3, table)
    path = tmp_path / pointer["path"]
    with np.load(path) as stored:
        kinds = {name: stored[name].dtype.name for name in stored.files}
    assert kinds["nll"] == kinds["tok_acc"] == kinds["unservable"] == "float16"
    assert kinds["tiny"] == kinds["huge"] == "float32"  # below float16's normal range, above its largest value
    back = read_table(path)
    assert all(back[name].dtype == np.float32 for name in ("nll", "tok_acc", "tiny", "huge", "unservable"))
    assert back["nll"] == pytest.approx(table["nll"], rel=1e-3) and back["tiny"].tolist() == table["tiny"].tolist()
    assert np.average(back["nll"], weights=back["tokens"]) == pytest.approx(table["nll"].mean(), rel=1e-5)
    assert back["id"].tolist() == list(range(n)) and back["hash"].tolist() == table["hash"].tolist()
    without = {k: v for k, v in table.items() if k not in ("tiny", "huge", "unservable")}
    compact = write_table(tmp_path, "val", 4, without)
    assert (tmp_path / compact["path"]).stat().st_size / n < 14.5
