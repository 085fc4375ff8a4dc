"""pe-sweeps: train, sweep and compare Transformers parameterised by their positional encoding.

The application, above the models (`lightning_modules/`) and the data (`datamodules/`), which stand with it on
the ground floor `pe_core/`. The command line is `cli.py` here (`pe-sweeps`, `python -m pe_sweeps`, or
`python cli.py` in a source checkout; `entry.py` and `light_commands.py` are its front doors); `layout.py`
declares where runs live and the environment a trial is given. Rooms by concern:

- `sweep/`: the sweep engine (`cli.py sweep`);
- `storages/`: where a sweep's study lives, and its locks;
- `runs/`: what one run writes (its record, W&B run, name, callbacks, summary);
- `compare/`: `cli.py compare`;
- `launchers/`: SLURM.
`probes.py` is `cli.py probe` (its options in `probe_options.py`); `help_cache.py` prints a subcommand's --help
once built; `internals.py` holds every use of another library's private API.
"""
