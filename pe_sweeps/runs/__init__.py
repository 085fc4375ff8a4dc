"""What one run writes and how it is named: its `record.json` (`records`, written by `record_writer`), its W&B
run (`wandb_setup`, read back by `wandb_records`), its name (`run_naming`), the callbacks every fit gets
(`callbacks`), what `fit` prints at the end (`summary`) and on the console (`console`), and a sweep's
`manifest.json` (`manifest`). Private: `length_tables` (per-length W&B tables).
"""

__all__ = [
    "callbacks", "console", "manifest", "record_writer", "records", "run_naming", "summary", "wandb_records",
    "wandb_setup",
]  # fmt: skip
