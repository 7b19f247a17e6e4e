"""The event contract in plain data: names, enumerations and the history table's columns.

Events cross every boundary in the dict shape of their Avro records (``schemas/``): what
fastavro decodes is what the core consumes, so the replay tool and the Kafka processors hand
the core the very same objects.

>>> sorted(STATUSES)
['failed', 'preempted', 'succeeded']
>>> HISTORY_SCHEMA.field("candidate_hardware").type
ListType(list<item: string>)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

__all__ = [
    "COMPLETED_ONLY_COLUMNS",
    "EVENT_TYPES",
    "FRAMEWORKS",
    "HISTORY_COLUMNS",
    "HISTORY_SCHEMA",
    "JOB_CONFIG_FIELDS",
    "ORACLE_SCHEMA",
    "PRECISIONS",
    "STATUSES",
    "SUBMITTED_ONLY_COLUMNS",
    "job_config",
]

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
STATUSES = ("succeeded", "failed", "preempted")
EVENT_TYPES = ("submitted", "completed")
FRAMEWORKS = ("pytorch", "jax", "tensorflow")

# One row per event, in event-time order (docs/data.md). Columns that belong to one event type
# only are null on the other's rows; `num_devices` is filled on both.
HISTORY_SCHEMA = pa.schema(
    [
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("lineage_id", pa.string(), nullable=False),
        pa.field("model_type", pa.string()),
        pa.field("model_family", pa.string()),
        pa.field("framework", pa.string()),
        pa.field("param_count", pa.int64()),
        pa.field("global_batch_size", pa.int32()),
        pa.field("seq_len", pa.int32()),
        pa.field("precision", pa.string()),
        pa.field("num_devices", pa.int32(), nullable=False),
        pa.field("tensor_parallel", pa.int32()),
        pa.field("pipeline_parallel", pa.int32()),
        pa.field("requested_hardware", pa.string()),
        pa.field("candidate_hardware", pa.list_(pa.string())),
        pa.field("hardware_type", pa.string()),
        pa.field("status", pa.string()),
        pa.field("throughput", pa.float64()),
        pa.field("steps", pa.int64()),
    ]
)
HISTORY_COLUMNS = tuple(HISTORY_SCHEMA.names)

# The submission fields the model's features read (leap_stream.core.features), in schema
# order: what a LearnExample carries of its job.
JOB_CONFIG_FIELDS = (
    "model_type",
    "model_family",
    "framework",
    "param_count",
    "global_batch_size",
    "seq_len",
    "precision",
    "num_devices",
    "tensor_parallel",
    "pipeline_parallel",
    "micro_batches",
    "flops_per_sample",
    "team",
)


def job_config(job: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`JOB_CONFIG_FIELDS` of a submission (a field it lacks, e.g. one added to the
    schema after it was written, as None).

    >>> job_config({"model_type": "resnet", "num_devices": 8})["micro_batches"] is None
    True
    """
    return {name: job.get(name) for name in JOB_CONFIG_FIELDS}


SUBMITTED_ONLY_COLUMNS = (
    "model_type",
    "model_family",
    "framework",
    "param_count",
    "global_batch_size",
    "precision",
    "tensor_parallel",
    "pipeline_parallel",
)
COMPLETED_ONLY_COLUMNS = ("hardware_type", "status", "steps")

# The true expected throughput of one attempt on one hardware type (null: it cannot run there),
# in the history's submission order so a replay can stream it alongside. float32: seven
# significant digits are plenty for a truth that carries no noise, and it halves the file.
ORACLE_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("hardware_type", pa.string(), nullable=False),
        pa.field("throughput", pa.float32()),
    ]
)
