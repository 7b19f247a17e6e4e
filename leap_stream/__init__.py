"""leap-stream: rank accelerator types for a training job by predicted throughput per unit cost.

The package is split into a functional core (events, catalog, features, model, ranking, metrics:
plain Python, no Kafka import) and an imperative shell (CLI, replay, Kafka processors, reports)
that composes it. See ``docs/`` for the design.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
