"""What one run writes and how it is named: its `record.json` (`records`, written by `record_writer`), its W&B
run (`wandb_setup`, read back by `wandb_records`), its name (`run_naming`), the callbacks every fit gets
(`callbacks`) and its checkpoint (`checkpointing`), what `fit` prints at the end (`summary`) and on the console
(`console`), a sweep's `manifest.json` (`manifest`), a run's per-example evaluation outcomes (`outcomes`) and the
K runs of a seed ensemble (`ensemble_fit`).
Private: `length_tables` (per-length W&B tables).
"""

__all__ = [
    "callbacks", "checkpointing", "console", "ensemble_fit", "manifest", "outcomes", "record_writer", "records",
    "run_naming", "summary", "wandb_records", "wandb_setup",
]  # fmt: skip
