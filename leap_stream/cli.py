"""The ``leap-stream`` command line: the imperative shell over the core."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="leap-stream: rank accelerator types for training jobs by predicted throughput per cost.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """leap-stream command line."""
