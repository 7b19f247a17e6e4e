"""Where the public real-data CSVs are: ``shared/realdata`` beside the repository.

CI clones the repository into a fresh folder with a copy of ``shared/`` beside it, so the path
is found relative to this checkout (``LEAP_REALDATA`` overrides it). Tests that need the files
skip when they are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

REALDATA = Path(
    os.environ.get("LEAP_REALDATA", Path(__file__).resolve().parents[2] / "shared" / "realdata")
)
MLPERF_CSV = REALDATA / "mlperf_training.csv"
