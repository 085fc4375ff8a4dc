#!/usr/bin/env bash
# Create .venv with everything the project and its tests need (CPU PyTorch 2.13.0 first, so the
# project's torch range installs nothing more). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[dev]"
