"""Data files shipped with leap-stream: ``catalog.toml``, the accelerator catalog.

Read them through :mod:`importlib.resources` (``leap_stream.catalog.load_catalog`` does), so
they are found inside an installed wheel as well as in a source checkout.
"""

__all__: list[str] = []
