"""What drives accuracy: the same replay with one input group of the predictor removed at a time.

Each variant is a full prequential replay (:func:`leap_stream.backtest.replay.replay`) of the same
history by a :class:`~leap_stream.core.LeapCore` built ``without`` one group of
:data:`leap_stream.core.inputs.INPUT_GROUPS`; ``full`` removes nothing, and ``lookup_table``
swaps the model for the lookup table it is compared with (read off the full replay's baseline,
which ranks the very same submissions). Variants run in parallel, a process each, up to the
machine's cores.

The table has, per variant: within 10% of the measured throughput (abstention = miss) overall
and on transfers (a job's first attempt on a type, from its attempts on others: ``n/a`` where a
variant makes none, as without prior throughput), coverage, and, with an oracle, top-1 regret;
and each one's difference from ``full`` in points. ``ablation.csv``, ``ablation.md`` and
``ablation.html`` (the table and a plot) are written to the output directory, each variant's own
``summary.json`` under ``variants/<name>/``.

>>> [variant.name for variant in VARIANTS][:3]
['full', 'no_prior_throughput', 'no_hardware_specs']
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from leap_stream.backtest.nightly import machine_cores
from leap_stream.backtest.replay import replay
from leap_stream.backtest.report import blank_figure, embedded, html_page
from leap_stream.core.catalog import Catalog
from leap_stream.core.inputs import INPUT_GROUPS
from leap_stream.core.priors import HALF_LIFE_DAYS
from leap_stream.runtime import tune_gc

__all__ = [
    "LOOKUP_TABLE",
    "VARIANTS",
    "ResumeError",
    "Variant",
    "ablate",
    "ablation_table",
    "markdown_table",
    "table_cells",
]

LOOKUP_TABLE = "lookup_table"
INPUTS_FILE = "inputs.json"
# The table's figures: (column, what it is), each a fraction; "points" columns are differences.
FIGURES = (
    ("within_10pct", "within 10%"),
    ("transfer_within_10pct", "transfers"),
    ("coverage", "coverage"),
    ("top1_regret", "top-1 regret"),
)


class ResumeError(ValueError):
    """``--resume`` into a directory that holds an ablation of other inputs."""


@dataclass(frozen=True)
class Variant:
    """One replay of the ablation: the core built without ``without``."""

    name: str
    without: frozenset[str]

    @property
    def removed(self) -> str:
        """What the variant takes away, in words."""
        return "; ".join(INPUT_GROUPS[group] for group in sorted(self.without)) or "nothing"


VARIANTS: tuple[Variant, ...] = (
    Variant("full", frozenset()),
    *(Variant(f"no_{group}", frozenset({group})) for group in INPUT_GROUPS),
)


def _replay_variant(
    variant: Variant,
    history: Path,
    out_dir: Path,
    catalog: Catalog,
    oracle: Path | None,
    lineage_half_life_days: float,
) -> tuple[str, dict[str, Any]]:
    """One variant's replay (in a worker process): its name and summary."""
    summary = replay(
        history,
        out_dir / "variants" / variant.name,
        catalog,
        oracle=oracle,
        progress=False,
        report=False,
        lineage_half_life_days=lineage_half_life_days,
        without=variant.without,
    )
    return variant.name, summary


def ablate(
    history: Path,
    out_dir: Path,
    catalog: Catalog,
    *,
    oracle: Path | None = None,
    variants: Sequence[Variant] = VARIANTS,
    workers: int | None = None,
    progress: bool = True,
    lineage_half_life_days: float = HALF_LIFE_DAYS,
    resume: bool = False,
) -> pd.DataFrame:
    """Replay ``history`` once per variant; write and return the ablation table.

    ``workers``: processes (default: the machine's cores; 0 runs the replays in this process,
    one after the other). The variants must include ``full``, the reference of every difference.
    ``resume``: a variant whose ``variants/<name>/summary.json`` is already in ``out_dir`` is
    read, not replayed again (a replay writes it last, so it is there only when the replay
    finished); ``out_dir/inputs.json`` must then name the same inputs, when it exists.
    """
    if not any(v.name == "full" and not v.without for v in variants):
        raise ValueError("the variants must include 'full' (nothing removed): the reference")
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(history, oracle, catalog, lineage_half_life_days)
    _check_inputs(out_dir / INPUTS_FILE, inputs, resume)
    workers = machine_cores() if workers is None else workers
    args = (history, out_dir, catalog, oracle, lineage_half_life_days)
    summaries: dict[str, dict[str, Any]] = {}
    todo = list(variants)
    if resume:
        for variant in variants:
            done = out_dir / "variants" / variant.name / "summary.json"
            if done.exists():
                summaries[variant.name] = json.loads(done.read_text(encoding="utf-8"))
        todo = [v for v in variants if v.name not in summaries]
    columns = (TextColumn("ablation: variants replayed"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), disable=not progress) as bar:
        task = bar.add_task("variants", total=len(variants), completed=len(summaries))
        if workers == 0:
            for variant in todo:
                name, summary = _replay_variant(variant, *args)
                summaries[name] = summary
                bar.advance(task)
        elif todo:
            context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
            pool = min(workers, len(todo))
            with ProcessPoolExecutor(pool, mp_context=context, initializer=tune_gc) as executor:
                futures = [executor.submit(_replay_variant, v, *args) for v in todo]
                for future in as_completed(futures):
                    name, summary = future.result()
                    summaries[name] = summary
                    bar.advance(task)
    table = ablation_table(summaries, variants)
    table.to_csv(out_dir / "ablation.csv", index=False)
    (out_dir / "ablation.md").write_text(markdown_table(table) + "\n", encoding="utf-8")
    title = f"leap-stream ablation: {history.name}"
    (out_dir / "ablation.html").write_text(_page(table, title), encoding="utf-8")
    return table


def _inputs(
    history: Path, oracle: Path | None, catalog: Catalog, lineage_half_life_days: float
) -> dict[str, Any]:
    """What an ablation's variants were replayed from: files by path and size, the catalog's
    content (its sha256: prices and figures both move the results) and settings."""
    files = {"history": history, "oracle": oracle}
    entries = "\n".join(accelerator.model_dump_json() for accelerator in catalog)
    return {
        **{name: str(path.resolve()) if path else None for name, path in files.items()},
        **{f"{name}_bytes": path.stat().st_size if path else None for name, path in files.items()},
        "catalog_sha256": hashlib.sha256(entries.encode()).hexdigest(),
        "lineage_half_life_days": lineage_half_life_days,
    }


def _check_inputs(path: Path, inputs: dict[str, Any], resume: bool) -> None:
    """Refuse to resume an ablation of other inputs; record this one's."""
    if resume and path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        differ = {k: (before.get(k), v) for k, v in inputs.items() if before.get(k) != v}
        if differ:
            raise ResumeError(
                f"cannot resume: {path.parent} holds an ablation of other inputs "
                f"(there, here): {differ}"
            )
    path.write_text(json.dumps(inputs, indent=2) + "\n", encoding="utf-8")


def _figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """A replay summary's figures for the table (NaN where it has none)."""
    accuracy = summary.get("accuracy") or {}
    transfer = (accuracy.get("by_source") or {}).get("transfer") or {}
    decisions = summary.get("decisions") or {}
    return {
        "within_10pct": accuracy.get("within_10pct_abstain_as_miss", math.nan),
        "transfer_within_10pct": transfer.get("within_10pct", math.nan),
        "transfers": transfer.get("n", 0),
        "coverage": summary.get("coverage", math.nan),
        "top1_regret": decisions.get("top1_regret", math.nan),
    }


def _lookup_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """The lookup table's figures, from the full replay's baseline block."""
    lookup = (summary.get("baselines") or {}).get("lookup") or {}
    decisions = summary.get("decisions") or {}
    return {
        "within_10pct": lookup.get("within_10pct_abstain_as_miss", math.nan),
        "transfer_within_10pct": math.nan,  # the table has no prediction sources
        "transfers": 0,
        "coverage": lookup.get("coverage", math.nan),
        "top1_regret": decisions.get("lookup_top1_regret", math.nan),
    }


def ablation_table(
    summaries: Mapping[str, Mapping[str, Any]], variants: Sequence[Variant] = VARIANTS
) -> pd.DataFrame:
    """One row per variant (and ``lookup_table``): figures and differences from ``full``.

    >>> full = {"accuracy": {"within_10pct_abstain_as_miss": 0.6,
    ...     "by_source": {"transfer": {"within_10pct": 0.45}}}, "coverage": 1.0,
    ...     "baselines": {"lookup": {"within_10pct_abstain_as_miss": 0.3, "coverage": 0.9}}}
    >>> fewer = {"accuracy": {"within_10pct_abstain_as_miss": 0.5, "by_source": {}},
    ...     "coverage": 1.0}
    >>> table = ablation_table({"full": full, "no_prior_throughput": fewer},
    ...                        [Variant("full", frozenset()),
    ...                         Variant("no_prior_throughput", frozenset({"prior_throughput"}))])
    >>> table.set_index("variant")["within_10pct_points"].round(1).to_dict()
    {'full': 0.0, 'no_prior_throughput': -10.0, 'lookup_table': -30.0}
    """
    rows = [
        {"variant": v.name, "removed": v.removed, **_figures(summaries[v.name])} for v in variants
    ]
    rows.append(
        {
            "variant": LOOKUP_TABLE,
            "removed": "the model, priors and all: the lookup table ranks instead",
            **_lookup_figures(summaries["full"]),
        }
    )
    table = pd.DataFrame(rows)
    full = table.loc[table["variant"] == "full"].iloc[0]
    for column, _ in FIGURES:
        table[f"{column}_points"] = (table[column] - full[column]) * 100.0
    return table


def table_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows as text: percentages, and differences from ``full`` in
    points (no regret column without an oracle)."""
    has_regret = table["top1_regret"].notna().any()
    figures = [f for f in FIGURES if has_regret or f[0] != "top1_regret"]
    header = ["variant", *(label for _, label in figures), "n transfers", "removed"]
    rows = []
    for row in table.itertuples(index=False):
        cells = [
            _cell(getattr(row, column), getattr(row, f"{column}_points"), row.variant == "full")
            for column, _ in figures
        ]
        rows.append([row.variant, *cells, f"{row.transfers:,}", row.removed])
    return header, rows


def _cell(value: float, points: float, reference: bool) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    if reference or not np.isfinite(points):
        return f"{value:.1%}"
    return f"{value:.1%} ({points:+.1f})"


def markdown_table(table: pd.DataFrame) -> str:
    """The table in Markdown (each difference from ``full`` in points, in brackets)."""
    header, rows = table_cells(table)
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 2) + " --- |"]
    lines += ["| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |" for row in rows]
    return "\n".join(lines)


def _page(table: pd.DataFrame, title: str) -> str:
    header, rows = table_cells(table)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    caption = (
        "Each bar is one replay of the same history; the dashed line is the full model. "
        "Accuracy and coverage: higher is better; top-1 regret (the extra cost of the first "
        "choice over the truly cheapest eligible type): lower is better. A missing bar: the "
        "variant makes no such prediction (no transfers without prior throughput)."
    )
    plot = _plot(table)
    return html_page(
        title,
        [
            f"<h1>{html.escape(title)}</h1>",
            '<p class="muted">In brackets: the difference from the full model, in points.</p>',
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
            '<p class="muted">Nothing to plot: no variant scored an attempt.</p>'
            if plot is None
            else embedded(plot, "accuracy, coverage and regret per variant", caption),
        ],
    )


def _plot(table: pd.DataFrame) -> Any:
    """The figures' bars per variant (None: no variant has any figure)."""
    figures = [f for f in FIGURES if table[f[0]].notna().any()]
    if not figures:
        return None
    figure = blank_figure(3.2 * len(figures), 0.35 * len(table) + 1.2)
    axes = figure.subplots(1, len(figures), sharey=True, squeeze=False)[0]
    names = table["variant"].tolist()
    full = table.loc[table["variant"] == "full"].iloc[0]
    for ax, (column, label) in zip(axes, figures, strict=True):
        values = table[column].to_numpy(dtype=float) * 100.0
        colors = ["#1f77b4" if n != LOOKUP_TABLE else "#ff7f0e" for n in names]
        ax.barh(names, np.nan_to_num(values), color=colors)
        ax.axvline(full[column] * 100.0, color="#222222", linestyle="--", linewidth=1)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("%")
        ax.grid(axis="x", alpha=0.3)
    axes[0].invert_yaxis()  # full on top
    return figure
