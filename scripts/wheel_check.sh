#!/usr/bin/env bash
# The distribution as a user gets it: build the wheel, install it into a fresh venv (CPU PyTorch 2.13.0 first),
# then run the README's quick start as `pe-sweeps` from an empty folder outside the checkout: the shipped
# sweep file and configs must be found from there, and nothing may import from the source tree.
# Usage: bash scripts/wheel_check.sh [WORK_DIR]   (CI: .ci/run; a few minutes on 2 cores: the quick start is ~2.5)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d)}
mkdir -p "$work/dist" "$work/elsewhere"
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" .
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q torch==2.13.0
"$work/venv/bin/python" -m pip install -q "$work"/dist/pe_sweeps-*.whl
cd "$work/elsewhere"
if "$work/venv/bin/python" -c "import errors" 2>/dev/null; then echo "wheel check: a top-level 'errors' module is installed" >&2; exit 1; fi
echo "class Broken: pass" > errors.py  # a user's own errors.py must not shadow the project's modules
"$work/venv/bin/python" -c "from lightning_modules.encodings import ENCODINGS; import pe_sweeps.cli"
WANDB_MODE=offline "$work/venv/bin/pe-sweeps" sweep sweeps/quickstart.yaml | tee "$work/quickstart.log"
grep -q "val/acc_ood" "$work/quickstart.log"
# the quick start's point: its primary metric, beyond-length accuracy, separates two encodings (a "better" verdict)
grep -Eq "^passkey val/acc_ood: [a-z0-9_.]+ better than " "$work/quickstart.log" \
    || { echo "wheel check: the quick start's comparison shows no 'better' verdict on val/acc_ood" >&2; exit 1; }
echo "wheel check: passed (quick start from $work/elsewhere)"
