"""Importers: turn public measurements into leap-stream histories (``docs/real-data.md``).

Each importer reads one public, tidy table and writes a history file in the shape of
:data:`leap_stream.core.events.HISTORY_SCHEMA`, so the replay backtester can score a predictor on
throughputs that nobody here measured.

>>> sorted(BENCHMARKS)[:3]
['bert', 'dlrm', 'dlrm_dcnv2']
"""

from leap_stream.data.importers.mlperf import (
    BENCHMARKS,
    ROUND_DATES,
    BenchmarkSpec,
    ImportStats,
    MlperfImportError,
    import_mlperf,
    mlperf_events,
    naive_ratio_predictions,
    naive_ratio_summary,
)

__all__ = [
    "BENCHMARKS",
    "ROUND_DATES",
    "BenchmarkSpec",
    "ImportStats",
    "MlperfImportError",
    "import_mlperf",
    "mlperf_events",
    "naive_ratio_predictions",
    "naive_ratio_summary",
]
