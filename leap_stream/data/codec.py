"""Avro single-object encoding of the event records (``schemas/*.avsc``), on fastavro.

Every message is self-describing (Avro spec, "Single-object encoding")::

    C3 01 | 8-byte CRC-64-AVRO fingerprint, little-endian | Avro binary body

The fingerprint is taken over the writer schema's Parsing Canonical Form, which drops docs,
defaults and logical types, so editing a ``doc`` never changes it. A reader finds the writer
schema by fingerprint and resolves it into its own (newer or older) reader schema, which is what
makes the evolution rule of ``docs/events.md`` work without a schema registry service.

>>> data = encode("JobCompleted", {
...     "event_id": "e-1", "event_time": 1_700_000_000_000, "job_id": "j-1",
...     "lineage_id": "l-1", "hardware_type": "gpu-a", "num_devices": 8,
...     "status": "succeeded", "throughput": 1234.5, "steps": 1000})
>>> data[:2].hex()
'c301'
>>> decode(data)["event_time"].isoformat()
'2023-11-14T22:13:20+00:00'
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

__all__ = [
    "ADDED_FIELDS",
    "MARKER",
    "AvroCodec",
    "CodecError",
    "decode",
    "default_codec",
    "default_schema_dir",
    "encode",
]

MARKER = b"\xc3\x01"
"""The two bytes that open every single-object encoded message (format version 1)."""

_FINGERPRINT_SIZE = 8
_HEADER_SIZE = len(MARKER) + _FINGERPRINT_SIZE

# Fields added to a published record (docs/events.md, evolution rule), oldest first; a field of
# a nested record (a field whose type is the record itself, not a union) is named by its path
# ("job.micro_batches"). Adding a field changes the
# schema's fingerprint, so the record's earlier versions (without the fields added since) stay
# registered as writer schemas: their messages keep decoding, with defaults.
ADDED_FIELDS: dict[str, tuple[str, ...]] = {
    "leap.v1.JobSubmitted": ("micro_batches", "flops_per_sample", "team"),
    "leap.v1.JobCompleted": ("failure_reason",),
    "leap.v1.LearnExample": (
        "reference",
        "memory_ratio",
        "out_of_memory",
        "job.micro_batches",
        "exact_references",
        "job.flops_per_sample",
        "job.team",
    ),
    "leap.v1.ModelSnapshot": ("trained_until",),
}


class CodecError(ValueError):
    """Bytes that are not a readable event, or a record that does not fit its schema.

    The message says what was wrong: a wrong marker, a truncated header or body, an unknown
    writer schema fingerprint, a body that is not valid Avro for its schema, or the field of a
    record that does not fit on encode.

    Examples
    --------
    >>> try:
    ...     decode(b"{}")
    ... except CodecError as exc:
    ...     print(exc)
    truncated header: single-object encoding needs 10 header bytes, got 2
    """


@dataclass(frozen=True, slots=True)
class _Writer:
    """One registered schema, parsed once, with its precomputed message header."""

    name: str  # full name, e.g. "leap.v1.JobSubmitted"
    fingerprint: int  # CRC-64-AVRO as an unsigned int (Java's parsingFingerprint64)
    header: bytes  # MARKER + the fingerprint's 8 bytes, little-endian
    parsed: dict[str, Any]


def default_schema_dir() -> Path:
    """The directory of the event schemas (``schemas/*.avsc``), installed or in a checkout."""
    package = Path(__file__).resolve().parent.parent
    # The wheel force-includes schemas/ inside the package; look there first, so an unrelated
    # site-packages/schemas can never shadow it. In a source checkout it sits next to the package.
    for candidate in (package / "schemas", package.parent / "schemas"):
        if candidate.is_dir():
            return candidate
    raise CodecError(f"no schemas directory found in {package} or {package.parent}")


def _shorten(exc: Exception, limit: int = 300) -> str:
    # Some fastavro messages embed whole schemas or values; a log line needs the gist.
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse(schema: Mapping[str, Any], origin: str) -> _Writer:
    try:
        # A fresh named-schema table per schema, so two versions of one record can coexist.
        parsed = parse_schema(dict(schema), named_schemas={})
        canonical = to_parsing_canonical_form(parsed)
    except Exception as exc:  # fastavro raises several types for a malformed schema
        raise CodecError(f"invalid Avro schema in {origin}: {exc}") from exc
    if parsed.get("type") != "record":
        raise CodecError(f"schema in {origin} is not a record (type {parsed.get('type')!r})")
    # fastavro already returns the hex in the spec's byte order (little-endian); ~300 us a
    # call, hence once per schema here and never per message.
    fp_bytes = bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))
    return _Writer(
        name=parsed["name"],
        fingerprint=int.from_bytes(fp_bytes, "little"),
        header=MARKER + fp_bytes,
        parsed=parsed,
    )


def _earlier_versions(schema: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """``schema`` as it was before each of its :data:`ADDED_FIELDS` was added."""
    added = [path for path in ADDED_FIELDS.get(name, ()) if _has_field(schema, path)]
    return [_without(schema, added[i:]) for i in range(len(added))]


def _has_field(schema: Mapping[str, Any], path: str) -> bool:
    head, _, rest = path.partition(".")
    field = next((f for f in schema["fields"] if f["name"] == head), None)
    return field is not None and (not rest or _has_field(field["type"], rest))


def _without(schema: Mapping[str, Any], paths: list[str]) -> dict[str, Any]:
    """``schema`` without the fields at ``paths`` (a nested record's as "field.nested")."""
    fields = []
    for field in schema["fields"]:
        if field["name"] in paths:
            continue
        nested = [p.partition(".")[2] for p in paths if p.startswith(field["name"] + ".")]
        if nested:
            field = {**field, "type": _without(field["type"], nested)}
        fields.append(field)
    return {**schema, "fields": fields}


class AvroCodec:
    """Registry of writer schemas (by fingerprint) and reader schemas (by full name).

    Parameters
    ----------
    schema_dir
        Directory whose ``*.avsc`` files are loaded, one record schema each; they are the
        current schemas, used to encode and as the default reader schemas. Default: the
        repository's ``schemas/`` (or the copy inside the installed package). A record's
        versions from before its :data:`ADDED_FIELDS` are registered as writer schemas too.

    Examples
    --------
    >>> codec = AvroCodec()
    >>> data = codec.encode("DeadLetter", {
    ...     "event_id": "d-1", "event_time": 0, "source_topic": "job-completed",
    ...     "payload": b"not avro", "error_type": "CodecError", "reason": "wrong marker"})
    >>> codec.writer_name(data)
    'leap.v1.DeadLetter'
    >>> record = codec.decode(data)
    >>> record["payload"], record["partition"]
    (b'not avro', None)
    """

    def __init__(self, schema_dir: Path | None = None) -> None:
        directory = default_schema_dir() if schema_dir is None else Path(schema_dir)
        paths = sorted(directory.glob("*.avsc"))
        if not paths:
            raise CodecError(f"no *.avsc files in {directory}")
        self._writers: dict[bytes, _Writer] = {}  # keyed by the header's 8 fingerprint bytes
        self._current: dict[str, _Writer] = {}  # full name -> current schema
        self._short: dict[str, str] = {}  # short name -> full name
        for path in paths:
            try:
                schema = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise CodecError(f"{path} is not valid JSON: {exc}") from exc
            writer = _parse(schema, str(path))
            if writer.name in self._current:
                raise CodecError(f"{path} defines {writer.name} a second time")
            self._add(writer)
            for earlier in _earlier_versions(schema, writer.name):
                self._add(_parse(earlier, f"{path} before {ADDED_FIELDS[writer.name]}"))

    def _add(self, writer: _Writer) -> None:
        self._writers.setdefault(writer.header[len(MARKER) :], writer)
        if writer.name not in self._current:
            self._current[writer.name] = writer
            self._short.setdefault(writer.name.rpartition(".")[2], writer.name)

    def register(self, schema: Mapping[str, Any]) -> int:
        """Add a writer schema (e.g. an older or newer version of a record).

        Messages written with it become readable. The current schema of its name is not
        replaced; a record name seen for the first time becomes current.

        Parameters
        ----------
        schema
            An Avro record schema, as a dict.

        Returns
        -------
        int
            Its CRC-64-AVRO fingerprint (the spec's 64-bit value, unsigned).

        Examples
        --------
        >>> codec = AvroCodec()
        >>> fp = codec.register({"type": "record", "name": "Ping", "namespace": "leap.v1",
        ...                      "fields": [{"name": "n", "type": "int"}]})
        >>> f"{fp:#018x}" == "0x" + codec.encode("Ping", {"n": 1})[2:10][::-1].hex()
        True
        """
        writer = _parse(schema, "register()")
        self._add(writer)
        return writer.fingerprint

    def _current_schema(self, name: str) -> _Writer:
        writer = self._current.get(name) or self._current.get(self._short.get(name, ""))
        if writer is None:
            known = ", ".join(sorted(self._current))
            raise CodecError(f"unknown record name {name!r}; known: {known}")
        return writer

    def _writer_of(self, data: bytes) -> _Writer:
        if len(data) < _HEADER_SIZE:
            raise CodecError(
                f"truncated header: single-object encoding needs {_HEADER_SIZE} header bytes, "
                f"got {len(data)}"
            )
        if data[:2] != MARKER:
            raise CodecError(
                f"wrong marker {data[:2].hex(' ')}: not Avro single-object encoding "
                f"(expected {MARKER.hex(' ')})"
            )
        key = data[len(MARKER) : _HEADER_SIZE]
        writer = self._writers.get(key)
        if writer is None:
            raise CodecError(
                f"unknown writer schema fingerprint {int.from_bytes(key, 'little'):#018x}: "
                f"none of the {len(self._writers)} registered writer schemas has it "
                "(register() the writer's schema to read such messages)"
            )
        return writer

    def writer_name(self, data: bytes) -> str:
        """Full name of the record schema a message was written with (reads the header only).

        Examples
        --------
        >>> default_codec().writer_name(encode("JobCompleted", {
        ...     "event_id": "e-1", "event_time": 0, "job_id": "j-1", "lineage_id": "l-1",
        ...     "hardware_type": "gpu-a", "num_devices": 1, "status": "failed", "steps": 3}))
        'leap.v1.JobCompleted'
        """
        return self._writer_of(bytes(data)).name

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Encode a record with the current schema of ``name``.

        Parameters
        ----------
        name
            Full (``leap.v1.JobSubmitted``) or short (``JobSubmitted``) record name.
        record
            The record as a dict. Fields with a default may be left out; any field the schema
            does not have is an error (it would otherwise be dropped silently). Timestamps
            may be ``datetime`` (naive means UTC) or int milliseconds since the epoch.

        Returns
        -------
        bytes
            Marker, writer fingerprint and Avro binary body.

        Raises
        ------
        CodecError
            If ``name`` is unknown or the record does not fit the schema.

        Examples
        --------
        >>> try:
        ...     encode("JobCompleted", {"event_id": "e-1"})
        ... except CodecError as exc:
        ...     print(exc)  # doctest: +ELLIPSIS
        record does not fit leap.v1.JobCompleted: Field event_time is specified in the ...
        """
        writer = self._current_schema(name)
        if not isinstance(record, Mapping):
            raise CodecError(
                f"record for {writer.name} must be a dict, got {type(record).__name__}"
            )
        buf = io.BytesIO()
        buf.write(writer.header)
        try:
            # strict_allow_default: a typo'd optional field raises instead of silently
            # writing its default; measured at no extra cost.
            schemaless_writer(buf, writer.parsed, record, strict_allow_default=True)
        except Exception as exc:  # fastavro raises ValueError, TypeError, AttributeError, ...
            raise CodecError(
                f"record does not fit {writer.name}: {_shorten(exc) or type(exc).__name__}"
            ) from exc
        return buf.getvalue()

    def _reader_schema(
        self, writer: _Writer, reader: str | Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        if reader is None:
            target = self._current[writer.name]
        elif isinstance(reader, str):
            target = self._current_schema(reader)
        else:
            target = _parse(reader, "the reader schema")
        # fastavro's own mismatch error prints both schemas whole; say it in one line instead.
        if target.name != writer.name:
            raise CodecError(f"cannot read a {writer.name} message as {target.name}")
        # Same schema: skip fastavro's resolution pass entirely.
        return None if target.fingerprint == writer.fingerprint else target.parsed

    def decode(self, data: bytes, reader: str | Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Decode a message, resolving its writer schema into a reader schema.

        Parameters
        ----------
        data
            A single-object encoded message.
        reader
            The schema to read into: ``None`` for the current schema of the writer's record
            name, a record name for that record's current schema, or an explicit schema dict
            (parsed on every call: the slow path, meant for tests and tools).

        Returns
        -------
        dict
            The record, as fastavro gives it (timestamps as UTC-aware ``datetime``).

        Raises
        ------
        CodecError
            If the bytes are truncated or corrupt, the marker is wrong, the fingerprint is
            unknown, or the writer schema cannot be resolved into the reader schema.

        Examples
        --------
        >>> try:
        ...     decode(bytes.fromhex("c301") + bytes(8))
        ... except CodecError as exc:
        ...     print(exc)  # doctest: +ELLIPSIS
        unknown writer schema fingerprint 0x0000000000000000: none of the ...
        """
        data = bytes(data)
        writer = self._writer_of(data)
        reader_schema = self._reader_schema(writer, reader)
        buf = io.BytesIO(data)
        buf.seek(_HEADER_SIZE)
        try:
            record = schemaless_reader(buf, writer.parsed, reader_schema)
        except SchemaResolutionError as exc:
            raise CodecError(
                f"cannot read {writer.name} (writer fingerprint {writer.fingerprint:#018x}) "
                f"into the reader schema: {_shorten(exc)}"
            ) from exc
        except (EOFError, IndexError) as exc:
            # Running out of bytes is an EOFError mid-value, an IndexError mid-varint; an
            # IndexError with bytes left is a bad union branch index, hence the position test.
            if buf.tell() < len(data):
                raise CodecError(
                    f"corrupt body of {writer.name}: {type(exc).__name__}: {_shorten(exc)}"
                ) from exc
            raise CodecError(
                f"truncated body of {writer.name}: the {len(data) - _HEADER_SIZE}-byte body "
                "ends before the record does"
            ) from exc
        except Exception as exc:  # other garbage: UnicodeDecodeError, ValueError, ...
            raise CodecError(
                f"corrupt body of {writer.name}: {type(exc).__name__}: {_shorten(exc)}"
            ) from exc
        trailing = len(data) - buf.tell()
        if trailing:
            raise CodecError(
                f"corrupt body of {writer.name}: {trailing} trailing byte(s) after the record"
            )
        return record


@functools.cache
def default_codec() -> AvroCodec:
    """The process-wide codec over the repository's schemas, built on first use.

    Examples
    --------
    >>> default_codec() is default_codec()
    True
    """
    return AvroCodec()


def encode(name: str, record: Mapping[str, Any]) -> bytes:
    """Encode with :func:`default_codec` (see :meth:`AvroCodec.encode`).

    Examples
    --------
    A 10-byte header, then 13 bytes of body (a null union branch costs one byte):

    >>> len(encode("DeadLetter", {"event_id": "d", "event_time": 0, "source_topic": "t",
    ...                           "payload": b"", "error_type": "E", "reason": "r"}))
    23
    """
    return default_codec().encode(name, record)


def decode(data: bytes, reader: str | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Decode with :func:`default_codec` (see :meth:`AvroCodec.decode`).

    Examples
    --------
    >>> decode(encode("DeadLetter", {"event_id": "d", "event_time": 0, "source_topic": "t",
    ...                              "payload": b"x", "error_type": "E", "reason": "r"}))["payload"]
    b'x'
    """
    return default_codec().decode(data, reader)
