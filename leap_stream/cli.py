"""The ``leap-stream`` command line: the imperative shell over the core."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from leap_stream.catalog import Catalog

app = typer.Typer(
    help="leap-stream: rank accelerator types for training jobs by predicted throughput per cost.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()

CatalogOption = Annotated[
    Path | None,
    typer.Option(
        "--catalog",
        help="Hardware catalog TOML (default: the packaged catalog).",
        exists=True,
        dir_okay=False,
    ),
]


def _load_catalog(path: Path | None) -> Catalog:
    from leap_stream.catalog import CatalogError, default_catalog, load_catalog

    try:
        return load_catalog(path) if path else default_catalog()
    except CatalogError as error:
        console.print(f"[red]catalog error:[/red] {error}")
        raise typer.Exit(2) from error


@app.command()
def generate(
    out: Annotated[
        Path, typer.Option("--out", help="Directory for history.parquet and oracle.parquet.")
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
    from leap_stream.fleet import FleetConfig, generate_fleet

    config = FleetConfig(
        days=days,
        jobs_per_day=jobs_per_day,
        seed=seed,
        start=start.replace(tzinfo=UTC) if start else None,
    )
    began = time.perf_counter()
    stats = generate_fleet(config, out, _load_catalog(catalog))
    elapsed = time.perf_counter() - began
    table = Table(title=f"fleet written to {out}", show_header=False)
    table.add_row("first day", stats.start.date().isoformat())
    table.add_row("days", str(stats.days))
    table.add_row("lineages", f"{stats.lineages:,}")
    table.add_row("attempts", f"{stats.attempts:,}")
    for status, count in stats.status_counts.items():
        table.add_row(f"  {status}", f"{count:,}")
    table.add_row("history events", f"{stats.events:,}")
    table.add_row("oracle rows", f"{stats.oracle_rows:,}")
    table.add_row("seconds", f"{elapsed:.1f}")
    console.print(table)


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Where to write the demo fleet.")] = Path(
        "out/demo"
    ),
) -> None:
    """The quick start: generate a small fleet on the embedded default catalog (no broker)."""
    generate(out=out, days=14, jobs_per_day=2_000, seed=7, start=None, catalog=None)
