"""The streaming shell: the same :class:`~leap_stream.core.LeapCore` behind Kafka topics.

``app`` (the worker: the topology in one module), ``settings`` (one settings object),
``topics`` (names and creation), ``transport`` (shared Kafka client settings and reads),
``order`` (event-time merge of the input partitions), ``state`` (partition-local state and its
changelog), ``snapshots`` (models as ModelSnapshot records, and the ServingDecision), ``web``
(health, Prometheus metrics, rankings over HTTP), ``client`` (what a scheduler imports),
``scheduler`` (the example policy), ``produce`` (a history onto the job topics, nightly models
onto the models topic), ``via_kafka`` (the backtest through the service), ``live`` (the live
demo) and ``cli`` (the streaming commands).
"""

__all__: list[str] = []
