"""The ground floor: what the models (`lightning_modules/`), the data (`datamodules/`) and the application
(`pe_sweeps/`) all stand on, and which imports none of them.

- `errors`: `ConfigError` and `DivergedError`, the one-line errors every bad input becomes;
- `ranges`: option types with their ranges (`PositiveInt`, `Fraction`, ...) and `check_ranges`;
- `vocab`: the special tokens shared by tokenizers and models (`PAD`, `BOS`, `EOS`, `IGNORE_INDEX`);
- `help_text`: `document_options`, the decorator that gives an `__init__`'s options their `--help` lines;
- `data_paths`: where data modules read their files (`data_root`, `$PE_DATA_ROOT`, `$PE_TOKENIZER_CACHE`).
"""

__all__ = ["data_paths", "errors", "help_text", "ranges", "vocab"]
