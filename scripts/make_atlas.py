"""Write sweeps/atlas.yaml and sweeps/atlas_pilot.yaml from the encoding and task registries (pe_sweeps/atlas.py):
run it after adding an encoding or a task.

    python scripts/make_atlas.py
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pe_sweeps.atlas import write_atlas  # noqa: E402

if __name__ == "__main__":
    for path in write_atlas(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")
