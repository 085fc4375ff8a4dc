"""PE-Study probes (Wang & Chen 2020): the sinusoid's published scores, every encoding probed and labelled,
figure shapes, a trained checkpoint, W&B logging and one-line errors.

Claims of docs/probes.md covered here:
- "cli.py probe --encoding sinusoidal --max-length 512 --dim 768 # MAE 0.0, relative error ~5-6 %":
  test_sinusoid_scores_as_in_the_paper
- "cli.py probe --ckpt out/runs/<run>/checkpoints/last.ckpt --report out/probe": test_trained_learned_checkpoint
- "probing a finished run's checkpoint adds probe/abs_mae and probe/rel_error to its record (`compare --metric
  probe/abs_mae` tabulates them)": test_trained_learned_checkpoint
- "Absolute position regression (least squares, 5-fold CV, MAE of the rounded prediction) and relative position
  classification (logistic regression on concatenated pairs, 5-fold CV, error rate, mean and spread over seeds) on
  the embedding table": test_sinusoid_scores_as_in_the_paper, test_probe_functions_are_seeded,
  test_rounding_noise_is_collapsed_but_signal_kept
- "for encodings without one, on the first layer's hidden states of a constant input (labelled as such: for purely
  relative encodings these rows are identical and the probe reports chance)":
  test_every_encoding_is_probed_and_labelled, test_rope_hidden_states_are_labelled_and_flagged,
  test_untrained_learned_table_is_called_random
- "--report writes the cosine-similarity heatmap, a PCA plot and per-head heatmaps of positional_logits":
  test_every_encoding_is_probed_and_labelled, test_figure_arrays_shapes,
  test_figures_and_numbers_go_to_an_active_wandb_run
- bad probe input is one line, exit 2: test_bad_input_is_one_line, test_unreadable_checkpoint_is_one_line,
  test_cli_reports_bad_input_in_one_line
"""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_modules.encodings import ENCODINGS, PositionalEncoding
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main
from pe_sweeps.compare.command import compare_main
from pe_sweeps.layout import RECORD_FILE
from pe_sweeps.probes import (
    ABS_MAE,
    HIDDEN,
    HIDDEN_ABS_MAE,
    REL_ERR,
    REL_ERROR,
    TABLE,
    ProbeOptions,
    absolute_position_mae,
    build_bare,
    collapse_rounding_noise,
    figure_arrays,
    position_vectors,
    probe_main,
    relative_position_error,
)
from pe_sweeps.runs.records import load_records, write_record

SMALL = ["--max-length", "32", "--dim", "32", "--num-heads", "4", "--pairs", "64", "--seeds", "2"]


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow  # 512 x 768 probe over 5 seeds: ~80 s on a busy 2-core CPU, kept out of the inner loop
def test_sinusoid_scores_as_in_the_paper(tmp_path):
    """Absolute MAE exactly 0; relative error 4.1-7.8 % over seeds in the paper: mean within 2-10 %."""
    args = ["--encoding", "sinusoidal", "--max-length", "512", "--dim", "768", "--pairs", "512", "--seeds", "5"]
    result = probe_main([*args, "--report", str(tmp_path)])
    assert result.source == TABLE and (result.positions, result.width) == (512, 768)
    assert result.absolute_mae == 0.0
    assert len(result.relative_errors) == 5
    assert 0.02 <= result.relative["mean"] <= 0.10
    assert result.relative["std"] > 0  # 512 pairs: the score moves with the seed
    index = (tmp_path / "index.html").read_text()
    for png in ("cosine.png", "pca.png"):
        assert (tmp_path / png).stat().st_size > 0 and png in index
    assert not (tmp_path / "logits.png").exists()  # the sinusoid adds no logit term
    assert (tmp_path / "attention.png").stat().st_size > 0  # but the attention logits of a constant input


def test_probe_functions_are_seeded():
    E = ENCODINGS["sinusoidal"](dim=64, num_heads=4, max_length=64, causal=True).weight.double().numpy()
    assert relative_position_error(E, 64, seed=3) == relative_position_error(E, 64, seed=3)
    assert absolute_position_mae(E, seed=1) == absolute_position_mae(E, seed=1)


@pytest.mark.parametrize("name", ENCODINGS)
def test_every_encoding_is_probed_and_labelled(name, tmp_path, capsys):
    result = probe_main(["--encoding", name, *SMALL, "--report", str(tmp_path)])
    encoding = build_bare(ProbeOptions(encoding=name, dim=32, num_heads=4), 32).encoding
    assert result.source == (TABLE if getattr(encoding, "weight", None) is not None else HIDDEN)
    assert math.isfinite(result.absolute_mae) and all(0 <= e <= 1 for e in result.relative_errors)
    out = one_line(capsys.readouterr().out)
    assert result.source in out and "absolute MAE" in out
    files = {p.name for p in tmp_path.iterdir()}
    assert {"cosine.png", "pca.png", "index.html", "probe.json"} <= files
    assert ("logits.png" in files) == (encoding.positional_logits(8) is not None)


@pytest.mark.parametrize("name", ENCODINGS)
def test_an_encoding_with_an_absolute_table_is_probed_as_its_table(name):
    """A trainable (>= N, C) position table is what PE-Study probes: the encoding exposes it as `weight` (the probe
    said "no position signal" for TUPE, whose table it did not find; issue 29)."""
    encoding = build_bare(ProbeOptions(encoding=name, dim=32, num_heads=4), 32).encoding
    absolute = not encoding.shift_invariant  # a relative table (DeBERTa's, by distance) is not what is probed
    linear = {id(m.weight) for m in encoding.modules() if isinstance(m, torch.nn.Linear)}  # projections, not tables
    tables = [
        p
        for p in encoding.parameters()
        if absolute and id(p) not in linear and p.dim() == 2 and p.shape[0] >= 32 and p.shape[1] == 32
    ]
    weight = getattr(encoding, "weight", None)
    assert (weight is not None) >= bool(tables), f"{name} holds a position table but exposes no `weight`"
    if weight is not None:
        assert tuple(weight.shape) == (encoding.num_positions, 32)


def test_tupe_is_probed_as_its_table_without_the_cls_row():
    encoding = build_bare(ProbeOptions(encoding="tupe_a", dim=32, num_heads=4), 32).encoding
    assert torch.equal(encoding.weight, encoding.table.weight[1:])  # row p + 1 holds position p
    assert probe_main(["--encoding", "tupe_r", *SMALL]).source == TABLE


def test_rope_hidden_states_are_labelled_and_flagged(capsys):
    """RoPE only rotates q, k: a constant input averages identical values, so no position reaches the
    hidden states; the probe says what it probed and that the rows carry no signal."""
    result = probe_main(["--encoding", "rope", *SMALL])
    out = one_line(capsys.readouterr().out)
    assert result.source == HIDDEN == "first-layer hidden states of a constant input"
    assert "not an embedding table" in out and "identical rows" in out
    assert result.identical_rows


def test_untrained_learned_table_is_called_random(capsys):
    result = probe_main(["--encoding", "learned", *SMALL])
    assert result.source == TABLE
    assert "untrained learned table is random" in one_line(capsys.readouterr().out)


@pytest.mark.parametrize("name", ENCODINGS)
def test_figure_arrays_shapes(name):
    transformer = build_bare(ProbeOptions(encoding=name, dim=32, num_heads=4), 16)
    E, _ = position_vectors(transformer, 16, token=0, hidden=False)
    arrays = figure_arrays(E, transformer, 16)
    assert arrays["cosine"].shape == (16, 16) and arrays["pca"].shape == (16, 2)
    assert np.allclose(np.diag(arrays["cosine"]), 1.0)
    if "logits" in arrays:
        assert arrays["logits"].shape == (4, 16, 16)
    else:
        assert transformer.encoding.positional_logits(16) is None
    plain = type(transformer.encoding).attend is PositionalEncoding.attend  # else its logits are not q.k
    assert ("logits" in arrays or "attention" in arrays) == (plain or "logits" in arrays)  # a logit heatmap each


def test_rounding_noise_is_collapsed_but_signal_kept():
    rng = np.random.default_rng(0)
    noisy = np.ones((20, 8)) + 1e-8 * rng.standard_normal((20, 8))
    collapsed, identical = collapse_rounding_noise(noisy)
    assert identical and np.ptp(collapsed, axis=0).max() == 0.0
    table = rng.standard_normal((20, 8))
    assert collapse_rounding_noise(table) == (table, False)


@pytest.mark.slow
def test_trained_learned_checkpoint(tiny_fit_args, tmp_path, capsys):
    cli_main([*tiny_fit_args, "--model.arch.encoding=learned", "--data.task=copy"])
    (record,) = load_records(tmp_path)
    ckpt = str(Path(record.run_dir) / "checkpoints" / "last.ckpt")
    result = probe_main(["--ckpt", ckpt, "--pairs", "64", "--seeds", "2", "--report", str(tmp_path / "r")])
    max_length = torch.load(ckpt, map_location="cpu", weights_only=False)["hyper_parameters"]["arch"]["max_length"]
    assert result.encoding == "learned" and result.source == TABLE
    assert result.positions == max_length and math.isfinite(result.absolute_mae)
    out = one_line(capsys.readouterr().out)
    assert "trained checkpoint" in out
    # TINY trains copy on lengths <= 4: the longest causal input is 4 + separator + 4 - 1 = 8 tokens of 16
    assert result.trained_positions == 8 < max_length and f"positions 8-{max_length - 1} were never reached" in out
    report = tmp_path / "r"
    assert json.loads((report / "probe.json").read_text())["trained_positions"] == 8
    assert "trained positions: 0-7" in (report / "index.html").read_text()
    hidden = probe_main(["--ckpt", ckpt, "--hidden", "true", "--pairs", "64", "--seeds", "1"])
    assert hidden.source == HIDDEN and math.isfinite(hidden.absolute_mae)
    (probed,) = load_records(tmp_path)  # both probes' numbers are final metrics of the run, side by side
    assert probed.final[ABS_MAE] == result.absolute_mae and probed.final[REL_ERROR] == result.relative["mean"]
    assert probed.final[HIDDEN_ABS_MAE] == hidden.absolute_mae and probed.final["val/acc"] == record.final["val/acc"]
    assert f"added {ABS_MAE} and {REL_ERROR} to " in out
    table = compare_main([f"--out_dir={tmp_path}", f"--metric={ABS_MAE},{REL_ERROR}", "--format=json"])
    assert [comp.cells["learned", "copy"].values for comp in table] == [
        [result.absolute_mae],
        [result.relative["mean"]],
    ]
    unfinished = replace(probed, status="running")
    write_record(Path(record.run_dir) / RECORD_FILE, unfinished)
    again = probe_main(["--ckpt", ckpt, "--pairs", "64", "--seeds", "1"])
    assert any("not added to" in note and "the run is running" in note for note in again.notes)


def test_figures_and_numbers_go_to_an_active_wandb_run(tmp_path, monkeypatch):
    import wandb

    logged = []
    monkeypatch.setattr(wandb, "run", object())
    monkeypatch.setattr(wandb, "log", logged.append)
    monkeypatch.setattr(wandb, "Image", lambda path: ("image", path))
    probe_main(["--encoding", "alibi", *SMALL, "--report", str(tmp_path)])
    (values,) = logged
    assert {ABS_MAE, f"{REL_ERR}_mean", f"{REL_ERR}_std", "probe/cosine", "probe/pca", "probe/logits"} <= set(values)
    assert values["probe/logits"] == ("image", str(tmp_path / "logits.png"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--encoding", "nope"], "choose one of: none, learned, sinusoidal"),
        (["--ckpt", "missing/last.ckpt"], "not found"),
        (["--encoding", "sinusoidal", "--max_length", "9"], "max_length=9"),
        ([], "exactly one of --encoding"),
        (["--encoding", "rope", "--ckpt", "x.ckpt"], "exactly one of --encoding"),
        (["--encoding", "rope", "--pairs", "5"], "--pairs >= 20"),
        (["--encoding", "learned", "--hidden", "true", "--token", "-1"], "outside the vocabulary"),
        (["--encoding", "rope", "--dim", "30"], r"--dim 30 is not divisible by --num_heads 4; .* one of 1, 2$"),
        (["--encoding", "rope", "--dim", "64", "--num_heads", "12"], r"--num_heads 12; .* one of 1, 2, 4, 8, 16$"),
    ],
)
def test_bad_input_is_one_line(args, message):
    with pytest.raises(ConfigError, match=message) as error:
        probe_main(args)
    assert "\n" not in str(error.value)


def test_the_default_probe_is_a_small_model_and_dim_64_alone_works():
    """Issue 45.7: without a checkpoint the probe built BERT-base sizes (768 wide, 12 heads: ~7 M parameters, ~35 s
    an attempt on a busy 2-core CPU) and `--dim 64` alone failed. The default is a 64-wide, 4-head layer."""
    opts = ProbeOptions(encoding="learned")
    transformer = build_bare(opts, 512)
    assert sum(p.numel() for p in transformer.parameters()) < 200_000
    result = probe_main(["--encoding", "rope", "--dim", "64", "--max-length", "32", "--pairs", "20", "--seeds", "1"])
    assert (result.positions, result.width) == (32, 64)


def test_unreadable_checkpoint_is_one_line(tmp_path):
    bad = tmp_path / "last.ckpt"
    bad.write_text("not a checkpoint\n")
    with pytest.raises(ConfigError, match="cannot load") as error:
        probe_main(["--ckpt", str(bad)])
    assert "\n" not in str(error.value)


def test_cli_reports_bad_input_in_one_line(monkeypatch, capsys):
    """As wired in cli.py's EXTRA_COMMANDS: a ConfigError is one line on stderr and exit status 2."""
    from pe_sweeps import cli

    monkeypatch.setitem(cli.EXTRA_COMMANDS, "probe", probe_main)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["probe", "--encoding", "nope", "--max-length", "64"])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: unknown encoding 'nope'")


def test_heatmaps_blank_the_masked_triangle_on_one_diverging_scale_and_scores_have_a_chance_baseline():
    """Issue 13, point 5: causal logits are NaN (blank) above the diagonal; every head shares one scale
    centred on 0 (a diverging colormap); the absolute probe's chance MAE is N/4."""
    from pe_sweeps.probes import ProbeResult, chance_mae, plot_logits

    transformer = build_bare(ProbeOptions(encoding="alibi", dim=32, num_heads=4, causal=True), 8)
    E, _ = position_vectors(transformer, 8, token=0, hidden=False)
    logits = figure_arrays(E, transformer, 8)["logits"]
    upper = np.triu(np.ones((8, 8), dtype=bool), k=1)
    assert np.isnan(logits[:, upper]).all() and np.isfinite(logits[:, ~upper]).all()
    images = [ax.images[0] for ax in plot_logits(logits, "alibi").axes if ax.images]
    assert len(images) == 4 and len({im.get_clim() for im in images}) == 1
    low, high = images[0].get_clim()
    assert low == -high > -np.inf and images[0].get_cmap().name == "RdBu_r"
    assert chance_mae(4) == 1.0 and chance_mae(512) == pytest.approx(128.0, abs=0.5)
    result = ProbeResult("x", "table", positions=512, width=8, absolute_mae=3.0, relative_errors=[0.1])
    assert result.chance == {"absolute_mae": chance_mae(512), "relative_error": 0.5}


@pytest.mark.parametrize("name", ["rope", "sinusoidal"])
def test_rope_and_the_sinusoid_get_a_logit_heatmap_of_a_constant_input(name, tmp_path):
    """Issue 45, point 5: no positional_logits of their own, so the first layer's attention logits of a constant
    input are drawn: for rope they depend on j - i only (q_i.k_j = q.R_(j-i) k), blank above the diagonal."""
    transformer = build_bare(ProbeOptions(encoding=name, dim=32, num_heads=4), 12)
    E, _ = position_vectors(transformer, 12, token=0, hidden=False)
    logits = figure_arrays(E, transformer, 12)["attention"]
    assert logits.shape == (4, 12, 12)
    upper = np.triu(np.ones((12, 12), dtype=bool), 1)
    assert np.isnan(logits[:, upper]).all() and np.isfinite(logits[:, ~upper]).all()
    diagonals = [np.diagonal(logits, offset=-d, axis1=1, axis2=2) for d in range(12)]  # query i, key i - d
    toeplitz = all(np.allclose(d, d[:, :1], atol=1e-5) for d in diagonals)
    assert toeplitz == (name == "rope")  # the sinusoid's logits depend on both positions
    probe_main(["--encoding", name, *SMALL, "--report", str(tmp_path)])
    assert (tmp_path / "attention.png").stat().st_size > 0
    assert "attention.png" in (tmp_path / "index.html").read_text()
