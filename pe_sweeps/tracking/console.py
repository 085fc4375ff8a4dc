"""What Lightning prints to the console and run logs: its "Tip:" advertisements filtered out."""

import logging


class DropLightningTips(logging.Filter):
    """Lightning's "Tip: try installing litlogger / litmodels" advertisements, kept out of run logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip: " not in str(record.msg)


def quiet_lightning_tips() -> None:
    for name in ("lightning_fabric.utilities.rank_zero", "pytorch_lightning.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropLightningTips) for f in logger.filters):
            logger.addFilter(DropLightningTips())
