"""The console the commands print to (`app_console`: nothing wrapped or cut in a file), and what Lightning
prints to the console and run logs: its "Tip:" advertisements filtered out, and two warnings that are about the
installed libraries or the machine, not about the run (each named exactly)."""

import logging
import warnings

# wider than any line or table the commands print: in a file, a line is as long as it is
FILE_WIDTH = 10_000


def app_console(**kwargs):
    """A rich Console for a command's output. On a terminal, rich's own: its width (or $COLUMNS), tables fit it.
    In a file or pipe (`> out.txt`, nohup, sbatch, CI), rich would assume 80 columns (or $COLUMNS) and wrap or
    cut lines there, splitting paths, names and numbers: there, lines are never wrapped (`soft_wrap`) and tables
    are as wide as their cells (a width no table reaches). `kwargs` go to Console (a `file`, `force_terminal`)."""
    from rich.console import Console

    console = Console(**kwargs)
    return console if console.is_terminal else Console(soft_wrap=True, width=FILE_WIDTH, **kwargs)


# (message regex, module) of warnings that say nothing about the run:
KNOWN_WARNINGS = (
    # pytorch-lightning 2.6.6 (the newest release) constructs torch's LeafSpec, which torch 2.13 deprecated
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"pytorch_lightning\.utilities\._pytree"),
    # Lightning sees `srun` on PATH outside a SLURM job (a login node, or CI's one-node cluster): a fit started
    # there by hand, or by a sweep's worker, is not meant as a SLURM step (`--launcher slurm` makes those)
    (r"The `srun` command is available on your system but is not used", r"lightning_fabric\.plugins\.environments"),
)


class DropLightningTips(logging.Filter):
    """Lightning's "Tip: try installing litlogger / litmodels" advertisements, kept out of run logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip: " not in str(record.msg)


def quiet_lightning_tips() -> None:
    """Lightning's tips out of the logs, and the KNOWN_WARNINGS ignored (by message and module, nothing else)."""
    for message, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)
    for name in ("lightning_fabric.utilities.rank_zero", "pytorch_lightning.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropLightningTips) for f in logger.filters):
            logger.addFilter(DropLightningTips())
