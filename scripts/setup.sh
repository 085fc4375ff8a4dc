#!/usr/bin/env bash
# Create .venv with everything the project and its tests need (CPU PyTorch 2.13.0 first, so the
# project's torch range installs nothing more). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[dev]"
# W&B's own sweep validation (its `sweeps` package, what W&B's local controller runs): the runner checks every
# sweep file with it and tests/sweep/test_sweep_file.py requires it in CI. Installed without its dependencies: its
# `numpy<2` pin is stale (it validates dictionaries only) and would break pandas 3 / the rest of the stack.
.venv/bin/python -m pip install -q "jsonschema>=3.2" "jsonref>=1.0" "pydantic>=2.6"
.venv/bin/python -m pip install -q --no-deps "sweeps==0.3.0"
# fla-core: the pure-torch references of the PaTH and stick-breaking parity tests (tests/models/test_encodings_attention.py
# loads fla/ops/*/naive.py by path and skips without it). Without its dependencies: they would pull triton and
# another torch; the naive files need only torch and einops (already here through x-transformers).
.venv/bin/python -m pip install -q --no-deps "fla-core==0.6.0"
