"""`fit`'s closing summary and `probe`'s output at 60 to 200 columns, on a terminal and in a file (issue 45.3): no
metric name, number or path split across lines; in a file ($COLUMNS or rich's 80 columns aside), nothing wrapped.

Claims of docs/training.md covered here:
- "in a file, lines are never wrapped; on a terminal, a table too wide shortens a name (…), never splits it":
  test_the_fit_summary_never_splits_a_token, test_probe_output_never_splits_a_path
"""

import io
import re

import pytest
from helpers import record as make_record
from rich.console import Console

from pe_sweeps.probes import probe_main
from pe_sweeps.runs.summary import print_fit_summary

WIDTHS = [60, 80, 120, 200]
RUN = "/home/someone/experiments/positional/out/sweeps/quickstart/trial-12/runs/copy-rope-s1-20261205-101010-4242"


def terminal(width: int) -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=width, record=True)


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "file"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_fit_summary_never_splits_a_token(width, tty, monkeypatch, capsys):
    """In a file, rich wrapped at 80 columns ($COLUMNS): a long metric name was folded (`val/tok_acc_ood_so` /
    `mething...`) and so on a narrow terminal."""
    monkeypatch.setenv("COLUMNS", str(width))
    final = {"val/acc": 0.98765, "val/acc_ood": 0.123456, "val/loss": 12.3456,
             "val/tok_acc_ood_something_long_enough_to_wrap": 0.87654}  # fmt: skip
    wandb = {"mode": "offline", "dir": f"{RUN}/wandb/offline-run-20261205_101010-abcd1234", "id": "abcd1234"}
    record = make_record(name="copy-rope-s1", status="finished", global_step=600, final=final, best=final, wandb=wandb)
    console = terminal(width) if tty else None  # None: the command's own console, on captured stdout (a file)
    print_fit_summary(record, f"{RUN}/record.json", console)
    text = console.export_text() if tty else capsys.readouterr().out
    lines = text.splitlines()
    assert f"record: {RUN}/record.json" in lines and f"W&B (offline): wandb sync {wandb['dir']}" in lines
    for name in ("val/acc", "val/acc_ood", "val/loss", "0.9877", "0.1235", "12.35", "0.8765"):
        assert name in text, text
    long = "val/tok_acc_ood_something_long_enough_to_wrap"
    row = next(line for line in lines if "val/tok_" in line)
    assert long in row or "…" in row, text  # whole, or shortened on a narrow terminal: never folded
    assert (long in text) == (not tty or width >= 80), text
    if not tty:
        assert all(len(line) < 100 for line in lines if "record" not in line and "wandb" not in line)


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "file"])
@pytest.mark.parametrize("width", WIDTHS)
def test_probe_output_never_splits_a_path(width, tty, monkeypatch, capsys, tmp_path):
    """`probe --report DIR` printed `figures: /tmp/.../index.h` / `tml` at 80 columns, in a file too."""
    monkeypatch.setenv("COLUMNS", str(width))
    report = tmp_path / "a-report-folder-with-a-rather-long-name-for-the-figures-of-this-probe"
    if tty:  # the command's console, as on a terminal $COLUMNS wide
        monkeypatch.setattr("rich.console.Console", lambda **kwargs: Console(**kwargs, force_terminal=True))
    probe_main(["--encoding", "sinusoidal", "--max-length", "16", "--dim", "16", "--num-heads", "4",
                "--pairs", "32", "--seeds", "1", "--report", str(report)])  # fmt: skip
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", capsys.readouterr().out)  # colours aside
    assert f"figures: {report}/index.html" in text.splitlines(), text
    for token in ("sinusoidal", "0.000", "(4.000)", "9.52", "(min-max)", "'sinusoidal'"):
        assert token in text, text  # a cell wraps between words on a narrow terminal, never inside one
