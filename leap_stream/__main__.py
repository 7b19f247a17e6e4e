"""``python -m leap_stream``: the ``leap-stream`` command line."""

from leap_stream.cli import app

app()
