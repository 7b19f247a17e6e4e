"""The ``leap-stream`` command line: the imperative shell over the core.

Commands: ``generate`` (a synthetic fleet), ``replay`` (the backtester), ``import mlperf`` (real
results as a history), ``history validate`` / ``history convert`` and ``demo`` (generate and
replay a small fleet: the README's first command). Heavy modules are imported inside the
commands so that ``--help`` answers at once. A contract error (bad catalog, history, oracle or
MLPerf table) is one line on stderr and exit code 2.

>>> from typer.testing import CliRunner
>>> result = CliRunner().invoke(app, ["history", "--help"])
>>> result.exit_code, "validate" in result.output, "convert" in result.output
(0, True, True)
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from leap_stream.core.priors import HALF_LIFE_DAYS
from leap_stream.runtime import tune_gc
from leap_stream.streaming.cli import CatalogOption, LineageHalfLife
from leap_stream.streaming.cli import register as register_streaming_commands

if TYPE_CHECKING:
    from leap_stream.core.catalog import Catalog
    from leap_stream.data.fleet import FleetStats
    from leap_stream.data.importers.attempts import ImportStats

__all__ = ["app", "nightly_view", "summary_view"]

app = typer.Typer(
    help="leap-stream: rank accelerator types for training jobs by predicted throughput per cost.",
    no_args_is_help=True,
    add_completion=False,
)
import_app = typer.Typer(
    help="Turn public benchmark results into a leap-stream history.", no_args_is_help=True
)
history_app = typer.Typer(
    help="Check and convert history (or oracle) files: .parquet, .csv, .avro.",
    no_args_is_help=True,
)


@app.callback()
def _tune_runtime() -> None:
    """Before any command: the interpreter settings for long runs (leap_stream.runtime)."""
    tune_gc()


app.add_typer(import_app, name="import")
app.add_typer(history_app, name="history")
register_streaming_commands(app)

console = Console(highlight=False)
# soft_wrap: an error stays one line however narrow the terminal, so it can be grepped.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

# The size of `leap-stream demo`: ~105k events, ~20 s for generate + replay on one core. At 14
# days the online model has too little history to show its steady state (docs/metrics.md).
DEMO_DAYS = 28
DEMO_JOBS_PER_DAY = 2_000
DEMO_SEED = 7
# replay --nightly: the nights retrained by default (the published system's 30 retrains).
NIGHTS = 30

HistoryArgument = Annotated[
    Path,
    typer.Argument(help="History file (.parquet, .csv, .avro).", exists=True, dir_okay=False),
]
OracleOption = Annotated[
    Path | None,
    typer.Option(
        "--oracle",
        help="The history's oracle (true throughput everywhere): adds decision figures.",
        exists=True,
        dir_okay=False,
    ),
]
TrainDaysOption = Annotated[
    float | None,
    typer.Option(
        "--train-days",
        min=0.01,
        metavar="DAYS",
        help="Train the batch models on the completions of the last DAYS days before the "
        "cutoff only (default: all): bounds a retrain's cost on a long, busy history.",
    ),
]


@contextmanager
def _exit_on(*errors: type[Exception]) -> Iterator[None]:
    """Turn the given contract errors into one line on stderr and exit code 2."""
    try:
        yield
    except errors as error:
        # one line, whatever the message holds; a message of several problems, one a line,
        # keeps them apart
        lines = (" ".join(line.split()) for line in str(error).splitlines())
        message = "; ".join(line for line in lines if line)
        err_console.print(f"[red]error:[/red] {escape(message)}")
        raise typer.Exit(2) from error


def _load_catalog(path: Path | None) -> Catalog:
    from leap_stream.core.catalog import CatalogError, default_catalog, load_catalog

    with _exit_on(CatalogError):
        return load_catalog(path) if path else default_catalog()


# --------------------------------------------------------------------------------------------
# Tables


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100.0 * value:+.1f}%" if signed else f"{100.0 * value:.1f}%"


_NO_BASELINE = object()  # a row the lookup table has no counterpart for: left blank


def _get(mapping: Mapping[str, Any], *keys: str) -> Any:
    """``mapping[k1][k2]...``, or None where a level is missing."""
    value: Any = mapping
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def summary_view(summary: Mapping[str, Any], title: str = "backtest") -> Group:
    """The headline figures of a replay summary (``replay()``'s return), ready to print.

    A table of the model beside the lookup table (coverage, accuracy, intervals); when the
    replay had an oracle, a table of what following each choice would have cost; then the
    replay's speed. Shares print as percentages, a figure with nothing to compute it from as
    ``-``. ``docs/metrics.md`` defines every figure.

    Parameters
    ----------
    summary
        The dict of ``leap_stream.backtest.metrics.Backtest.summary`` (keys as in docs/metrics.md).
    title
        The first table's title.

    Returns
    -------
    rich.console.Group

    Examples
    --------
    >>> summary = {"coverage": 1.0, "accuracy": {"n": 8, "within_10pct": 0.5},
    ...            "baselines": {"lookup": {"coverage": 0.75}}, "events_per_second": 12345.6}
    >>> import io
    >>> console = Console(width=100, record=True, file=io.StringIO())
    >>> console.print(summary_view(summary))
    >>> text = console.export_text()
    >>> "100.0%" in text, "75.0%" in text, "12,346 events/s" in text, "regret" in text
    (True, True, True, False)
    """
    lookup = _get(summary, "baselines", "lookup") or {}
    accuracy = summary.get("accuracy") or {}
    lookup_accuracy = lookup.get("accuracy") or {}
    both = lookup.get("comparison") or {}

    table = Table(title=title)
    table.add_column("figure")
    table.add_column("model", justify="right")
    table.add_column("lookup", justify="right")

    def row(label: str, model: Any, baseline: Any = _NO_BASELINE) -> None:
        shown = "" if baseline is _NO_BASELINE else _pct(baseline)
        table.add_row(label, _pct(model), shown)

    row("coverage (eligible submissions ranked)", summary.get("coverage"), lookup.get("coverage"))
    row(
        "coverage (device-hours)",
        summary.get("coverage_gpu_hours"),
        lookup.get("coverage_gpu_hours"),
    )
    table.add_row(
        "scored attempts predicted", _count(accuracy.get("n")), _count(lookup_accuracy.get("n"))
    )
    row("within 10%", accuracy.get("within_10pct"), lookup_accuracy.get("within_10pct"))
    row("within 20%", accuracy.get("within_20pct"), lookup_accuracy.get("within_20pct"))
    row(
        "within 10%, abstention = miss",
        accuracy.get("within_10pct_abstain_as_miss"),
        lookup.get("within_10pct_abstain_as_miss"),
    )
    row(
        f"within 10%, on the {_count(both.get('n', 0))} both predicted",
        both.get("model_within_10pct"),
        both.get("lookup_within_10pct"),
    )
    row("MdAPE (median abs. % error)", accuracy.get("mdape"), lookup_accuracy.get("mdape"))
    nominal = _get(summary, "intervals", "nominal")
    nominal_text = "" if nominal is None else f" (nominal {100.0 * nominal:g}%)"
    row(f"interval coverage{nominal_text}", _get(summary, "intervals", "coverage"))
    parts: list[Table | str] = [table]
    if summary.get("by_source"):
        parts.append(_by_source_table(summary))

    decisions = summary.get("decisions")
    if decisions:
        costs = Table(title="decisions, priced at the oracle's true throughput")
        costs.add_column("figure")
        costs.add_column("value", justify="right")
        for label, key, signed in (
            ("top-1 regret: the model's pick", "top1_regret", True),
            ("top-1 regret: the lookup's pick", "lookup_top1_regret", True),
            ("top-1 regret: the requested hardware", "requested_regret", True),
            ("savings vs the requested hardware", "savings_vs_requested", False),
            ("savings vs the lookup's pick", "savings_vs_lookup", False),
            ("pairwise order accuracy", "pairwise_order_accuracy", False),
        ):
            costs.add_row(label, _pct(decisions.get(key), signed))
        if "unrunnable_picks" in decisions:
            costs.add_row(
                "first choices that cannot run: model / lookup",
                f"{_count(decisions['unrunnable_picks'])} / "
                f"{_count(decisions.get('lookup_unrunnable_picks'))}",
            )
        parts.append(costs)
    if summary.get("holdout"):
        parts.append(_holdout_table(summary["holdout"]))

    events = summary.get("events") or {}
    replayed = events.get("submitted", 0) + events.get("completed", 0)
    rate = summary.get("events_per_second")
    parts.append(
        f"{replayed:,} events replayed at {'-' if rate is None else f'{rate:,.0f}'} events/s"
    )
    return Group(*parts)


def _by_source_table(summary: Mapping[str, Any]) -> Table:
    """Accuracy per prediction source below the overall row; the oracle's ceiling beside it."""
    from leap_stream.backtest.metrics import source_label
    from leap_stream.core.ranking import SOURCES

    ceiling = summary.get("oracle_ceiling")
    # two-line headers, no outer edge, one space of padding: eight columns fit in 80
    table = Table(
        title="the model's accuracy by prediction source", show_edge=False, collapse_padding=True
    )
    table.add_column("source")
    for name in ("n", "within\n10%", "within\n20%", "MdAPE", "interval\ncoverage"):
        table.add_column(name, justify="right")
    if ceiling:  # what a noise-free predictor scores on the same attempts: the noise's ceiling
        table.add_column("oracle\n≤10%", justify="right")
        table.add_column("oracle\nMdAPE", justify="right")

    def add(
        label: str, figures: Mapping[str, Any], coverage: Any, oracle: Any, last: bool = False
    ) -> None:
        cells = [
            label,
            _count(figures.get("n")),
            _pct(figures.get("within_10pct")),
            _pct(figures.get("within_20pct")),
            _pct(figures.get("mdape")),
            _pct(coverage),
        ]
        if ceiling:
            oracle = oracle or {}
            cells += [_pct(oracle.get("within_10pct")), _pct(oracle.get("mdape"))]
        table.add_row(*cells, end_section=last)

    by_source = summary["by_source"]
    overall = summary.get("accuracy") or {}
    add("all", overall, _get(summary, "intervals", "coverage"), ceiling, last=True)
    for source in SOURCES:  # the core's order, whatever sources it has
        if source in by_source:
            figures = by_source[source]
            oracle = _get(ceiling or {}, "by_source", source)
            add(source_label(source), figures, figures.get("interval_coverage"), oracle)
    return table


def _holdout_table(holdout: Mapping[str, Any]) -> Table:
    """The held-out hardware's first attempts: each policy, abstention = miss."""
    types = ", ".join(holdout.get("hardware", []))
    table = Table(
        title=f"held-out hardware ({types}): its first {holdout.get('first', '-')} scored "
        f"attempts each, {_count(holdout.get('n'))} in all, abstention = miss"
    )
    for name in ("policy", "predicted", "within 10%", "within 20%", "MdAPE"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for policy in ("model", "lookup", "oracle"):
        figures = holdout.get(policy)
        if figures is None:
            continue
        table.add_row(
            policy,
            _count(figures.get("n")),
            _pct(figures.get("within_10pct_abstain_as_miss")),
            _pct(figures.get("within_20pct_abstain_as_miss")),
            _pct(figures.get("mdape")),
        )
    return table


def nightly_view(block: Mapping[str, Any]) -> Table:
    """The nightly retrains of ``replay --nightly`` (the summary's ``nightly`` block).

    Examples
    --------
    >>> block = {"nights": 2, "retrains": 2, "first_day": "2025-01-02", "last_day": "2025-01-03",
    ...     "seconds": {"total": 3.0}, "rule": {"margin": 0.01, "window_days": 3},
    ...     "models": {"online": {"within_10pct": 0.5, "mape": 0.2, "top1_regret": None}},
    ...     "served": {"nights": {"online": 2}, "within_10pct": 0.5, "mape": 0.2,
    ...                "top1_regret": None, "promotions": 0, "best_single_model": "online",
    ...                "points_vs_best_single": 0.0}}
    >>> import io
    >>> console = Console(width=100, record=True, file=io.StringIO())
    >>> console.print(nightly_view(block))
    >>> "what served" in console.export_text()
    True
    """
    served = block["served"]
    rule = block["rule"]
    table = Table(
        title=f"{block['nights']} nightly retrains, each scored on the next day "
        f"({block['first_day']} to {block['last_day']}), means over the nights"
        + (f" (after {warmup} warm-up nights)" if (warmup := block.get("warmup_nights")) else ""),
        caption=f"served: a challenger beating the serving model by {_pct(rule['margin'])} "
        f"within 10% over the trailing {rule['window_days']} days; {served['promotions']} "
        f"promotions; vs the best single model ({served.get('best_single_model')}): "
        f"{served.get('points_vs_best_single')} points; {block['seconds']['total']:,.0f} s",
    )
    for name in ("model", "within 10%", "MAPE", "top-1 regret", "nights served"):
        table.add_column(name, justify="left" if name == "model" else "right")
    for model, figures in block["models"].items():
        table.add_row(
            model,
            _pct(figures.get("within_10pct")),
            _pct(figures.get("mape")),
            _pct(figures.get("top1_regret"), signed=True),
            _count(served["nights"].get(model)) if model in served["nights"] else "",
            end_section=model == list(block["models"])[-1],
        )
    table.add_row(
        "what served",
        _pct(served.get("within_10pct")),
        _pct(served.get("mape")),
        _pct(served.get("top1_regret"), signed=True),
        _count(sum(served["nights"].values())),
    )
    return table


def _fleet_table(stats: FleetStats, out: Path, seconds: float) -> Table:
    table = Table(title=f"fleet written to {escape(str(out))}", show_header=False)
    table.add_row("first day", stats.start.date().isoformat())
    table.add_row("days", str(stats.days))
    table.add_row("lineages", f"{stats.lineages:,}")
    table.add_row("attempts", f"{stats.attempts:,}")
    for status, count in stats.status_counts.items():
        table.add_row(f"  {status}", f"{count:,}")
    table.add_row("history events", f"{stats.events:,}")
    table.add_row("oracle rows", f"{stats.oracle_rows:,}")
    table.add_row("seconds", f"{seconds:.1f}")
    return table


def _import_table(stats: ImportStats, csv_path: Path) -> Table:
    table = Table(title=f"imported {escape(csv_path.name)}", show_header=False)
    table.add_row("rows read", f"{stats.rows_read:,}")
    table.add_row("rows kept (attempts)", f"{stats.rows_kept:,}")
    for reason, count in stats.dropped.items():
        table.add_row(f"  dropped: {reason}", f"{count:,}")
    table.add_row("lineages", f"{stats.lineages:,}")
    for source, count in stats.throughput_sources.items():
        table.add_row(f"throughput from {source}", f"{count:,}")
    table.add_row(f"hardware types ({len(stats.hardware_types)})", ", ".join(stats.hardware_types))
    return table


# --------------------------------------------------------------------------------------------
# Shared steps of the commands


def _generate(
    out: Path, days: int, jobs_per_day: int, seed: int, start: datetime | None, catalog: Catalog
) -> None:
    from leap_stream.data.fleet import FleetConfig, generate_fleet

    config = FleetConfig(days=days, jobs_per_day=jobs_per_day, seed=seed, start=start)
    began = time.perf_counter()
    stats = generate_fleet(config, out, catalog, progress=console.is_terminal)
    console.print(_fleet_table(stats, out, time.perf_counter() - began))


def _nightly_options(
    nights: int,
    warmup: int | None,
    train_days: float | None,
    fast_forward: bool,
    workers: int | None,
    spare_workers: int | None = None,
) -> Any:
    """replay --nightly's options."""
    from leap_stream.backtest.nightly import NightlyOptions

    spare = {} if spare_workers is None else {"spare_workers": spare_workers}
    return NightlyOptions(
        nights=nights,
        warmup=warmup,
        train_days=train_days,
        fast_forward=fast_forward,
        workers=workers,
        **spare,
    )


def _replay(
    history: Path,
    out: Path,
    catalog: Catalog,
    oracle: Path | None,
    batch_rows: int,
    report: bool,
    strict: bool = False,
    via_kafka: str | None = None,
    topic_prefix: str = "",
    group_id: str = "leap-stream",
    rate: float | None = None,
    holdout_hardware: list[str] | None = None,
    holdout_first: int | None = None,
    lineage_half_life: float = HALF_LIFE_DAYS,
    nightly: Any = None,
    pick_feedback: bool = True,
    follow_ranking: bool = False,
) -> None:
    from leap_stream.backtest.replay import HOLDOUT_FIRST, REJECTS_FILE, OracleError, replay
    from leap_stream.data.history import HistoryError

    errors: tuple[type[Exception], ...] = (HistoryError, OracleError)
    rankings = None
    title = f"backtest of {escape(history.name)}"
    if follow_ranking:
        title += ", the fleet following the ranking"
    if via_kafka is not None:
        from confluent_kafka import KafkaException

        from leap_stream.streaming.via_kafka import KafkaRankings

        errors += (KafkaException, LookupError, TimeoutError)
        rankings = KafkaRankings(via_kafka, topic_prefix, group_id, rate=rate)
        title += f" via the service on {via_kafka}"
    with _exit_on(*errors):
        summary = replay(
            history,
            out,
            catalog,
            oracle=oracle,
            batch_rows=batch_rows,
            progress=console.is_terminal,
            report=report,
            strict=strict,
            rankings=rankings,
            lineage_half_life_days=lineage_half_life,
            holdout_hardware=holdout_hardware or (),
            holdout_first=HOLDOUT_FIRST if holdout_first is None else holdout_first,
            nightly=nightly,
            pick_feedback=pick_feedback,
            follow_ranking=follow_ranking,
        )
    console.print(summary_view(summary, title=title))
    if summary.get("nightly"):
        console.print(nightly_view(summary["nightly"]))
    if rankings is not None and rankings.sent:
        mode = f"at {rate:g} events/s" if rate else "in lock-step"
        console.print(
            f"{rankings.sent:,} events sent {mode}: {rankings.seconds:.1f} s, "
            f"{1000 * rankings.seconds / rankings.sent:.1f} ms per event"
        )
    rejected = summary["rejects"]["rows"]
    if rejected:
        console.print(
            f"{rejected:,} bad history row{'s' if rejected != 1 else ''} skipped, "
            f"listed in {escape(str(out / REJECTS_FILE))}",
            soft_wrap=True,
        )
    _warn_off_catalog(summary["off_catalog"])
    written = ["summary.json", "daily.csv"] + (["report.html"] if report else [])
    written += ["nightly.csv"] if summary.get("nightly") else []
    written += [REJECTS_FILE] if rejected else []
    console.print(f"written to {escape(str(out))}/: {', '.join(written)}")


def _warn_off_catalog(off_catalog: dict[str, Any]) -> None:
    """Say so when completions ran on types the catalog does not name: none of them is scored,
    and a history that spells the catalog's names otherwise scores nothing at all."""
    completions = off_catalog["completions"]
    if not completions:
        return
    names = list(off_catalog["by_hardware"].items())
    shown = ", ".join(f"{name} ({count:,})" for name, count in names[:5])
    shown += f" and {len(names) - 5} more" if len(names) > 5 else ""
    err_console.print(
        f"[yellow]warning:[/yellow] {completions:,} completion{'s' if completions != 1 else ''} "
        f"ran on hardware the catalog does not name, not scored: {escape(shown)} "
        "(a history names hardware as the catalog does: docs/catalog.md)",
        soft_wrap=True,
    )


# --------------------------------------------------------------------------------------------
# Commands


@app.command()
def generate(
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Directory for history.parquet and oracle.parquet."
        ),
    ],
    days: Annotated[int, typer.Option(min=1, help="Trace length in days.")] = 180,
    jobs_per_day: Annotated[
        int, typer.Option(min=1, help="Mean attempts submitted per day.")
    ] = 30_000,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed gives the same files.")] = 7,
    start: Annotated[
        datetime | None,
        typer.Option(
            formats=["%Y-%m-%d"],
            help="First day (UTC); default: the newest catalog "
            "type launches halfway through the trace.",
        ),
    ] = None,
    catalog: CatalogOption = None,
) -> None:
    """Generate a synthetic mixed-vendor fleet history and its oracle."""
    first = start.replace(tzinfo=UTC) if start else None
    _generate(out, days, jobs_per_day, seed, first, _load_catalog(catalog))


@app.command("replay")
def replay_command(
    history: HistoryArgument,
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Directory for summary.json, daily.csv and report.html."
        ),
    ],
    oracle: OracleOption = None,
    catalog: CatalogOption = None,
    batch_rows: Annotated[
        int, typer.Option("--batch-rows", min=1, help="History rows read at a time.")
    ] = 65_536,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write report.html.")] = True,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Stop at the first bad history row (exit code 2) instead of skipping bad "
            "rows and listing them in rejects.csv.",
        ),
    ] = False,
    via_kafka: Annotated[
        str | None,
        typer.Option(
            "--via-kafka",
            metavar="BOOTSTRAP",
            help="Rank through the running service at these Kafka bootstrap servers: each "
            "event is sent to the job topics and each submission scored with the ranking read "
            "back from the rankings topic.",
        ),
    ] = None,
    topic_prefix: Annotated[
        str, typer.Option("--topic-prefix", help="With --via-kafka: the service's topic prefix.")
    ] = "",
    group_id: Annotated[
        str,
        typer.Option("--group-id", help="With --via-kafka: the workers' consumer group."),
    ] = "leap-stream",
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            min=0.001,
            help="With --via-kafka: send freely at this many events/s, then wait for every "
            "ranking (default: lock-step, each event once the worker processed the previous).",
        ),
    ] = None,
    holdout_hardware: Annotated[
        str | None,
        typer.Option(
            "--holdout-hardware",
            metavar="TYPE[,TYPE]",
            help="Hold these catalog types out: their completions teach neither the model nor "
            "the lookup table until each type's first --holdout-first scored attempts have been "
            "predicted and scored (summary.json's holdout block). Not with --via-kafka.",
        ),
    ] = None,
    holdout_first: Annotated[
        int | None,
        typer.Option(
            "--holdout-first",
            metavar="N",
            min=1,
            help="With --holdout-hardware: scored attempts per held-out type (default 20).",
        ),
    ] = None,
    lineage_half_life: LineageHalfLife = HALF_LIFE_DAYS,
    nightly: Annotated[
        bool,
        typer.Option(
            "--nightly",
            help="Also retrain batch models (river, LightGBM) at each of the last --nights day "
            "boundaries and score each night's on the next day's attempts beside the online "
            "model, the ensemble of the three and the lookup table; play the "
            "champion/challenger rule, the ensemble serving first (docs/nightly.md). "
            "Writes nightly.csv.",
        ),
    ] = False,
    nights: Annotated[
        int | None,
        typer.Option("--nights", min=1, help="With --nightly: the nights retrained (default 30)."),
    ] = None,
    warmup_nights: Annotated[
        int | None,
        typer.Option(
            "--warmup-nights",
            min=0,
            help="With --nightly: nights retrained before the first counted one, for the "
            "champion/challenger rule to read (default: the rule's window, 3).",
        ),
    ] = None,
    train_days: TrainDaysOption = None,
    fast_forward: Annotated[
        bool,
        typer.Option(
            "--fast-forward",
            help="With --nightly: learn the days before the first retrained night without "
            "ranking or scoring them; the replay's own figures cover the nights' days only "
            "(the quick way to ask how nightly retrains do on a long history).",
        ),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=0,
            help="With --nightly: processes training the nights (default: the machine's "
            "cores but one, which the replay keeps, at least one; 0: in this process, after "
            "pass 1).",
        ),
    ] = None,
    spare_workers: Annotated[
        int | None,
        typer.Option(
            "--spare-workers",
            min=0,
            help="With --nightly: more processes training the nights at the lowest CPU "
            "priority, on what the replay and the other workers leave idle (default: 1).",
        ),
    ] = None,
    pick_feedback: Annotated[
        bool,
        typer.Option(
            "--pick-feedback/--no-pick-feedback",
            help="With --oracle: tell the core whether its own first choice would have fit in "
            "memory, as a deployment following the ranking learns from its own out-of-memory "
            "failures (docs/predictor.md). Not with --via-kafka: the service learns from "
            "completions only.",
        ),
    ] = True,
    follow_ranking: Annotated[
        bool,
        typer.Option(
            "--follow-ranking",
            help="With --oracle: replay a fleet that follows the ranking. Each attempt runs on "
            "its first choice that can run (the oracle's throughput there, with the attempt's "
            "own noise) and the core learns that, as a deployed service would; without it the "
            "core learns where the history ran each attempt (docs/metrics.md).",
        ),
    ] = False,
) -> None:
    """Backtest a history: rank each submission, score it when it completes, then learn.

    Rows that break the history format are skipped and listed in rejects.csv (see
    docs/history-format.md), unless --strict. With --via-kafka the rankings come from the
    running service (leap-stream serve); the lookup baseline and the scoring stay in-process.
    """
    if via_kafka is None and (rate is not None or topic_prefix or group_id != "leap-stream"):
        err_console.print("[red]error:[/red] --topic-prefix, --group-id, --rate need --via-kafka")
        raise typer.Exit(2)
    held = [name.strip() for name in (holdout_hardware or "").split(",") if name.strip()]
    resolved = _load_catalog(catalog)
    problem = None
    if holdout_first is not None and not held:
        problem = "--holdout-first needs --holdout-hardware"
    elif held and via_kafka is not None:
        problem = "--holdout-hardware needs the in-process core, not --via-kafka"
    elif unknown := [name for name in held if name not in resolved.names]:
        problem = f"--holdout-hardware: not in the catalog: {', '.join(unknown)}"
    elif not nightly and (
        (nights, warmup_nights, train_days, workers, spare_workers) != (None,) * 5 or fast_forward
    ):
        problem = (
            "--nights, --warmup-nights, --train-days, --workers, --spare-workers and "
            "--fast-forward need --nightly"
        )
    elif nightly and (held or via_kafka is not None):
        problem = "--nightly needs the in-process core learning every completion"
    elif follow_ranking and oracle is None:
        problem = "--follow-ranking needs --oracle: the throughput where the ranking puts a job"
    elif follow_ranking and (held or via_kafka is not None or nightly or not pick_feedback):
        problem = (
            "--follow-ranking plays the in-process core's own choices: not with "
            "--holdout-hardware, --via-kafka, --nightly or --no-pick-feedback"
        )
    if problem:
        err_console.print(f"[red]error:[/red] {escape(problem)}")
        raise typer.Exit(2)
    _replay(
        history,
        out,
        resolved,
        oracle,
        batch_rows,
        report,
        strict,
        via_kafka,
        topic_prefix,
        group_id,
        rate,
        held,
        holdout_first,
        lineage_half_life,
        _nightly_options(
            nights or NIGHTS, warmup_nights, train_days, fast_forward, workers, spare_workers
        )
        if nightly
        else None,
        pick_feedback,
        follow_ranking,
    )


@app.command("retrain")
def retrain_command(
    history: HistoryArgument,
    until: Annotated[
        str,
        typer.Option(
            "--until",
            metavar="TIMESTAMP",
            help="Cutoff: every completion strictly before it is learned (YYYY-MM-DD or ISO "
            "8601 date-time; UTC unless it has an offset).",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Model directory: manifest.json and payload.pkl."
        ),
    ],
    passes: Annotated[
        int | None,
        typer.Option("--passes", min=1, help="Passes of the river model over the snapshot."),
    ] = None,
    train_days: TrainDaysOption = None,
    catalog: CatalogOption = None,
    lineage_half_life: LineageHalfLife = HALF_LIFE_DAYS,
) -> None:
    """Train batch models (river, LightGBM) on every completion before a cutoff; save them.

    The directory records the cutoff, data range, feature set, library versions and the
    payload's sha256; loading refuses it when any differs (docs/nightly.md).
    """
    from leap_stream.backtest.retrain import parse_cutoff, retrain
    from leap_stream.core.batch import RIVER_PASSES
    from leap_stream.data.history import HistoryError

    with _exit_on(ValueError):
        cutoff = parse_cutoff(until)
    resolved = _load_catalog(catalog)
    began = time.perf_counter()
    with _exit_on(HistoryError, ValueError):
        manifest = retrain(
            history,
            cutoff,
            out,
            resolved,
            passes=passes or RIVER_PASSES,
            train_days=train_days,
            lineage_half_life_days=lineage_half_life,
        )
    table = Table(title=f"batch models written to {escape(str(out))}", show_header=False)
    data = manifest["data"]
    table.add_row("cutoff", manifest["cutoff"])
    table.add_row("examples (succeeded completions)", f"{data['examples']:,}")
    table.add_row("first completion", str(data["first_completion"]))
    table.add_row("last completion", str(data["last_completion"]))
    table.add_row("models", ", ".join(manifest["models"]))
    table.add_row("river passes", str(manifest["settings"]["river_passes"]))
    if train_days is not None:
        table.add_row("trained on the last", f"{train_days:g} days")
    table.add_row("libraries", ", ".join(f"{k} {v}" for k, v in manifest["libraries"].items()))
    table.add_row("payload sha256", manifest["payload"]["sha256"])
    table.add_row("seconds", f"{time.perf_counter() - began:.1f}")
    console.print(table)


@app.command("ablate")
def ablate_command(
    history: HistoryArgument,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            file_okay=False,
            help="Directory for ablation.csv, ablation.md, ablation.html, variants/.",
        ),
    ],
    oracle: OracleOption = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            metavar="NAME",
            help="Replay only these variants (repeatable; full is always replayed).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=0, help="Processes (default: the machine's cores)."),
    ] = None,
    catalog: CatalogOption = None,
    lineage_half_life: LineageHalfLife = HALF_LIFE_DAYS,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Read the variants already replayed into --out (their summary.json) instead of "
            "replaying them again; refused when --out holds an ablation of other inputs.",
        ),
    ] = False,
) -> None:
    """Replay with one input group removed at a time: what each is worth (docs/ablation.md).

    Variants: full, then no_<group> for each of prior_throughput, hardware_specs,
    job_configuration, interactions, roofline and learned_model; the lookup table's row comes
    from the full replay.
    """
    from leap_stream.backtest.ablation import VARIANTS, ResumeError, ablate, table_cells
    from leap_stream.backtest.replay import OracleError
    from leap_stream.data.history import HistoryError

    known = {v.name: v for v in VARIANTS}
    unknown = sorted(set(only or ()) - known.keys())
    if unknown:
        err_console.print(f"unknown variant(s): {', '.join(unknown)} (known: {', '.join(known)})")
        raise typer.Exit(2)
    chosen = [v for v in VARIANTS if not only or v.name == "full" or v.name in only]
    began = time.perf_counter()
    with _exit_on(ResumeError, HistoryError, OracleError):
        table = ablate(
            history,
            out,
            _load_catalog(catalog),
            oracle=oracle,
            variants=chosen,
            workers=workers,
            lineage_half_life_days=lineage_half_life,
            resume=resume,
        )
    header, rows = table_cells(table)
    view = Table(title=f"ablation of {escape(history.name)} (in brackets: points from full)")
    for column in header[:-1]:  # what each variant removed: in ablation.md
        first = column == "variant"
        view.add_column(column, justify="left" if first else "right", no_wrap=first)
    for row in rows:
        view.add_row(*row[:-1])
    console.print(view)
    console.print(f"written to {escape(str(out))} in {time.perf_counter() - began:.0f} s")


@app.command("evaluate")
def evaluate_command(
    history: HistoryArgument,
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Directory for evaluation.csv and summary.json."
        ),
    ],
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            metavar="leave-one-out|by-period",
            help="leave-one-out: each succeeded attempt predicted by a core that learned every "
            "other one; by-period: each period predicted from the earlier periods only.",
        ),
    ],
    period_field: Annotated[
        str | None,
        typer.Option(
            "--period-field",
            help="With by-period: the JobSubmitted field naming an attempt's period "
            "(default: the submission's UTC day; an MLPerf round's results share its day).",
        ),
    ] = None,
    devices: Annotated[
        int | None,
        typer.Option(
            "--devices", min=1, help="Score only attempts on this many devices (all are learned)."
        ),
    ] = None,
    naive_reference: Annotated[
        str,
        typer.Option(
            "--naive-reference",
            metavar="most_shared|median",
            help="The naive ratio predictor's reference type: the one sharing the most other "
            "jobs with the target type, or the median over all of them.",
        ),
    ] = "most_shared",
    catalog: CatalogOption = None,
    lineage_half_life: LineageHalfLife = HALF_LIFE_DAYS,
) -> None:
    """Score the model, the lookup table and the naive ratio predictor on one split.

    The protocols of issue 8's real-data targets (docs/real-data.md, "Evaluation protocols").
    """
    from leap_stream.backtest.evaluate import (
        EvaluationError,
        evaluate,
        evaluation_view,
        write_evaluation,
    )
    from leap_stream.core import LeapCore
    from leap_stream.data.history import HistoryError

    with _exit_on(EvaluationError, HistoryError):
        result = evaluate(
            history,
            _load_catalog(catalog),
            protocol,
            period_field=period_field,
            devices=devices,
            naive_reference=naive_reference,
            progress=console.is_terminal,
            model_factory=functools.partial(LeapCore, lineage_half_life_days=lineage_half_life),
        )
    write_evaluation(result, out)
    console.print(evaluation_view(result.summary))
    console.print(f"written to {escape(str(out))}/: evaluation.csv, summary.json")


@import_app.command("mlperf")
def import_mlperf_command(
    csv_path: Annotated[
        Path,
        typer.Argument(
            metavar="CSV",
            help="MLPerf Training results table (mlperf_training.csv).",
            exists=True,
            dir_okay=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Directory for history.parquet.")
    ],
    catalog: CatalogOption = None,
    round_date: Annotated[
        list[str] | None,
        typer.Option(
            "--round-date",
            metavar="ROUND=YYYY-MM-DD",
            help="Publication date of a round, e.g. v5.2=2026-06-03 (repeatable; overrides "
            "the built-in dates).",
        ),
    ] = None,
    benchmarks: Annotated[
        Path | None,
        typer.Option(
            "--benchmarks",
            metavar="FILE",
            help="TOML of extra benchmark specs, one table per benchmark (docs/real-data.md).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Write the closed-division MLPerf Training results as a history (docs/real-data.md)."""
    from leap_stream.data.history import HistoryError
    from leap_stream.data.importers.mlperf import (
        MlperfImportError,
        import_mlperf,
        load_benchmarks,
        parse_round_dates,
    )

    catalog_ = _load_catalog(catalog)
    with _exit_on(MlperfImportError, HistoryError):
        dates = parse_round_dates(round_date or [])
        specs = load_benchmarks(benchmarks) if benchmarks is not None else None
        stats = import_mlperf(csv_path, out, catalog_, round_dates=dates, benchmarks=specs)
    table = _import_table(stats, csv_path)

    def counts(items: Mapping[str, int]) -> str:
        return ", ".join(f"{name} ({n:,})" for name, n in items.items()) or "none"

    table.add_row("unknown benchmarks (rows)", counts(stats.unknown_benchmarks))
    table.add_row("unknown hardware (rows)", counts(stats.unknown_hardware))
    table.add_row("rounds without a date (rows)", counts(stats.unknown_rounds))
    for round_, day in stats.placed_rounds.items():
        table.add_row(f"  {round_} placed at", f"{day} (after the last dated round)")
    console.print(table)
    console.print(f"history written to {out / 'history.parquet'}; backtest it with:")
    console.print(
        f"  leap-stream replay {out / 'history.parquet'} --out {out / 'replay'}", soft_wrap=True
    )


@import_app.command("gavel")
def import_gavel_command(
    csv_path: Annotated[
        Path,
        typer.Argument(
            metavar="CSV",
            help="Gavel job-type throughputs (gavel_throughputs.csv).",
            exists=True,
            dir_okay=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Directory for history.parquet.")
    ],
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source", help="source_file to keep (repeatable; default physical_cluster)."
        ),
    ] = None,
    placement: Annotated[
        list[str] | None,
        typer.Option("--placement", help="placement to keep (repeatable; default consolidated)."),
    ] = None,
    num_gpus: Annotated[
        list[int] | None,
        typer.Option("--num-gpus", help="GPU count to keep (repeatable; default 1)."),
    ] = None,
    all_rows: Annotated[
        bool,
        typer.Option("--all", help="Keep every source, placement and GPU count."),
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Write Gavel's measured throughputs (K80/P100/V100) as a history (docs/real-data.md)."""
    from leap_stream.data.importers.gavel import GavelImportError, import_gavel

    catalog_ = _load_catalog(catalog)
    with _exit_on(GavelImportError):
        stats = import_gavel(
            csv_path,
            out,
            catalog_,
            sources=None if all_rows else (source or ["physical_cluster"]),
            placements=None if all_rows else (placement or ["consolidated"]),
            num_gpus=None if all_rows else (num_gpus or [1]),
        )
    console.print(_import_table(stats, csv_path))
    console.print(f"history written to {out / 'history.parquet'}; backtest it with:")
    console.print(
        f"  leap-stream replay {out / 'history.parquet'} --out {out / 'replay'}", soft_wrap=True
    )


@import_app.command("neusight")
def import_neusight_command(
    csv_path: Annotated[
        Path,
        typer.Argument(
            metavar="CSV",
            help="NeuSight measured latencies (neusight_latency.csv).",
            exists=True,
            dir_okay=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Directory for history.parquet.")
    ],
    catalog: CatalogOption = None,
) -> None:
    """Write NeuSight's measured training iterations as a history (docs/real-data.md)."""
    from leap_stream.data.importers.neusight import NeusightImportError, import_neusight

    catalog_ = _load_catalog(catalog)
    with _exit_on(NeusightImportError):
        stats = import_neusight(csv_path, out, catalog_)
    console.print(_import_table(stats, csv_path))
    console.print(f"history written to {out / 'history.parquet'}; backtest it with:")
    console.print(
        f"  leap-stream replay {out / 'history.parquet'} --out {out / 'replay'}", soft_wrap=True
    )


@history_app.command("validate")
def history_validate(
    path: HistoryArgument,
    oracle: Annotated[
        bool, typer.Option("--oracle", help="The file is an oracle table, not a history.")
    ] = False,
) -> None:
    """Read and check every row of a history (or oracle) file; print its row and event counts."""
    from leap_stream.data.history import HistoryError, read_history_batches, read_oracle_batches

    counts: Counter[str] = Counter()
    jobs: set[str] = set()
    rows = 0
    with _exit_on(HistoryError):
        if oracle:
            for table in read_oracle_batches(path):
                rows += table.num_rows
                jobs.update(table.column("job_id").unique().to_pylist())
                counts["cannot run (null)"] += table.column("throughput").null_count
        else:
            for table in read_history_batches(path):
                rows += table.num_rows
                counts.update(table.column("event_type").to_pylist())
    console.print(f"{path}: valid", soft_wrap=True)
    summary = Table(show_header=False)
    summary.add_row("rows", f"{rows:,}")
    if oracle:
        summary.add_row("jobs", f"{len(jobs):,}")
    for kind, count in sorted(counts.items()):
        summary.add_row(kind, f"{count:,}")
    console.print(summary)


@history_app.command("convert")
def history_convert(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="IN", help="File to read (.parquet, .csv, .avro).", exists=True, dir_okay=False
        ),
    ],
    target: Annotated[
        Path, typer.Argument(metavar="OUT", help="File to write; its extension sets the format.")
    ],
    oracle: Annotated[
        bool, typer.Option("--oracle", help="The file is an oracle table, not a history.")
    ] = False,
) -> None:
    """Convert a history (or oracle) file between Parquet, CSV and Avro, validating every row."""
    from leap_stream.data.history import (
        HistoryError,
        read_history_batches,
        read_oracle_batches,
        write_history,
        write_oracle,
    )

    if source.resolve() == target.resolve():
        err_console.print(f"[red]error:[/red] {escape(str(target))}: same file as the input")
        raise typer.Exit(2)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exit_on(HistoryError):
        if oracle:
            rows = write_oracle(read_oracle_batches(source), target)
        else:
            rows = write_history(read_history_batches(source), target)
    console.print(f"wrote {rows:,} rows to {target}")


@app.command()
def demo(
    out: Annotated[
        Path,
        typer.Option(
            "--out", file_okay=False, help="Directory for the demo fleet and its backtest."
        ),
    ] = Path("out/demo"),
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Stream the fleet through a real worker and the example scheduler on Kafka "
            "(needs --bootstrap; `make live` starts a local broker).",
        ),
    ] = False,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap", envvar="LEAP_KAFKA_BOOTSTRAP", help="Kafka bootstrap, with --live."
        ),
    ] = None,
    rate: Annotated[
        float, typer.Option("--rate", min=1, help="Events per second sent, with --live.")
    ] = 2_000.0,
) -> None:
    """Generate a small fleet and backtest it, on the packaged catalog (no broker needed)."""
    if live and not bootstrap:
        raise typer.BadParameter("--live needs --bootstrap (or LEAP_KAFKA_BOOTSTRAP)")
    catalog = _load_catalog(None)
    began = time.perf_counter()
    console.print(
        f"[bold]1/2[/bold] generating {DEMO_DAYS} days x {DEMO_JOBS_PER_DAY:,} attempts/day"
    )
    _generate(out, DEMO_DAYS, DEMO_JOBS_PER_DAY, DEMO_SEED, None, catalog)
    if live:
        assert bootstrap is not None
        _live_demo(out, catalog, bootstrap, rate)
        report = out / "live" / "report.html"
    else:
        console.print("[bold]2/2[/bold] replaying it through the model and the lookup table")
        _replay(
            out / "history.parquet",
            out / "replay",
            catalog,
            out / "oracle.parquet",
            batch_rows=65_536,
            report=True,
        )
        report = out / "replay" / "report.html"
    console.print(f"demo done in {time.perf_counter() - began:.0f} s")
    console.print(f"open the report: {report.resolve()}", soft_wrap=True)


def _live_demo(out: Path, catalog: Catalog, bootstrap: str, rate: float) -> None:
    from confluent_kafka import KafkaException

    from leap_stream.backtest.replay import replay
    from leap_stream.streaming.live import stream_demo

    console.print(
        f"[bold]2/2[/bold] streaming it through a worker and the example scheduler on "
        f"{bootstrap} at {rate:,.0f} events/s"
    )

    def run(rankings: Any) -> dict[str, Any]:
        return replay(
            out / "history.parquet",
            out / "live",
            catalog,
            oracle=out / "oracle.parquet",
            progress=False,
            rankings=rankings,
        )

    with _exit_on(KafkaException, RuntimeError, TimeoutError, LookupError):
        summary = stream_demo(console, bootstrap, out / "live", rate, run)
    console.print(summary_view(summary, title="backtest of the rankings the service made"))


if __name__ == "__main__":  # `python -m leap_stream.cli`, used by benchmarks/
    app()
