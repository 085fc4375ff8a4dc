"""pe-sweeps: train, sweep and compare Transformers parameterised by their positional encoding.

The command line is `pe_sweeps/cli.py` (`pe-sweeps`, `python -m pe_sweeps`, or `python cli.py` in a source
checkout); `pe_sweeps/layout.py` declares where runs live and the environment a trial is given;
`pe_sweeps/tracking/` runs sweeps and compares their runs. Models are in `lightning_modules/`, data in
`datamodules/`.
"""
