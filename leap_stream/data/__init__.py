"""The data edges: where events enter and leave as bytes and files.

``codec`` (Avro single-object encoding of ``schemas/``), ``history`` (history and oracle files),
``importers`` (public benchmark results as histories) and ``fleet`` (the synthetic fleet).
"""

__all__: list[str] = []
