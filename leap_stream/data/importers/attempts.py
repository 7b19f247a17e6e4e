"""What every importer shares: one measurement as one attempt (a JobSubmitted and a JobCompleted
event), the timeline the attempts are placed on, and the statistics of an import.

An importer turns each row of a public table into an attempt, a dict with the ``job_id``, the
``lineage_id`` and the ``submitted`` and ``completed`` fields of its two events, or into the
reason it is dropped. Attempts are submitted ``ATTEMPT_SPACING`` apart and each completes
``COMPLETION_DELAY`` later, so every earlier measurement is known before the next one arrives.

>>> from datetime import UTC
>>> attempt = {"job_id": "j", "lineage_id": "l", "submitted": {"model_type": "m"},
...     "completed": {"hardware_type": "H100-SXM", "throughput": 2.0}}
>>> events, stats = measurement_events([attempt, attempt], lambda a: (None, a),
...     start=datetime(2025, 1, 1, tzinfo=UTC), drop_reasons=("duplicate",))
>>> [(kind, e["event_id"]) for kind, e in events], stats.dropped
([('submitted', 'j/submitted'), ('completed', 'j/completed')], {'duplicate': 1})
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from leap_stream.data.history import events_to_table, write_history

__all__ = [
    "ATTEMPT_SPACING",
    "COMPLETION_DELAY",
    "ImportStats",
    "arrival_key",
    "attempt_events",
    "measurement_events",
    "read_table",
    "succeeded_on",
    "write_events",
]

# Attempts are submitted this far apart, each completing shortly after (a table of a few
# hundred rows spans about a day).
ATTEMPT_SPACING = timedelta(minutes=5)
COMPLETION_DELAY = timedelta(minutes=2)

Attempt = dict[str, Any]
Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class ImportStats:
    """What an import read, kept and dropped.

    Attributes
    ----------
    rows_read
        Data rows in the CSV.
    rows_kept
        Results that became an attempt (equal to ``attempts``).
    dropped
        Rows dropped, by reason (every reason of the importer's drop reasons, zeros included);
        each row counts under the first reason that applies.
    lineages, attempts
        Distinct lineages and attempts written.
    hardware_types
        Sorted hardware types of the kept results.
    throughput_sources
        Kept results by where their throughput came from (MLPerf: ``tracked``, the logged
        figure, or ``time_to_train``, samples to train / time to train).
    unknown_benchmarks, unknown_hardware
        Rows dropped as ``unmapped_benchmark`` / ``not_in_catalog``, by benchmark / type.
    unknown_rounds
        Rows read whose round has no date (built in or given), by round.
    placed_rounds
        Undated rounds placed after the last dated one: round -> the ISO date used.

    Examples
    --------
    >>> stats = ImportStats(3, 1, {"duplicate": 2}, 1, 1, ("H100-SXM",), {"tracked": 1})
    >>> stats.rows_read - sum(stats.dropped.values()) == stats.rows_kept
    True
    """

    rows_read: int
    rows_kept: int
    dropped: dict[str, int]
    lineages: int
    attempts: int
    hardware_types: tuple[str, ...]
    throughput_sources: dict[str, int] = field(default_factory=dict)
    unknown_benchmarks: dict[str, int] = field(default_factory=dict)
    unknown_hardware: dict[str, int] = field(default_factory=dict)
    unknown_rounds: dict[str, int] = field(default_factory=dict)
    placed_rounds: dict[str, str] = field(default_factory=dict)


def read_table(
    csv_path: Path,
    required: tuple[str, ...],
    error: type[ValueError],
    what: str,
    dtype: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Read a public table, or raise ``error`` saying why ``what`` cannot be read or which of
    the ``required`` columns it lacks.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame({"model": ["m"]}).to_csv(f"{tmp}/t.csv", index=False)
    ...     read_table(Path(tmp, "t.csv"), ("model", "batch"), ValueError, "the table")
    Traceback (most recent call last):
    ...
    ValueError: /.../t.csv: missing required column(s) 'batch'
    >>> read_table(Path("/nonexistent.csv"), ("model",), ValueError, "the table")
    Traceback (most recent call last):
    ...
    ValueError: /nonexistent.csv: cannot read the table ([Errno 2] No such file or directory: ...)
    """
    try:
        frame = pd.read_csv(csv_path, dtype=dtype)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise error(f"{csv_path}: cannot read {what} ({exc})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise error(f"{csv_path}: missing required column(s) {', '.join(map(repr, missing))}")
    return frame


def arrival_key(job_id: str) -> str:
    """A fixed pseudo-random arrival rank for a job id (hex SHA-1), the same on every run.

    Examples
    --------
    >>> arrival_key("a") == arrival_key("a"), len(arrival_key("a"))
    (True, 40)
    """
    return hashlib.sha1(job_id.encode()).hexdigest()


def attempt_events(attempt: Attempt, submitted_at: datetime, delay: timedelta) -> list[Event]:
    """An imported attempt (``job_id``, ``lineage_id``, the ``submitted`` and ``completed``
    fields) as its JobSubmitted and JobCompleted events, ``delay`` apart."""
    job_id = attempt["job_id"]
    common = {"job_id": job_id, "lineage_id": attempt["lineage_id"]}
    return [
        (
            "submitted",
            {
                "event_id": f"{job_id}/submitted",
                "event_time": submitted_at,
                **common,
                **attempt["submitted"],
            },
        ),
        (
            "completed",
            {
                "event_id": f"{job_id}/completed",
                "event_time": submitted_at + delay,
                **common,
                **attempt["completed"],
            },
        ),
    ]


def succeeded_on(
    hardware: str, devices: int, throughput: float, steps: int | None = None
) -> dict[str, Any]:
    """The ``completed`` fields of an attempt that measured ``throughput`` (samples a second) on
    ``devices`` of ``hardware``: a public table lists what ran, so every attempt succeeded.

    >>> succeeded_on("H100-SXM", 8, 2)["throughput"]
    2.0
    """
    return {
        "hardware_type": hardware,
        "num_devices": devices,
        "status": "succeeded",
        "throughput": float(throughput),
        "steps": steps,
    }


def measurement_events(
    rows: Iterable[Any],
    to_attempt: Callable[[Any], tuple[str | None, Attempt]],
    *,
    start: datetime,
    drop_reasons: tuple[str, ...],
) -> tuple[list[Event], ImportStats]:
    """The events of a table of undated measurements, and the import's statistics.

    ``to_attempt`` turns a row into ``(None, attempt)`` or ``(reason, anything)``; a second row
    with a job id already kept is dropped as ``"duplicate"``. The measurements carry no date,
    so the kept attempts arrive in a fixed pseudo-random order (:func:`arrival_key`) from
    ``start``, and each attempt's throughput counts as ``samples_per_sec``.
    """
    drops: Counter[str] = Counter()
    kept: list[Attempt] = []
    seen: set[str] = set()
    read = 0
    for row in rows:
        read += 1
        reason, attempt = to_attempt(row)
        if reason is None and attempt["job_id"] in seen:
            reason = "duplicate"
        if reason is not None:
            drops[reason] += 1
            continue
        seen.add(attempt["job_id"])
        kept.append(attempt)

    kept.sort(key=lambda a: arrival_key(a["job_id"]))
    events: list[Event] = []
    for n, attempt in enumerate(kept):
        events += attempt_events(attempt, start + n * ATTEMPT_SPACING, COMPLETION_DELAY)
    stats = ImportStats(
        rows_read=read,
        rows_kept=len(kept),
        dropped={reason: drops[reason] for reason in drop_reasons},
        lineages=len({a["lineage_id"] for a in kept}),
        attempts=len(kept),
        hardware_types=tuple(sorted({a["completed"]["hardware_type"] for a in kept})),
        throughput_sources={"samples_per_sec": len(kept)} if kept else {},
    )
    return events, stats


def write_events(events: list[Event], out_dir: Path) -> None:
    """Write ``out_dir/history.parquet`` (the directory created if missing, the file
    replaced)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_history([events_to_table(events)], out_dir / "history.parquet")
