#!/usr/bin/env bash
# The prepared GPU check (issue 26): one command, JSON out, about 5 minutes on one GPU (scripts/gpu_check.py).
#   bash scripts/gpu_check.sh                    # on a machine with a GPU
#   GPU_CHECK_CPU=1 bash scripts/gpu_check.sh    # the CPU dry run at tiny sizes (CI runs it)
# Writes $OUT/gpu_check.json when OUT is set, else ./gpu_check.json, and prints a summary. Arguments go to
# gpu_check.py (--only, --limit SECTION=SECONDS, --encodings). GPU_CHECK_BUDGET: seconds before the whole run is
# stopped (default 420; the sections' own limits add up to 390 on a GPU); PYTHON: the interpreter (default python3).
set -u
json="${OUT:-$PWD}/gpu_check.json"
budget="${GPU_CHECK_BUDGET:-420}"
python="${PYTHON:-python3}"
cd "$(dirname "$0")/.." || exit 2
timeout -k 10 "$budget" "$python" scripts/gpu_check.py --out "$json" "$@"
status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "gpu_check: stopped at the ${budget} s budget; the sections it finished are in $json"
    [ -f "$json" ] && "$python" scripts/gpu_check.py --summary "$json"
fi
exit "$status"
