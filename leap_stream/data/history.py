"""The history table on disk: read, validate and write it as Parquet, CSV or Avro.

The history is one table with one row per event (a JobSubmitted or a JobCompleted), in
event-time order, with the columns of :data:`HISTORY_FILE_SCHEMA` (the core's
:data:`leap_stream.core.events.HISTORY_SCHEMA` plus the optional columns added since: a file
without them reads as if they were null); the replay
backtester streams it and users export it (``docs/history-format.md``). The format follows the
file extension: ``.parquet``, ``.csv`` (also ``.csv.gz``, ``.csv.bz2``, ``.csv.zst``) or
``.avro`` (an object container file of ``schemas/HistoryRow.avsc`` records, the way Kafka Connect
sinks archive topics). An optional oracle table (:data:`leap_stream.core.events.ORACLE_SCHEMA`)
gives the true throughput of every attempt on every hardware type, for counterfactual scoring.

Every batch read or written is cast to the schema and validated with vectorised checks. By
default a file that breaks the contract raises :class:`HistoryError` naming the file, the row and
the column; given a ``rejects`` list, the readers instead set every broken row aside as a
:class:`Reject` and go on without it (the same rules, collecting instead of raising).
:func:`check_events` runs the per-row rules over decoded event records, for a stream processor.

>>> import tempfile
>>> from datetime import datetime, timezone
>>> t0 = datetime(2025, 9, 3, 10, 15, tzinfo=timezone.utc)
>>> submitted = {"event_id": "e1", "event_time": t0, "job_id": "j1", "lineage_id": "l1",
...     "model_type": "gpt-1.3b", "model_family": "decoder", "framework": "pytorch",
...     "param_count": 1_300_000_000, "global_batch_size": 512, "seq_len": 2048,
...     "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1,
...     "micro_batches": None, "flops_per_sample": None, "team": None, "requested_hardware": None,
...     "candidate_hardware": ["H100-SXM", "MI300X"]}
>>> with tempfile.TemporaryDirectory() as tmp:
...     write_history([events_to_table([("submitted", submitted)])], f"{tmp}/history.csv")
...     [(kind, event == submitted) for kind, event in iter_events(f"{tmp}/history.csv")]
1
[('submitted', True)]
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import islice, repeat
from pathlib import Path
from typing import Any, Literal, NamedTuple

import fastavro
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from leap_stream.core.events import (
    COMPLETED_ONLY_COLUMNS,
    EVENT_TYPES,
    FRAMEWORKS,
    HISTORY_SCHEMA,
    JOB_CONFIG_FIELDS,
    ORACLE_SCHEMA,
    PRECISIONS,
    STATUSES,
    SUBMITTED_ONLY_COLUMNS,
)
from leap_stream.data.codec import default_schema_dir

__all__ = [
    "COMPLETED_FIELDS",
    "HISTORY_FILE_SCHEMA",
    "OPTIONAL_COLUMNS",
    "SUBMITTED_FIELDS",
    "HistoryError",
    "Reject",
    "check_events",
    "events_to_table",
    "iter_events",
    "iter_oracle",
    "read_history_batches",
    "read_oracle_batches",
    "write_history",
    "write_oracle",
]

# Columns added to the history format after its first version: a file (or table, or event) without
# them is still valid and reads as if they were null. The core's HISTORY_SCHEMA (what every history
# holds) leaves them out; files carry them on top of it.
_OPTIONAL_FIELDS = (
    pa.field("failure_reason", pa.string()),
    pa.field("micro_batches", pa.int32()),
    pa.field("flops_per_sample", pa.float64()),
    pa.field("team", pa.string()),
)
OPTIONAL_COLUMNS: tuple[str, ...] = tuple(f.name for f in _OPTIONAL_FIELDS)
HISTORY_FILE_SCHEMA: pa.Schema = pa.schema(
    [*HISTORY_SCHEMA, *(f for f in _OPTIONAL_FIELDS if f.name not in HISTORY_SCHEMA.names)]
)
"""The columns of a history file: ``HISTORY_SCHEMA`` and then :data:`OPTIONAL_COLUMNS`."""

SUBMITTED_FIELDS: tuple[str, ...] = (
    "event_id",
    "event_time",
    "job_id",
    "lineage_id",
    *JOB_CONFIG_FIELDS,
    "requested_hardware",
    "candidate_hardware",
)
"""The fields of a JobSubmitted record, in schema order: the keys of a submitted event dict."""

COMPLETED_FIELDS: tuple[str, ...] = (
    "event_id",
    "event_time",
    "job_id",
    "lineage_id",
    "hardware_type",
    "num_devices",
    "status",
    "throughput",
    "steps",
    "failure_reason",
)
"""The fields of a JobCompleted record, in schema order: the keys of a completed event dict."""

DEFAULT_BATCH_ROWS = 65_536

_Format = Literal["parquet", "csv", "avro"]
_CSV_COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_TIME_HINT = "an ISO-8601 time with a zone offset, like 2025-09-03T10:15:00.123Z"
# A CSV time is written with millisecond digits (Arrow's %S carries the fraction of the unit).
_CSV_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_LIST_SEPARATOR = ";"

_ENUMS: dict[str, tuple[str, ...]] = {
    "event_type": EVENT_TYPES,
    "precision": PRECISIONS,
    "framework": FRAMEWORKS,
    "status": STATUSES,
}
_POSITIVE = (
    "param_count",
    "global_batch_size",
    "seq_len",
    "num_devices",
    "tensor_parallel",
    "pipeline_parallel",
    "micro_batches",
    "flops_per_sample",
    "throughput",
)
# Required on submitted rows; seq_len, requested_hardware, candidate_hardware, micro_batches,
# flops_per_sample and team may be null there.
_SUBMITTED_REQUIRED = SUBMITTED_ONLY_COLUMNS
_SUBMITTED_ONLY = (
    *SUBMITTED_ONLY_COLUMNS,
    "seq_len",
    "requested_hardware",
    "candidate_hardware",
    "micro_batches",
    "flops_per_sample",
    "team",
)
# steps may be null on completed rows (an attempt whose step count was not recorded).
_COMPLETED_REQUIRED = tuple(c for c in COMPLETED_ONLY_COLUMNS if c != "steps")
_COMPLETED_ONLY = (*COMPLETED_ONLY_COLUMNS, "throughput", "failure_reason")
_NULL_MESSAGE = "is null; every row needs it"
_NON_NULL = tuple(f.name for f in HISTORY_SCHEMA if not f.nullable)

# datetime.fromtimestamp(ms / 1000) is 2x faster than epoch + timedelta but only exact to the
# millisecond while a double still resolves half a microsecond: |seconds| < 2**32 (until 2106).
_FAST_TIME_LIMIT_MS = 2**32 * 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NO_TIME = np.iinfo(np.int64).min

_ORACLE_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "OracleRow",
    "namespace": "leap.v1",
    "doc": "True expected throughput of one job attempt on one hardware type (backtests only).",
    "fields": [
        {"name": "job_id", "type": "string", "doc": "Attempt id, as in the history."},
        {"name": "hardware_type", "type": "string", "doc": "A hardware catalog key."},
        {
            "name": "throughput",
            "type": ["null", "double"],
            "default": None,
            "doc": "Expected samples per second there; null when the job cannot run there.",
        },
    ],
}


class HistoryError(ValueError):
    """A history or oracle file (or table) that breaks the contract of ``docs/history-format.md``.

    The message names the file, the 0-based data row, the column and what was expected.

    Examples
    --------
    >>> raise HistoryError("history.csv row 17, column 'precision': 'bf32' is not one of "
    ...                    "fp32|bf16|fp16|fp8")
    Traceback (most recent call last):
    ...
    leap_stream.data.history.HistoryError: history.csv row 17, column 'precision': 'bf32' is not ...
    """


class Reject(NamedTuple):
    """A row set aside by a collecting read, or an event refused by :func:`check_events`.

    Attributes
    ----------
    row
        The 0-based data row of the file (header not counted), or the index into the events.
    column
        The column whose rule the row broke first (rules run in ``docs/history-format.md``'s order).
    reason
        What was wrong, worded as :class:`HistoryError` words it after ``row N, column 'c': ``.

    Examples
    --------
    >>> Reject(17, "precision", "'bf32' is not one of fp32|bf16|fp16|fp8")
    Reject(row=17, column='precision', reason="'bf32' is not one of fp32|bf16|fp16|fp8")
    """

    row: int
    column: str
    reason: str


def _row_error(name: str, row: int, column: str, what: str) -> HistoryError:
    return HistoryError(f"{name} row {row}, column {column!r}: {what}")


class _Quarantine:
    """The rows of one batch rejected so far (collecting mode); a row's first reject wins."""

    def __init__(self, rows: int) -> None:
        self.bad = np.zeros(rows, dtype=bool)
        self.found: list[tuple[int, str, str]] = []  # (row in the batch, column, reason)

    def add(self, rows: Sequence[int], column: str, reasons: Sequence[str]) -> None:
        for row, reason in zip(rows, reasons, strict=True):
            if not self.bad[row]:
                self.bad[row] = True
                self.found.append((row, column, reason))

    def rejects(self, offset: int) -> list[Reject]:
        return [Reject(offset + row, column, reason) for row, column, reason in sorted(self.found)]


# --------------------------------------------------------------------------------------------
# Casting raw columns to the schema


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _first_failing(arr: pa.Array, cast: Callable[[pa.Array], object]) -> int | None:
    """Index of the first element that ``cast`` rejects, by bisection: O(log n) vectorised casts."""
    lo, hi = 0, len(arr)  # arr[:lo] casts; arr[lo:hi] holds a failure
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            cast(arr.slice(lo, mid - lo))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            hi = mid
        else:
            lo = mid
    try:
        cast(arr.slice(lo, 1))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return lo
    return None


def _checked_cast(
    arr: pa.Array,
    target: pa.DataType,
    name: str,
    offset: int,
    column: str,
    hint: str = "",
    quarantine: _Quarantine | None = None,
) -> pa.Array:
    """``arr`` cast to ``target``. A value that does not cast raises (strict) or, collecting,
    rejects its row and is read as null; a column that cannot be cast at all always raises."""

    def cast(a: pa.Array) -> pa.Array:
        return pc.cast(a, target)

    try:
        return cast(arr)
    except pa.ArrowNotImplementedError:
        raise HistoryError(
            f"{name}: column {column!r} has type {arr.type}, which cannot be read as {target}"
        ) from None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        error = exc
    failed: list[int] = []
    start = 0  # arr[:start] casts once the failed rows are taken out
    while True:
        i = _first_failing(arr.slice(start), cast)
        if i is None:  # no single value to blame
            raise HistoryError(f"{name}: column {column!r}: {error}") from None
        i += start
        what = f"{arr[i].as_py()!r} is not {hint or f'a valid {target}'}"
        if quarantine is None:
            raise _row_error(name, offset + i, column, what) from None
        quarantine.add([i], column, [what])
        failed.append(i)
        start = i + 1
        try:
            cast(arr.slice(start))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            error = exc
        else:
            break
    mask = np.zeros(len(arr), dtype=bool)
    mask[failed] = True
    try:
        return cast(pc.if_else(pa.array(mask), pa.scalar(None, arr.type), arr))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise HistoryError(f"{name}: column {column!r}: {exc}") from None


def _cast_column(
    col: pa.ChunkedArray | pa.Array,
    fld: pa.Field,
    name: str,
    offset: int,
    quarantine: _Quarantine | None = None,
) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    target = fld.type
    if arr.type.equals(target):
        return arr
    if pa.types.is_dictionary(arr.type):  # e.g. pandas categoricals stored in Parquet
        arr = arr.dictionary_decode()
    if pa.types.is_list(target) and _is_string(arr.type):
        # CSV (and hand-made frames) spell a list of strings as one ';'-joined string.
        arr = pc.split_pattern(arr, _LIST_SEPARATOR)
    if pa.types.is_timestamp(target):
        if _is_string(arr.type):
            # Parse at nanoseconds so that finer digits are truncated below, not rejected.
            arr = _checked_cast(
                arr, pa.timestamp("ns", tz="UTC"), name, offset, fld.name, _TIME_HINT, quarantine
            )
        if pa.types.is_timestamp(arr.type):
            # Events are stamped in milliseconds: drop finer digits; a naive time is read as UTC.
            return pc.cast(arr, target, safe=False)
    return _checked_cast(arr, target, name, offset, fld.name, quarantine=quarantine)


def _conform_columns(
    raw: pa.Table,
    schema: pa.Schema,
    name: str,
    offset: int,
    quarantine: _Quarantine | None = None,
    optional: tuple[str, ...] = (),
) -> pa.Table:
    """``raw`` cast to ``schema`` (extra columns dropped); missing columns raise, except the
    ``optional`` ones, which come back null."""
    present = set(raw.column_names)
    missing = [n for n in schema.names if n not in present and n not in optional]
    if missing:
        raise HistoryError(f"{name}: missing required column(s) {', '.join(map(repr, missing))}")
    for n in schema.names:
        if len(raw.schema.get_all_field_indices(n)) > 1:
            raise HistoryError(f"{name}: column {n!r} appears more than once")
    arrays = [
        _cast_column(raw.column(f.name), f, name, offset, quarantine)
        if f.name in present
        else pa.nulls(raw.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _array_from_values(
    values: list[Any],
    target: pa.DataType,
    name: str,
    offset: int,
    column: str,
    quarantine: _Quarantine | None = None,
) -> pa.Array:
    """Python values (an Avro chunk's column, event dicts) as an Arrow array, typed if possible.

    A value of the wrong type raises (strict) or, collecting, rejects its row and becomes null.
    """
    try:
        return pa.array(values, type=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    try:
        return pa.array(values)  # inferred; _cast_column then casts it and finds a bad row
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    kept = list(values)
    for i, value in enumerate(values):  # only reached when the column is already broken
        try:
            pa.array([value], type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            what = f"{value!r} is not a valid {target}"
            if quarantine is None:
                raise _row_error(name, offset + i, column, what) from None
            quarantine.add([i], column, [what])
            kept[i] = None
    if quarantine is not None:
        try:
            return pa.array(kept, type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
    raise HistoryError(f"{name}: column {column!r} mixes values of incompatible types")


# --------------------------------------------------------------------------------------------
# Vectorised validation


@dataclass
class _Batch:
    """One cast batch, where it sits in its file (for messages) and where broken rows go.

    With no ``quarantine`` a broken rule raises at its first row (strict); with one, every row a
    rule catches that no earlier rule caught is rejected into it (collecting).
    """

    table: pa.Table
    name: str
    offset: int
    quarantine: _Quarantine | None = None

    def col(self, column: str) -> pa.ChunkedArray:
        return self.table.column(column)

    def fail_where(
        self, mask: pa.ChunkedArray | pa.Array, column: str, what: Callable[[Any], str]
    ) -> None:
        """Fail the rows where ``mask`` is true (null counts as false); ``what(value)`` says why."""
        if not pc.any(mask).as_py():  # nulls are skipped
            return
        mask = pc.fill_null(mask, False)
        if self.quarantine is None:
            rows: Sequence[int] = [pc.index(mask, True).as_py()]
        else:
            rows = pc.indices_nonzero(mask).to_numpy(zero_copy_only=False).tolist()
        self.fail_rows(rows, column, lambda _, value: what(value))

    def fail_rows(self, rows: Sequence[int], column: str, what: Callable[[int, Any], str]) -> None:
        """Fail ``rows`` (ascending, in the batch); ``what(row, value)`` says why.

        Strict: raise for the first. Collecting: reject those no earlier rule rejected.
        """
        quarantine = self.quarantine
        if quarantine is None:
            i = rows[0]
            raise _row_error(
                self.name, self.offset + i, column, what(i, self.col(column)[i].as_py())
            )
        rows = [i for i in rows if not quarantine.bad[i]]
        if not rows:
            return
        values = self.col(column).take(pa.array(rows, pa.int64())).to_pylist()
        reasons = [what(i, v) for i, v in zip(rows, values, strict=True)]
        quarantine.add(rows, column, reasons)


def _to_datetime_exact(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _iso(ms: int) -> str:
    return _to_datetime_exact(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_history(batch: _Batch, state: _State) -> None:
    """Every contract rule of a history batch, vectorised, in docs/history-format.md's order."""
    _check_rows(batch)
    _check_time_order(batch, state)
    _check_unique(batch, "event_id")


def _check_event_rows(batch: _Batch, state: _State) -> None:
    """The rules about each row on its own: what a live stream's events must satisfy."""
    _check_rows(batch)


def _check_rows(batch: _Batch) -> None:
    """The rules about each row on its own (rules 3 to 8): no order, no uniqueness."""
    # Each rule first asks a cheap question of the whole column (a null count, a minimum) and
    # builds its row mask only when the answer says some row may break it.
    for column in _NON_NULL:
        if batch.col(column).null_count:
            batch.fail_where(pc.is_null(batch.col(column)), column, lambda _: _NULL_MESSAGE)
    _check_enum(batch, "event_type")
    kind = batch.col("event_type")
    of_kind = {}  # each event type's row mask, and its rows
    for name in EVENT_TYPES:
        mask = pc.equal(kind, name)
        of_kind[name] = mask, batch.table.filter(mask)
    # each event type's own columns are required on its rows and null on the other's
    for required, only, name, other_name in (
        (_SUBMITTED_REQUIRED, _SUBMITTED_ONLY, "submitted", "completed"),
        (_COMPLETED_REQUIRED, _COMPLETED_ONLY, "completed", "submitted"),
    ):
        (rows, own), (other, others) = of_kind[name], of_kind[other_name]
        for column in required:
            if own.column(column).null_count:
                batch.fail_where(
                    pc.and_(rows, pc.is_null(batch.col(column))),
                    column,
                    lambda _, name=name: f"is null on a {name} row",
                )
        for column in only:
            if others.column(column).null_count < others.num_rows:
                batch.fail_where(
                    pc.and_(other, pc.is_valid(batch.col(column))),
                    column,
                    lambda v, name=name, other_name=other_name: (
                        f"{v!r} is set on a {other_name} row; it belongs to {name} rows only"
                    ),
                )
    for column in ("precision", "framework", "status"):
        _check_enum(batch, column)
    for column in _POSITIVE:
        _check_positive(batch, column)
    # below one FLOP a sample the roofline's baseline (and every prediction) runs to infinity
    least_flops = pc.min(batch.col("flops_per_sample")).as_py()
    if least_flops is not None and least_flops < 1:
        batch.fail_where(
            pc.less(batch.col("flops_per_sample"), 1),
            "flops_per_sample",
            lambda v: f"{v!r} is below 1 (FLOPs of one sample, forward and backward)",
        )
    least_steps = pc.min(batch.col("steps")).as_py()
    if least_steps is not None and least_steps < 0:
        batch.fail_where(pc.less(batch.col("steps"), 0), "steps", lambda v: f"{v!r} is negative")
    status = batch.col("status")
    batch.fail_where(
        pc.and_(pc.not_equal(status, "succeeded"), pc.is_valid(batch.col("throughput"))),
        "throughput",
        lambda v: (
            f"{v!r} is set on an attempt that did not succeed; "
            "throughput is null unless status is 'succeeded'"
        ),
    )
    reason = batch.col("failure_reason")
    if reason.null_count < len(reason):
        batch.fail_where(
            pc.and_(pc.equal(status, "succeeded"), pc.is_valid(reason)),
            "failure_reason",
            lambda v: f"{v!r} is set on an attempt that succeeded",
        )
        batch.fail_where(
            pc.equal(reason, ""), "failure_reason", lambda _: "is empty; use null for no reason"
        )
    team = batch.col("team")
    if team.null_count < len(team):
        batch.fail_where(pc.equal(team, ""), "team", lambda _: "is empty; use null when not known")
    _check_candidates(batch)


def _check_enum(batch: _Batch, column: str) -> None:
    allowed = _ENUMS[column]
    col = batch.col(column)
    if set(pc.unique(col).to_pylist()) <= {None, *allowed}:
        return
    batch.fail_where(
        pc.and_(pc.is_valid(col), pc.invert(pc.is_in(col, value_set=pa.array(allowed)))),
        column,
        lambda v: f"{v!r} is not one of {'|'.join(allowed)}",
    )


def _check_positive(batch: _Batch, column: str) -> None:
    col = batch.col(column)
    floating = pa.types.is_floating(col.type)
    if not floating:
        least = pc.min(col).as_py()
        if least is None or least > 0:
            return
    bad = pc.invert(pc.greater(col, 0))  # NaN > 0 is false, so NaN is caught here too
    if floating:
        bad = pc.or_(bad, pc.is_inf(col))
    batch.fail_where(bad, column, lambda v: f"{v!r} is not a positive (finite) number")


def _check_candidates(batch: _Batch) -> None:
    col = batch.col("candidate_hardware")
    batch.fail_where(
        pc.equal(pc.list_value_length(col), 0),
        "candidate_hardware",
        lambda _: "is an empty list; use null for 'every type in the catalog'",
    )
    items = pc.list_flatten(col)
    bad_items = pc.fill_null(pc.or_(pc.is_null(items), pc.equal(items, "")), True)
    if pc.any(bad_items).as_py():
        parents = pc.list_parent_indices(col).to_numpy()
        bad_rows = np.unique(parents[pc.indices_nonzero(bad_items).to_numpy()]).tolist()
        batch.fail_rows(bad_rows, "candidate_hardware", lambda _, v: f"{v!r} has an empty entry")


def _check_time_order(batch: _Batch, state: _State) -> None:
    """No row earlier than the latest (kept) row before it, across batch boundaries too."""
    n = batch.table.num_rows
    if n == 0:
        return
    ms = pc.fill_null(pc.cast(batch.col("event_time"), pa.int64()), _NO_TIME).to_numpy()
    quarantine = batch.quarantine
    kept = ms if quarantine is None else np.where(quarantine.bad, _NO_TIME, ms)
    previous = np.empty(n, dtype=np.int64)  # the latest time of the rows before each row
    previous[0] = _NO_TIME if state.last_time is None else state.last_time
    np.maximum.accumulate(kept[:-1], out=previous[1:])
    np.maximum(previous[1:], previous[0], out=previous[1:])
    earlier = np.flatnonzero(ms < previous)
    if earlier.size:
        batch.fail_rows(
            earlier.tolist(),
            "event_time",
            lambda i, _: (
                f"{_iso(int(ms[i]))} is earlier than the previous row's {_iso(int(previous[i]))}; "
                "rows must be in event-time order"
            ),
        )
    if quarantine is not None:
        ms = ms[~quarantine.bad]
    if ms.size:
        latest = int(ms.max())
        state.last_time = latest if state.last_time is None else max(state.last_time, latest)


def _check_unique(batch: _Batch, column: str) -> None:
    col = batch.col(column)
    if pc.count_distinct(col).as_py() == len(col):
        return
    bad = batch.quarantine.bad if batch.quarantine is not None else None
    first_seen: dict[Any, int] = {}
    repeats: dict[int, int] = {}  # row -> the earlier row it repeats
    for i, value in enumerate(col.to_pylist()):  # only reached when a duplicate exists
        if bad is not None and bad[i]:
            continue
        if value in first_seen:
            repeats[i] = first_seen[value]
        else:
            first_seen[value] = i
    if repeats:
        batch.fail_rows(
            list(repeats),
            column,
            lambda i, v: f"{v!r} repeats row {batch.offset + repeats[i]}",
        )


def _check_oracle(batch: _Batch, state: _State) -> None:
    for column in ("job_id", "hardware_type"):
        batch.fail_where(pc.is_null(batch.col(column)), column, lambda _: _NULL_MESSAGE)
    _check_positive(batch, "throughput")


@dataclass
class _State:
    """What validation carries from one batch to the next."""

    last_time: int | None = None


@dataclass
class _Conformer:
    """Casts successive raw batches of one file to a schema and validates them.

    With ``rejects`` a list, broken rows are appended to it and dropped from the batch.
    """

    name: str
    schema: pa.Schema
    check: Callable[[_Batch, _State], None]
    rejects: list[Reject] | None = None
    offset: int = 0
    state: _State = field(default_factory=_State)
    optional: tuple[str, ...] = ()  # columns a file may lack (read as null)

    def quarantine(self, rows: int) -> _Quarantine:
        """Where the broken rows of the next ``rows``-row batch go. Strict too: the batch's
        rules all run, so that the error raised is its first broken row's, not the first
        broken rule's."""
        return _Quarantine(rows)

    def __call__(self, raw: pa.Table, quarantine: _Quarantine | None = None) -> pa.Table:
        if quarantine is None:
            quarantine = self.quarantine(raw.num_rows)
        table = _conform_columns(
            raw, self.schema, self.name, self.offset, quarantine, self.optional
        )
        self.check(_Batch(table, self.name, self.offset, quarantine), self.state)
        if quarantine.found:
            if self.rejects is None:  # strict
                row, column, reason = min(quarantine.found)
                raise _row_error(self.name, self.offset + row, column, reason)
            self.rejects.extend(quarantine.rejects(self.offset))
            table = table.filter(pa.array(~quarantine.bad))
        self.offset += raw.num_rows
        return table


def _history_conformer(name: str, rejects: list[Reject] | None = None) -> _Conformer:
    return _Conformer(name, HISTORY_FILE_SCHEMA, _check_history, rejects, optional=OPTIONAL_COLUMNS)


def _oracle_conformer(name: str, rejects: list[Reject] | None = None) -> _Conformer:
    return _Conformer(name, ORACLE_SCHEMA, _check_oracle, rejects)


# --------------------------------------------------------------------------------------------
# Reading raw batches, per format


def _format_of(path: Path) -> _Format:
    suffixes = [s.lower() for s in path.suffixes]
    last = suffixes[-1] if suffixes else ""
    if last == ".parquet":
        return "parquet"
    if last == ".avro":
        return "avro"
    if last == ".csv" or (last in _CSV_COMPRESSIONS and suffixes[-2:-1] == [".csv"]):
        return "csv"
    raise HistoryError(
        f"{path}: unknown format; expected a .parquet, .csv (.csv.gz, .csv.bz2, .csv.zst) "
        "or .avro file"
    )


def _rebatch(batches: Iterable[pa.RecordBatch], schema: pa.Schema, rows: int) -> Iterator[pa.Table]:
    """Re-slice record batches of any sizes into tables of exactly ``rows`` rows (last: fewer)."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.num_rows
        while size >= rows:
            table = pa.Table.from_batches(pending, schema=schema)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            pending, size = rest.to_batches(), rest.num_rows
    if size:
        yield pa.Table.from_batches(pending, schema=schema)


def _read_parquet(
    path: Path, names: list[str], rows: int, name: str, optional: tuple[str, ...] = ()
) -> Iterator[pa.Table]:
    pf = pq.ParquetFile(path)
    present = [n for n in names if n in pf.schema_arrow.names]
    if any(n not in present and n not in optional for n in names):
        # let _conform_columns name the missing columns
        yield pf.schema_arrow.empty_table()
        return
    schema = pa.schema([pf.schema_arrow.field(n) for n in present])
    yield from _rebatch(pf.iter_batches(batch_size=rows, columns=present), schema, rows)


def _read_csv(
    path: Path, names: list[str], rows: int, name: str, optional: tuple[str, ...] = ()
) -> Iterator[pa.Table]:
    def open_reader(include: list[str] | None) -> pacsv.CSVStreamingReader:
        # Every column is read as text and cast by _cast_column, so that a bad value is
        # reported with its row and column (pyarrow's own conversion errors give neither).
        convert = pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            include_columns=include,
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=True,
        )
        return pacsv.open_csv(pa.input_stream(path, compression="detect"), convert_options=convert)

    # The header decides which columns exist; include_columns would fail on a missing one.
    with open_reader(None) as probe:
        header = probe.schema.names
    present = [n for n in names if n in header]
    if any(n not in present and n not in optional for n in names):
        yield pa.table({n: pa.array([], pa.string()) for n in header})
        return
    with open_reader(present) as reader:
        yield from _rebatch(reader, reader.schema, rows)


def _read_avro(
    path: Path, conform: _Conformer, rows: int, name: str
) -> Iterator[tuple[pa.Table, _Quarantine | None]]:
    """Raw tables of ``rows`` records, each with where its values of the wrong type went."""
    schema = conform.schema
    with open(path, "rb") as fo:
        try:
            reader = fastavro.reader(fo)
        except ValueError as exc:
            raise HistoryError(f"{name}: not an Avro object container file ({exc})") from None
        writer_schema = reader.writer_schema
        if not isinstance(writer_schema, dict) or writer_schema.get("type") != "record":
            raise HistoryError(f"{name}: the Avro schema is not a record schema")
        fields = {f["name"] for f in writer_schema["fields"]}
        if not set(schema.names) - set(conform.optional) <= fields:
            yield pa.table({n: pa.array([], pa.null()) for n in sorted(fields)}), None
            return
        offset = 0
        while chunk := list(islice(reader, rows)):
            quarantine = conform.quarantine(len(chunk))
            columns = {
                f.name: _array_from_values(
                    [record.get(f.name) for record in chunk],
                    f.type,
                    name,
                    offset,
                    f.name,
                    quarantine,
                )
                for f in schema
            }
            yield pa.table(columns), quarantine
            offset += len(chunk)


def _read_conformed(
    path: str | os.PathLike[str],
    batch_rows: int,
    conformer_for: Callable[[str, list[Reject] | None], _Conformer],
    rejects: list[Reject] | None = None,
) -> Iterator[pa.Table]:
    if batch_rows <= 0:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    path = Path(path)
    name = str(path)
    fmt = _format_of(path)
    conform = conformer_for(name, rejects)
    raw: Iterator[tuple[pa.Table, _Quarantine | None]]
    names, optional = conform.schema.names, conform.optional
    if fmt == "parquet":
        raw = ((t, None) for t in _read_parquet(path, names, batch_rows, name, optional))
    elif fmt == "csv":
        raw = ((t, None) for t in _read_csv(path, names, batch_rows, name, optional))
    else:
        raw = _read_avro(path, conform, batch_rows, name)
    while True:
        try:
            table, quarantine = next(raw)
        except StopIteration:
            return
        except pa.ArrowInvalid as exc:  # unreadable file, ragged CSV row, ...
            raise HistoryError(f"{name}: cannot read: {exc}") from None
        yield conform(table, quarantine)


def read_history_batches(
    path: str | os.PathLike[str],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    rejects: list[Reject] | None = None,
) -> Iterator[pa.Table]:
    """Stream a history file as validated tables of ``HISTORY_FILE_SCHEMA``, in bounded memory.

    Parameters
    ----------
    path
        A ``.parquet``, ``.csv`` (optionally ``.gz``/``.bz2``/``.zst``) or ``.avro`` file.
    batch_rows
        Rows read per yielded table (the last one may hold fewer).
    rejects
        None (strict): the first broken row raises. A list (collecting): each broken row is
        appended to it as a :class:`Reject` (once, for the first rule it breaks, as each
        batch is read) and left out of the yielded tables, which then hold fewer rows.

    Yields
    ------
    pyarrow.Table
        The next ``batch_rows`` rows, cast to ``HISTORY_FILE_SCHEMA`` (extra columns dropped,
        a missing optional column null).

    Raises
    ------
    HistoryError
        When the file breaks a rule of ``docs/history-format.md``: the message names the
        file, the 0-based data row and the column. With ``rejects`` only for what concerns
        the whole file: unknown format, unreadable file, missing column, a column of a type
        that cannot be read as its schema type.

    Examples
    --------
    >>> import tempfile
    >>> rows = {"event_type": ["completed"], "event_id": ["e2"], "job_id": ["j1"],
    ...     "event_time": ["2025-09-03T11:00:00.000Z"], "lineage_id": ["l1"], "num_devices": [8],
    ...     "hardware_type": ["H100-SXM"], "status": ["succeeded"], "throughput": [-1.0],
    ...     "steps": [1000]}
    >>> rows.update({c: [None] for c in HISTORY_SCHEMA.names if c not in rows})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/h.csv", index=False)
    ...     next(read_history_batches(f"{tmp}/h.csv"))
    Traceback (most recent call last):
    ...
    leap_stream.data.history.HistoryError: .../h.csv row 0, column 'throughput': -1.0 is not ...

    Collecting instead, the broken row is set aside and the batch comes out without it:

    >>> rejects = []
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/h.csv", index=False)
    ...     next(read_history_batches(f"{tmp}/h.csv", rejects=rejects)).num_rows
    0
    >>> rejects
    [Reject(row=0, column='throughput', reason='-1.0 is not a positive (finite) number')]
    """
    return _read_conformed(path, batch_rows, _history_conformer, rejects)


# --------------------------------------------------------------------------------------------
# Column-wise conversion to event dicts (the replay's hot path)


# Columns of few distinct values (and lineages, read again at each attempt), read as one shared,
# interned ``str`` per value: every event then holds the same object for the same name, whose
# hash is computed once and which compares by identity in the dicts the core keys by it (its
# caches, counts, indexes and the lineages' priors). A fresh string per row costs each lookup
# its hash and a comparison of the characters.
_SHARED_STRINGS = frozenset(
    ("lineage_id", "model_type", "model_family", "framework", "precision", "team",
     "requested_hardware", "candidate_hardware", "hardware_type", "status", "failure_reason")
)  # fmt: skip


def _pylist(col: pa.ChunkedArray, shared: bool = False) -> list[Any]:
    """Python values of a column; times as ``datetime`` in ``timezone.utc`` like fastavro's;
    ``shared``: a string column's values as one interned object per distinct value."""
    if shared and pa.types.is_string(col.type):
        distinct = col.unique()
        values = [None if v is None else sys.intern(v) for v in distinct.to_pylist()]
        at = pc.index_in(col, value_set=distinct, skip_nulls=False)  # (a null finds the null)
        return [values[i] for i in at.to_numpy().tolist()]
    if shared and pa.types.is_list(col.type) and pa.types.is_string(col.type.value_type):
        lists = col.combine_chunks()
        names = _pylist(pa.chunked_array([lists.values]), shared=True)
        bounds = lists.offsets.to_numpy().tolist()  # (into .values, past any slice offset)
        present = lists.is_valid().to_numpy(zero_copy_only=False).tolist()
        return [names[bounds[i] : bounds[i + 1]] if ok else None for i, ok in enumerate(present)]
    if not pa.types.is_timestamp(col.type):
        return col.to_pylist()
    # Arrow's own conversion (3.4 us a value, ZoneInfo tz) is 8x slower than this.
    ms = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
    if col.null_count == 0 and (ms.size == 0 or np.abs(ms).max() < _FAST_TIME_LIMIT_MS):
        from_ts, utc = datetime.fromtimestamp, UTC
        return [from_ts(v / 1000, utc) for v in ms.tolist()]
    exact = _to_datetime_exact
    return [None if v is None else exact(v) for v in pc.cast(col, pa.int64()).to_pylist()]


def _dicts(table: pa.Table, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    columns = [_pylist(table.column(f), f in _SHARED_STRINGS) for f in fields]
    return [dict(zip(fields, values, strict=True)) for values in zip(*columns, strict=True)]


def _events_of(table: pa.Table) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = table.column("event_type")
    submitted = pc.equal(kind, "submitted")
    n_submitted = pc.sum(submitted).as_py() or 0
    if n_submitted == table.num_rows:
        yield from zip(repeat("submitted"), _dicts(table, SUBMITTED_FIELDS))
        return
    if n_submitted == 0:
        yield from zip(repeat("completed"), _dicts(table, COMPLETED_FIELDS))
        return
    # Each event type converts only its own columns; the kinds then interleave them back.
    subs = iter(_dicts(table.filter(submitted), SUBMITTED_FIELDS))
    comps = iter(_dicts(table.filter(pc.invert(submitted)), COMPLETED_FIELDS))
    for k in kind.to_pylist():
        yield k, next(subs) if k == "submitted" else next(comps)


def iter_events(
    path: str | os.PathLike[str],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    rejects: list[Reject] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Stream a history file as ``(event_type, event dict)`` pairs in file order.

    Parameters
    ----------
    path
        A history file (see :func:`read_history_batches`).
    batch_rows
        Rows converted at a time.
    rejects
        None: the first broken row raises :class:`HistoryError`. A list: broken rows are
        appended to it as :class:`Reject` and skipped (see :func:`read_history_batches`).

    Yields
    ------
    tuple[str, dict]
        ``("submitted", d)`` with exactly the keys :data:`SUBMITTED_FIELDS` or
        ``("completed", d)`` with exactly :data:`COMPLETED_FIELDS`: the dicts fastavro decodes
        for JobSubmitted / JobCompleted (``event_time`` an aware UTC ``datetime``,
        ``candidate_hardware`` a list or None).

    Examples
    --------
    >>> import tempfile
    >>> done = {"event_id": "e2", "event_time": 1_756_894_500_000, "job_id": "j1",
    ...     "lineage_id": "l1", "hardware_type": "H100-SXM", "num_devices": 8,
    ...     "status": "failed", "throughput": None, "steps": 10, "failure_reason": "oom"}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = write_history([events_to_table([("completed", done)])], f"{tmp}/h.parquet")
    ...     kind, event = next(iter_events(f"{tmp}/h.parquet"))
    >>> kind, event["event_time"].isoformat(), event["status"], list(event) == list(done)
    ('completed', '2025-09-03T10:15:00+00:00', 'failed', True)
    """
    for table in read_history_batches(path, batch_rows, rejects):
        yield from _events_of(table)


def events_to_table(events: Iterable[tuple[str, dict[str, Any]]]) -> pa.Table:
    """Build a validated ``HISTORY_FILE_SCHEMA`` table from event pairs: the inverse of
    iter_events.

    Parameters
    ----------
    events
        ``(event_type, event dict)`` pairs in event-time order; keys a record does not have
        are ignored, missing keys are null. ``event_time`` may be a ``datetime`` or epoch
        milliseconds.

    Returns
    -------
    pyarrow.Table

    Raises
    ------
    HistoryError
        As for a file, naming ``events`` and the position of the bad event.

    Examples
    --------
    >>> events_to_table([("completed", {"event_id": "e1", "event_time": 0, "job_id": "j1",
    ...     "lineage_id": "l1", "hardware_type": "MI300X", "num_devices": 8,
    ...     "status": "preempted", "throughput": None, "steps": 0})]).num_rows
    1
    """
    return _history_conformer(_EVENTS)(_raw_events_table(list(events)))


_EVENTS = "events"  # the name messages give a list of events
_EVENT_COLUMNS = pa.schema(
    [f.with_nullable(True) for f in HISTORY_FILE_SCHEMA if f.name != "event_type"]
)


def _raw_events_table(
    pairs: Sequence[tuple[str, dict[str, Any]]], quarantine: _Quarantine | None = None
) -> pa.Table:
    """Event pairs as one Arrow column per history column, typed where the values allow."""
    try:  # the common case, 3x faster than column by column for hundreds of events
        table = pa.Table.from_pylist([event for _, event in pairs], schema=_EVENT_COLUMNS)
        kinds = pa.array([kind for kind, _ in pairs], pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass  # a value of the wrong type: column by column, to find it
    else:
        return table.add_column(0, "event_type", kinds)
    columns: dict[str, pa.Array] = {}
    for f in HISTORY_FILE_SCHEMA:
        if f.name == "event_type":
            values = [kind for kind, _ in pairs]
        else:
            values = [event.get(f.name) for _, event in pairs]
        columns[f.name] = _array_from_values(values, f.type, _EVENTS, 0, f.name, quarantine)
    return pa.table(columns)


def check_events(events: Sequence[tuple[str, dict[str, Any]]]) -> list[Reject]:
    """The events that break the per-row rules of the history contract, for a stream processor.

    The same vectorised rules as a history file (types, required and forbidden columns per
    event type, allowed values, positive numbers, throughput only on succeeded attempts and a
    failure reason only on the others, candidate lists), over a batch of decoded records: what
    :func:`iter_events` yields and fastavro decodes. The rules about the stream as a whole are
    not applied: events out of event-time order (late events) and repeated ``event_id``
    (redelivery) are normal in a live stream and are the consumer's to handle.

    Parameters
    ----------
    events
        ``(event_type, record)`` pairs: ``("submitted", JobSubmitted dict)`` or
        ``("completed", JobCompleted dict)``; ``event_time`` an aware ``datetime`` or epoch
        milliseconds.

    Returns
    -------
    list[Reject]
        One per broken event, in order: ``row`` is its index in ``events``, ``column`` and
        ``reason`` the first rule it breaks. Empty when every event is valid.

    Raises
    ------
    HistoryError
        Only when a whole column cannot be read (values of types Arrow cannot combine).

    Examples
    --------
    >>> done = {"event_id": "e2", "event_time": 1_756_894_500_000, "job_id": "j1",
    ...     "lineage_id": "l1", "hardware_type": "H100-SXM", "num_devices": 8,
    ...     "status": "succeeded", "throughput": 950.5, "steps": None}
    >>> late = {**done, "event_time": 0}  # late and repeated: fine in a stream
    >>> events = [("completed", done), ("completed", {**done, "status": "exploded"}),
    ...           ("completed", {**done, "num_devices": 0}), ("completed", late)]
    >>> for reject in check_events(events):
    ...     print(reject.row, reject.column, reject.reason)
    1 status 'exploded' is not one of succeeded|failed|preempted
    2 num_devices 0 is not a positive (finite) number
    """
    pairs = list(events)
    rejects: list[Reject] = []
    conform = _Conformer(
        _EVENTS, HISTORY_FILE_SCHEMA, _check_event_rows, rejects, optional=OPTIONAL_COLUMNS
    )
    quarantine = conform.quarantine(len(pairs))
    conform(_raw_events_table(pairs, quarantine), quarantine)
    return rejects


# --------------------------------------------------------------------------------------------
# Writing


def _as_table(obj: pa.Table | pa.RecordBatch | pd.DataFrame) -> pa.Table:
    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if isinstance(obj, pd.DataFrame):
        return pa.Table.from_pandas(obj, preserve_index=False)
    raise TypeError(f"expected a pyarrow.Table or pandas.DataFrame, got {type(obj).__name__}")


def _csv_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [
            pa.field(f.name, pa.string())
            if pa.types.is_timestamp(f.type) or pa.types.is_list(f.type)
            else f
            for f in schema
        ]
    )


def _to_csv_table(table: pa.Table, csv_schema: pa.Schema) -> pa.Table:
    arrays = []
    for f in table.schema:
        col = table.column(f.name)
        if pa.types.is_timestamp(f.type):
            col = pc.strftime(col, format=_CSV_TIME_FORMAT)
        elif pa.types.is_list(f.type):
            col = pc.binary_join(col, _LIST_SEPARATOR)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=csv_schema)


@cache
def _history_avro_schema() -> dict[str, Any]:
    avsc = default_schema_dir() / "HistoryRow.avsc"
    return fastavro.parse_schema(json.loads(avsc.read_text()))


@cache
def _oracle_avro_schema() -> dict[str, Any]:
    return fastavro.parse_schema(_ORACLE_AVRO_SCHEMA)


def _records(table: pa.Table) -> list[dict[str, Any]]:
    return _dicts(table, tuple(table.column_names))


def _write(
    tables: Iterable[pa.Table | pd.DataFrame],
    path: str | os.PathLike[str],
    conformer_for: Callable[[str], _Conformer],
    avro_schema: Callable[[], dict[str, Any]],
) -> int:
    path = Path(path)
    fmt = _format_of(path)
    conform = conformer_for(str(path))
    schema = conform.schema
    # Write beside the target and rename at the end: a failed write never leaves a file that
    # looks complete (or clobbers a good one).
    tmp = path.with_name(f".{path.name}.partial")
    conformed = (conform(_as_table(t)) for t in tables)
    rows = 0
    try:
        if fmt == "parquet":
            with pq.ParquetWriter(tmp, schema) as writer:
                for table in conformed:
                    writer.write_table(table)
                    rows += table.num_rows
        elif fmt == "csv":
            csv_schema = _csv_schema(schema)
            compression = _CSV_COMPRESSIONS.get(path.suffix.lower())
            # Arrow's "needed" quotes every string: safe for commas in names, and any reader copes.
            options = pacsv.WriteOptions(quoting_style="needed")
            with (
                pa.output_stream(tmp, compression=compression) as sink,
                pacsv.CSVWriter(sink, csv_schema, write_options=options) as writer,
            ):
                for table in conformed:
                    writer.write_table(_to_csv_table(table, csv_schema))
                    rows += table.num_rows
        else:

            def records() -> Iterator[dict[str, Any]]:
                nonlocal rows
                for table in conformed:
                    yield from _records(table)
                    rows += table.num_rows

            with open(tmp, "wb") as fo:
                fastavro.writer(fo, avro_schema(), records(), codec="deflate")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def write_history(tables: Iterable[pa.Table | pd.DataFrame], path: str | os.PathLike[str]) -> int:
    """Write tables (or DataFrames) as one history file, streaming, in the extension's format.

    Each table is cast to ``HISTORY_FILE_SCHEMA`` and validated like a file being read (event-time
    order holds across tables), so what is written always reads back. The file appears only
    once complete.

    Parameters
    ----------
    tables
        Tables or DataFrames holding at least the ``HISTORY_SCHEMA`` columns (extras dropped;
        a missing optional column is written null).
        In CSV-like frames ``candidate_hardware`` may be a ``;``-joined string and
        ``event_time`` an ISO-8601 string.
    path
        Target ``.parquet``, ``.csv`` (``.gz``/``.bz2``/``.zst``) or ``.avro`` file.

    Returns
    -------
    int
        Rows written.

    Examples
    --------
    >>> import tempfile
    >>> table = events_to_table([("completed", {"event_id": "e1", "event_time": 0,
    ...     "job_id": "j1", "lineage_id": "l1", "hardware_type": "trn1", "num_devices": 16,
    ...     "status": "succeeded", "throughput": 950.5, "steps": 100})])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_history([table, table.slice(0, 0)], f"{tmp}/h.avro")
    ...     next(read_history_batches(f"{tmp}/h.avro")).equals(table)
    1
    True
    """
    return _write(tables, path, _history_conformer, _history_avro_schema)


# --------------------------------------------------------------------------------------------
# The oracle table


def write_oracle(tables: Iterable[pa.Table | pd.DataFrame], path: str | os.PathLike[str]) -> int:
    """Write oracle tables (``ORACLE_SCHEMA``) to ``.parquet``, ``.csv`` or ``.avro``.

    Parameters
    ----------
    tables
        Tables or DataFrames with columns job_id, hardware_type, throughput; rows grouped by
        job_id in the history's submission order.
    path
        Target file; the format follows the extension.

    Returns
    -------
    int
        Rows written.

    Examples
    --------
    >>> import tempfile
    >>> frame = pd.DataFrame({"job_id": ["j1", "j1"], "hardware_type": ["H100-SXM", "TPU-v5e"],
    ...                       "throughput": [1200.0, None]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_oracle([frame], f"{tmp}/oracle.parquet")
    2
    """
    return _write(tables, path, _oracle_conformer, _oracle_avro_schema)


def read_oracle_batches(
    path: str | os.PathLike[str], batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[pa.Table]:
    """Stream an oracle file as validated tables of ``ORACLE_SCHEMA``.

    job_id and hardware_type must be set; throughput is positive, or null where the job
    cannot run on that hardware type.

    Examples
    --------
    >>> import tempfile
    >>> frame = pd.DataFrame({"job_id": ["j1"], "hardware_type": ["gaudi2"], "throughput": [0.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     frame.to_csv(f"{tmp}/oracle.csv", index=False)
    ...     next(read_oracle_batches(f"{tmp}/oracle.csv"))
    Traceback (most recent call last):
    ...
    leap_stream.data.history.HistoryError: .../oracle.csv row 0, column 'throughput': 0.0 is ...
    """
    return _read_conformed(path, batch_rows, _oracle_conformer)


def iter_oracle(
    path: str | os.PathLike[str], batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[tuple[str, dict[str, float | None]]]:
    """Stream an oracle file as ``(job_id, {hardware_type: throughput})``, one pair per job.

    A job's rows may straddle batch boundaries; they must be contiguous and name each
    hardware type once.

    Examples
    --------
    >>> import tempfile
    >>> frame = pd.DataFrame({"job_id": ["j1", "j1", "j2"],
    ...     "hardware_type": ["H100-SXM", "TPU-v5e", "H100-SXM"],
    ...     "throughput": [1200.0, None, 300.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = write_oracle([frame], f"{tmp}/oracle.csv")
    ...     list(iter_oracle(f"{tmp}/oracle.csv", batch_rows=1))
    [('j1', {'H100-SXM': 1200.0, 'TPU-v5e': None}), ('j2', {'H100-SXM': 300.0})]
    """
    name = str(path)
    seen: set[str] = set()
    current: str | None = None
    group: dict[str, float | None] = {}
    row = 0
    for table in read_oracle_batches(path, batch_rows):
        columns = (
            table.column("job_id").to_pylist(),
            table.column("hardware_type").to_pylist(),
            table.column("throughput").to_pylist(),
        )
        for job_id, hardware_type, throughput in zip(*columns, strict=True):
            if job_id != current:
                if current is not None:
                    yield current, group
                if job_id in seen:
                    raise _row_error(
                        name,
                        row,
                        "job_id",
                        f"{job_id!r} reappears after other jobs; a job's rows must be contiguous",
                    )
                seen.add(job_id)
                current, group = job_id, {}
            elif hardware_type in group:
                raise _row_error(
                    name, row, "hardware_type", f"{hardware_type!r} repeats for job {job_id!r}"
                )
            group[hardware_type] = throughput
            row += 1
    if current is not None:
        yield current, group
