"""What `cli.py fit` prints when it ends: the final and best validation metrics, the run record and the
`wandb sync` command for an offline run."""

from rich.console import Console
from rich.table import Table

from lightning_modules.metric_names import PER_LENGTH, has_best
from pe_sweeps.runs.console import app_console
from pe_sweeps.runs.records import RunRecord
from pe_sweeps.runs.wandb_setup import sync_command


def summary_table(record: RunRecord, width: int | None = None) -> Table:
    """One row per validation metric (per-length ones aside): final and best value, the best left blank where it
    means nothing (standard errors, example counts, `val/acc_best`: `metric_names.has_best`). Names and numbers
    never split: given the console's `width`, a name too long for it is shortened (…), never a number."""
    final, best = record.final, {k: v for k, v in record.best.items() if has_best(k)}
    rows = [(key, f"{final[key]:.4g}", "" if best.get(key) is None else f"{best[key]:.4g}")
            for key in sorted(k for k in final if k.startswith("val/") and not PER_LENGTH.search(k))]  # fmt: skip
    numbers = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in ((1, "final"), (2, "best"))]
    table = Table()
    table.add_column("metric", no_wrap=True, max_width=None if width is None else max(width - 10 - sum(numbers), 8))
    for column in ("final", "best"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


class SummaryTable:
    """`summary_table` at the width of the console it is printed on."""

    def __init__(self, record: RunRecord):
        self.record = record

    def __rich_console__(self, console, options):
        yield summary_table(self.record, options.max_width)


def summary_lines(record: RunRecord, record_path) -> list[str]:
    """The record's path and, for an offline W&B run, the exact `wandb sync` command."""
    lines = [f"record: {record_path}"]
    where = record.wandb
    if where.get("mode") == "offline" and where.get("dir"):  # a resumed run: one folder per start, one run id
        lines.append(f"W&B (offline): {sync_command(where.get('dirs') or [where['dir']], where.get('id'))}")
    elif where.get("path"):
        lines.append(f"W&B run: {where['path']}")
    return lines


def no_validation(record: RunRecord) -> str | None:
    """Why a fit has no validation metric, and the option to change (None when it has one): validation turned
    off, or training stopped before the first validation (a smoke fit with max_steps below the interval)."""
    if any(k.startswith("val/") for k in record.final):
        return None
    trainer = (record.config or {}).get("trainer") or {}
    if trainer.get("limit_val_batches") == 0:
        return "no validation ran: --trainer.limit_val_batches=0 turns it off"
    step = "?" if record.global_step is None else record.global_step
    interval = trainer.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool):
        when = f"before the first validation at step {interval} (--trainer.val_check_interval={interval})"
    else:  # None or a fraction: validation at (a fraction of) each epoch, and no such point was reached
        every = trainer.get("check_val_every_n_epoch") or 1
        when = f"before the first validation (each {every} epoch(s), --trainer.val_check_interval={interval})"
    return (f"no validation ran: training stopped at step {step}, {when}; set --trainer.val_check_interval to at "
            f"most {step} or raise --trainer.max_steps")  # fmt: skip


def print_fit_summary(record: RunRecord, record_path, console: Console | None = None) -> None:
    console = console or app_console()  # in a file or pipe, nothing wrapped or cut
    step = "?" if record.global_step is None else record.global_step
    console.print(f"{record.name}: {record.status} at step {step}", highlight=False, soft_wrap=True, markup=False)
    hint = no_validation(record)
    if hint:  # instead of an empty table
        console.print(hint, highlight=False, soft_wrap=True, markup=False)
    else:
        console.print(SummaryTable(record))
    for line in summary_lines(record, record_path):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
