"""Importers: turn public measurements into leap-stream histories (``docs/real-data.md``).

MLPerf Training results, Gavel's job-type throughputs and NeuSight's training iterations. Each
importer reads one public, tidy table and writes a history file in the shape of
:data:`leap_stream.core.events.HISTORY_SCHEMA`, so the replay backtester can score a predictor on
throughputs that nobody here measured.

>>> sorted(BENCHMARKS)[:3]
['bert', 'dlrm', 'dlrm_dcnv2']
"""

from leap_stream.data.importers.attempts import ImportStats
from leap_stream.data.importers.gavel import (
    GAVEL_ACCELERATORS,
    GAVEL_MODELS,
    GavelImportError,
    gavel_events,
    import_gavel,
)
from leap_stream.data.importers.mlperf import (
    BENCHMARKS,
    ROUND_DATES,
    BenchmarkSpec,
    MlperfImportError,
    import_mlperf,
    mlperf_events,
    naive_ratio_predictions,
    naive_ratio_summary,
)
from leap_stream.data.importers.neusight import (
    NEUSIGHT_MODELS,
    NeusightImportError,
    import_neusight,
    neusight_events,
)

__all__ = [
    "BENCHMARKS",
    "GAVEL_ACCELERATORS",
    "GAVEL_MODELS",
    "NEUSIGHT_MODELS",
    "ROUND_DATES",
    "BenchmarkSpec",
    "GavelImportError",
    "ImportStats",
    "MlperfImportError",
    "NeusightImportError",
    "gavel_events",
    "import_gavel",
    "import_mlperf",
    "import_neusight",
    "mlperf_events",
    "naive_ratio_predictions",
    "naive_ratio_summary",
    "neusight_events",
]
