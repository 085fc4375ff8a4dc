"""The end of `cli.py fit` when no validation ran (issue 29, point 8): a smoke fit with max_steps below the
validation interval says so in one line naming the options to change, instead of an empty metrics table.

Claim of docs/training.md covered here: "a fit that ended before its first validation says so and which option to
change":
test_a_fit_without_validation_says_so_and_names_the_option
"""

from helpers import record as make_record
from rich.console import Console

from pe_sweeps.runs.summary import print_fit_summary


def summary_of(record) -> str:
    console = Console(record=True, width=300)
    print_fit_summary(record, "/o/runs/r/record.json", console)
    return console.export_text()


def test_a_fit_without_validation_says_so_and_names_the_option():
    config = {"trainer": {"max_steps": 20, "val_check_interval": 250, "check_val_every_n_epoch": None}}
    record = make_record(name="copy-rope-s0", status="finished", global_step=20, config=config,
                         final={"train/loss": 2.0}, best={})  # fmt: skip
    text = summary_of(record)
    hint = [line for line in text.splitlines() if "no validation ran" in line]
    assert hint == [
        "no validation ran: training stopped at step 20, before the first validation at step 250 "
        "(--trainer.val_check_interval=250); set --trainer.val_check_interval to at most 20 or raise "
        "--trainer.max_steps"
    ]
    assert "metric" not in text and "record: /o/runs/r/record.json" in text  # no empty table


def test_validation_turned_off_says_which_option_did_it():
    config = {"trainer": {"max_steps": 20, "limit_val_batches": 0}}
    record = make_record(name="r", status="finished", global_step=20, config=config, final={}, best={})
    assert "no validation ran: --trainer.limit_val_batches=0 turns it off" in summary_of(record)


def test_a_fit_with_validation_has_no_hint():
    record = make_record(name="r", status="finished", global_step=20, final={"val/acc": 0.5}, best={"val/acc": 0.5})
    text = summary_of(record)
    assert "no validation ran" not in text and "val/acc" in text


def test_no_best_is_shown_where_it_means_nothing():
    """Issue 45, point 4: the table printed "best 0" for a standard error (its minimum over validations) and
    "best 64" for an example count; a best of `val/acc_best` repeats it."""
    final = {"val/acc": 0.5, "val/acc_se": 0.04, "val/acc_ood_se": 0.0, "val/examples": 64, "val/acc_best": 0.6,
             "val/loss": 1.5}  # fmt: skip
    best = {"val/acc": 0.6, "val/acc_se": 0.0, "val/acc_ood_se": 0.0, "val/examples": 64, "val/acc_best": 0.6,
            "val/loss": 1.25}  # fmt: skip
    record = make_record(name="r", status="finished", global_step=20, final=final, best=best)
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:4]]
            for line in summary_of(record).splitlines() if line.startswith("│")}  # fmt: skip
    assert rows["val/acc"] == ["0.5", "0.6"] and rows["val/loss"] == ["1.5", "1.25"]
    for key in ("val/acc_se", "val/acc_ood_se", "val/examples", "val/acc_best"):
        assert rows[key][1] == "", (key, rows[key])
