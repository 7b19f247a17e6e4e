"""The hardware catalog: what each accelerator type can do and what it costs.

The catalog is a TOML file with one ``[[accelerator]]`` table per type (the packaged one is
``leap_stream/core/catalog.toml``; ``docs/catalog.md`` describes the fields and units). It is
validated as a whole on load: every problem in the file is reported in one
:class:`CatalogError`, each naming the file, the entry and the field, so a hand-edited catalog
is fixed in one pass rather than one error at a time.

>>> catalog = default_catalog()
>>> catalog["H100-SXM"].memory_gb
80.0
>>> "TPU-v5p" in catalog, "H100" in catalog
(True, False)
>>> catalog["H100-SXM"].peak_tflops("fp8")
1978.0
"""

from __future__ import annotations

import difflib
import functools
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from leap_stream.core.events import FRAMEWORKS, PRECISIONS

__all__ = [
    "FP32_FRACTION",
    "VENDORS",
    "Accelerator",
    "Catalog",
    "CatalogError",
    "catalog_markdown",
    "default_catalog",
    "load_catalog",
]

VENDORS = ("NVIDIA", "AMD", "Intel", "Google", "AWS", "Graphcore")

# fp32 training rate as a fraction of the 16-bit rate, when an entry gives no ``fp32_tflops``.
# What "fp32" runs on differs by vendor: NVIDIA Ampere+ routes fp32 matmuls through TF32 tensor
# cores (half the bf16 rate); AMD CDNA3 has fp32 matrix cores at 1/8; TPUs have no fp32 matmul
# unit and XLA's "high" precision takes three bf16 passes; Gaudi 3's MME runs TF32 at 1/4, and
# Trainium and the Bow IPU run fp32 at 1/4 of their 16-bit rate. Entries that break the vendor
# rule (pre-Ampere NVIDIA, CDNA1/2, CPUs) set ``fp32_tflops`` in the catalog instead.
FP32_FRACTION: Mapping[str, float] = {
    "NVIDIA": 0.5,
    "AMD": 0.125,
    "Intel": 0.25,
    "Google": 1 / 3,
    "AWS": 0.25,
    "Graphcore": 0.25,
}

# Types are event identifiers (``hardware_type``): keep them to one shell-safe token.
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class CatalogError(ValueError):
    """A catalog that cannot be used: bad file, bad TOML, or entries that fail validation.

    The message lists every problem, one per line, each as
    ``<file>: accelerator #<n> '<name>': <field> <problem>`` (``n`` counts from 1 in file order).

    Examples
    --------
    >>> try:
    ...     load_catalog("/nonexistent/catalog.toml")
    ... except CatalogError as error:
    ...     print(error)
    /nonexistent/catalog.toml: cannot read the catalog: file not found
    """


class Accelerator(BaseModel):
    """One accelerator type: its peak rates, memory, links, frameworks, launch date and price.

    All figures are per device (one GPU die, TPU chip, Trainium chip, Gaudi card, IPU, or CPU
    socket) and dense (no structured sparsity). Booleans, numbers and lists are strict: a
    quoted number in the TOML is an error, not silently converted.

    Attributes
    ----------
    name
        Unique type name, as it appears in events (``hardware_type``), e.g. ``"H100-SXM"``.
    vendor
        One of :data:`VENDORS`.
    bf16_tflops
        Dense 16-bit tensor rate (bf16, or fp16 where ``bf16_support`` is false), TFLOPS.
    fp8_support
        Whether fp8 matmuls run natively (Hopper, Ada, Blackwell, MI300+, Gaudi 2/3, ...).
    memory_gb, memory_bw_tbps
        Device memory (GB) and its bandwidth (TB/s).
    interconnect_gbps, devices_per_node
        Scale-up link bandwidth per device (GB/s, bidirectional) and how many devices it spans.
    scale_out_gbps
        Network bandwidth per device between nodes, GB/s (a 400 Gb/s NIC is 50).
    frameworks
        Frameworks with a production backend for it, from ``events.FRAMEWORKS``.
    launch_date
        General availability (to the month is fine).
    price_per_device_hour
        Indicative on-demand price per device-hour, USD.
    source
        Where the figures come from (spec sheet, price page).
    fp32_tflops, fp8_tflops
        Optional overrides of the fp32 and fp8 rules in :meth:`peak_tflops`.
    bf16_support, fp16_support
        Whether bf16 / fp16 run natively (default true).

    Examples
    --------
    >>> tpu = default_catalog()["TPU-v5e"]
    >>> tpu.vendor, tpu.bf16_tflops, tpu.supports("jax", "bf16"), tpu.supports("jax", "fp8")
    ('Google', 197.0, True, False)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(pattern=_NAME_PATTERN)
    vendor: str
    bf16_tflops: float = Field(gt=0)
    fp8_support: bool
    memory_gb: float = Field(gt=0)
    memory_bw_tbps: float = Field(gt=0)
    interconnect_gbps: float = Field(gt=0)
    devices_per_node: int = Field(ge=1)
    scale_out_gbps: float = Field(gt=0)
    frameworks: tuple[str, ...]
    # Not strict: TOML gives a native date, Python callers may pass an ISO string.
    launch_date: date = Field(strict=False)
    price_per_device_hour: float = Field(gt=0)
    source: str = Field(min_length=1)
    fp32_tflops: float | None = Field(default=None, gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    bf16_support: bool = True
    fp16_support: bool = True

    @field_validator("frameworks", mode="before")
    @classmethod
    def _frameworks_as_tuple(cls, value: Any) -> Any:
        # TOML arrays arrive as lists; strict mode would refuse a list for a tuple field.
        return tuple(value) if isinstance(value, list) else value

    @field_validator("vendor")
    @classmethod
    def _known_vendor(cls, value: str) -> str:
        if value not in VENDORS:
            raise ValueError(f"must be one of {', '.join(VENDORS)}, got {value!r}")
        return value

    @field_validator("frameworks")
    @classmethod
    def _known_frameworks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"must list at least one of {', '.join(FRAMEWORKS)}")
        unknown = [f for f in value if f not in FRAMEWORKS]
        if unknown:
            raise ValueError(
                f"unknown {', '.join(map(repr, unknown))} (known: {', '.join(FRAMEWORKS)})"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"lists a framework twice: {list(value)}")
        return value

    @model_validator(mode="after")
    def _fp8_rate_needs_fp8(self) -> Accelerator:
        if self.fp8_tflops is not None and not self.fp8_support:
            raise ValueError("fp8_tflops is set but fp8_support is false")
        return self

    def peak_tflops(self, precision: str) -> float:
        """Dense peak rate at ``precision`` (one of ``events.PRECISIONS``), TFLOPS.

        - ``bf16`` / ``fp16``: ``bf16_tflops``; a format that does not run natively falls back
          to the fp32 rate (that is what emulation costs at best).
        - ``fp8``: ``fp8_tflops`` if given, else twice ``bf16_tflops`` when ``fp8_support``;
          without fp8 support the job runs its matmuls in 16 bits, at ``bf16_tflops``.
        - ``fp32``: ``fp32_tflops`` if given, else ``bf16_tflops`` times
          :data:`FP32_FRACTION` of the vendor.

        Examples
        --------
        >>> h100 = default_catalog()["H100-SXM"]
        >>> [h100.peak_tflops(p) for p in ("fp32", "bf16", "fp8")]
        [494.5, 989.0, 1978.0]
        >>> default_catalog()["V100-SXM2-16GB"].peak_tflops("bf16")  # no bf16: fp32 rate
        15.7
        """
        if precision == "fp32":
            if self.fp32_tflops is not None:
                return self.fp32_tflops
            return self.bf16_tflops * FP32_FRACTION[self.vendor]
        if precision in ("bf16", "fp16"):
            native = self.bf16_support if precision == "bf16" else self.fp16_support
            return self.bf16_tflops if native else self.peak_tflops("fp32")
        if precision == "fp8":
            if not self.fp8_support:
                return self.bf16_tflops
            return self.fp8_tflops if self.fp8_tflops is not None else 2 * self.bf16_tflops
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")

    def supports(self, framework: str, precision: str) -> bool:
        """Whether a ``framework`` job at ``precision`` can run natively on this type.

        Raises ``ValueError`` for a framework or precision outside ``events.FRAMEWORKS`` /
        ``events.PRECISIONS`` (a typo must not read as "unsupported").

        Examples
        --------
        >>> catalog = default_catalog()
        >>> catalog["Gaudi2"].supports("pytorch", "fp8"), catalog["Gaudi2"].supports("jax", "bf16")
        (True, False)
        >>> catalog["A100-SXM-80GB"].supports("pytorch", "fp8")
        False
        """
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r} (known: {', '.join(FRAMEWORKS)})")
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
        native = {
            "fp32": True,
            "bf16": self.bf16_support,
            "fp16": self.fp16_support,
            "fp8": self.fp8_support,
        }[precision]
        return native and framework in self.frameworks


class Catalog:
    """An immutable collection of :class:`Accelerator` types, in file order, keyed by name.

    Parameters
    ----------
    accelerators
        The types; their names must be unique (a duplicate raises :class:`CatalogError`).

    Examples
    --------
    >>> catalog = default_catalog()
    >>> len(catalog) >= 28, catalog.vendors
    (True, ('AMD', 'AWS', 'Google', 'Graphcore', 'Intel', 'NVIDIA'))
    >>> catalog.price_vector(["H100-SXM", "TPU-v5e"])
    array([6.16, 1.2 ])
    >>> [a.name for a in catalog.launched_by(date(2015, 1, 1))]
    ['K80']
    """

    __slots__ = ("_by_name", "_items")

    def __init__(self, accelerators: Iterable[Accelerator]) -> None:
        items = tuple(accelerators)
        by_name: dict[str, Accelerator] = {}
        duplicates = []
        for accelerator in items:
            if accelerator.name in by_name:
                duplicates.append(accelerator.name)
            by_name[accelerator.name] = accelerator
        if duplicates:
            raise CatalogError(f"catalog: duplicate accelerator names {sorted(set(duplicates))}")
        self._items = items
        self._by_name = by_name

    def __getitem__(self, name: str) -> Accelerator:
        try:
            return self._by_name[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._by_name, n=3, cutoff=0.5)
            hint = f"; close names: {', '.join(close)}" if close else ""
            raise KeyError(f"no accelerator type {name!r} in the catalog{hint}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Accelerator]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Catalog):
            return NotImplemented
        return self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"Catalog({len(self)} types: {', '.join(self.names[:4])}{', ...' * (len(self) > 4)})"

    @property
    def names(self) -> tuple[str, ...]:
        """Type names, in file order."""
        return tuple(self._by_name)

    @property
    def vendors(self) -> tuple[str, ...]:
        """Vendors present, sorted."""
        return tuple(sorted({a.vendor for a in self._items}))

    def launched_by(self, when: date | datetime) -> tuple[Accelerator, ...]:
        """Types generally available on or before ``when`` (a datetime counts by its date)."""
        # datetime subclasses date: compare dates, or a datetime would never equal a date.
        day = when.date() if isinstance(when, datetime) else when
        return tuple(a for a in self._items if a.launch_date <= day)

    def price_vector(self, names: Sequence[str]) -> np.ndarray:
        """Prices per device-hour of ``names``, in that order (``KeyError`` on unknown names)."""
        return np.array([self[name].price_per_device_hour for name in names], dtype=np.float64)

    def to_frame(self) -> pd.DataFrame:
        """One row per type, columns in field order; ``frameworks`` joined with ``;``.

        Examples
        --------
        >>> frame = default_catalog().to_frame()
        >>> row = frame.set_index("name").loc["MI300X"]
        >>> print(row.memory_gb, row.frameworks, row.launch_date.date())
        192.0 pytorch;jax 2023-12-06
        """
        rows = []
        for accelerator in self._items:
            row = accelerator.model_dump()
            row["frameworks"] = ";".join(accelerator.frameworks)
            rows.append(row)
        frame = pd.DataFrame(rows, columns=list(Accelerator.model_fields))
        frame["launch_date"] = pd.to_datetime(frame["launch_date"])
        return frame


def _describe(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``<field> <problem>``, in the words a catalog editor needs."""
    loc = [str(part) for part in error["loc"]]
    field = loc[0] + "".join(f"[{part}]" for part in loc[1:]) if loc else "entry"
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind == "missing":
        return f"{field}: missing required field"
    if kind == "extra_forbidden":
        return f"{field}: unknown field (known: {', '.join(Accelerator.model_fields)})"
    if kind == "greater_than":
        return f"{field} must be > {ctx['gt']:g}, got {value!r}"
    if kind == "greater_than_equal":
        return f"{field} must be >= {ctx['ge']:g}, got {value!r}"
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        return f"{field} {message}" if loc else message
    return f"{field}: {error['msg'].lower()}, got {value!r}"


def _validate(entries: Any, where: str) -> Catalog:
    """Build a catalog from parsed TOML, reporting every problem in one :class:`CatalogError`."""
    problems: list[str] = []
    if not isinstance(entries, dict):  # pragma: no cover - tomllib always returns a dict
        raise CatalogError(f"{where}: expected a TOML table at the top level")
    unknown = sorted(set(entries) - {"accelerator"})
    if unknown:
        problems.append(f"{where}: unknown top-level keys {unknown} (expected [[accelerator]])")
    tables = entries.get("accelerator")
    if not isinstance(tables, list) or not tables:
        problems.append(f"{where}: no [[accelerator]] tables")
        raise CatalogError("\n".join(problems))

    accelerators: list[Accelerator] = []
    first_seen: dict[str, int] = {}
    for number, table in enumerate(tables, start=1):
        name = table.get("name") if isinstance(table, dict) else None
        label = f"{where}: accelerator #{number}" + (f" {name!r}" if name else " (no name)")
        if not isinstance(table, dict):
            problems.append(f"{label}: expected a table, got {table!r}")
            continue
        if isinstance(name, str) and name in first_seen:
            problems.append(f"{label}: name duplicates accelerator #{first_seen[name]}")
        elif isinstance(name, str):
            first_seen[name] = number
        try:
            accelerators.append(Accelerator.model_validate(table))
        except ValidationError as error:
            problems.extend(f"{label}: {_describe(e)}" for e in error.errors())
    if problems:
        raise CatalogError("\n".join(problems))
    return Catalog(accelerators)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load and validate a catalog TOML file; ``None`` loads the packaged default.

    Parameters
    ----------
    path
        A catalog file (``--catalog FILE`` on the command line), or ``None`` for
        ``leap_stream/core/catalog.toml``.

    Raises
    ------
    CatalogError
        The file is missing or unreadable, is not valid TOML, or has invalid entries (all of
        them listed).

    Examples
    --------
    >>> catalog = load_catalog()
    >>> catalog.names[:3]
    ('K80', 'P4', 'P100-PCIe-16GB')
    """
    if path is None:
        resource = resources.files("leap_stream.core").joinpath("catalog.toml")
        where, read = "leap_stream/core/catalog.toml", resource.read_text
    else:
        where, read = str(path), Path(path).read_text
    try:
        text = read(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{where}: cannot read the catalog: file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"{where}: cannot read the catalog: {error}") from None
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CatalogError(f"{where}: invalid TOML: {error}") from None
    return _validate(parsed, where)


@functools.cache
def default_catalog() -> Catalog:
    """The packaged catalog, loaded once per process.

    Examples
    --------
    >>> default_catalog() is default_catalog()
    True
    """
    return load_catalog()


def catalog_markdown(catalog: Catalog) -> str:
    """The summary table of ``catalog`` that ``docs/catalog.md`` embeds, as Markdown.

    Examples
    --------
    >>> print(catalog_markdown(default_catalog()).splitlines()[2])
    | K80 | NVIDIA | 4.37 | 12 | 0.24 | 0.90 | 2014-11-17 |
    """
    lines = [
        "| name | vendor | bf16 TFLOPS | memory GB | bandwidth TB/s | USD / device-hour | launch |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for a in catalog:
        lines.append(
            f"| {a.name} | {a.vendor} | {a.bf16_tflops:g} | {a.memory_gb:g} | "
            f"{a.memory_bw_tbps:g} | {a.price_per_device_hour:.2f} | {a.launch_date} |"
        )
    return "\n".join(lines) + "\n"
