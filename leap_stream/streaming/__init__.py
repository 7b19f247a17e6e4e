"""The streaming shell: the same :class:`~leap_stream.core.LeapCore` behind Kafka topics.

``settings`` (one settings object), ``topics`` (names and creation), ``order`` (event-time
merge of the input partitions), ``state`` (partition-local state and its changelog),
``snapshots`` (the model as ModelSnapshot records), ``app`` (the worker: the topology in one
module), ``web`` (health, Prometheus metrics, rankings over HTTP), ``client`` (what a scheduler
imports), ``produce`` (a history onto the job topics).
"""

__all__: list[str] = []
