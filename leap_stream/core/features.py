"""Features of a (submission, hardware type) pair, built from the submission and the catalog.

A pair's features split in two: the job's own (model type, family, precision, sizes: the same
for every candidate) and the hardware's, seen through the job's family (one-hots of the hardware,
vendor and precision, and the catalog's figures on a log scale: peak TFLOPS at the job's
precision, memory bandwidth, the link the job's devices talk over). Numeric features are scaled
by fixed, documented constants so that plain SGD behaves without an online scaler.

The target is not raw throughput but its log ratio to a roofline baseline, ``log(devices x peak
FLOP/s x ASSUMED_MFU / (6 x parameters x tokens per sample))``: what the model learns is then an
efficiency correction to a typical utilisation, and a hardware type it has never seen starts
from its spec sheet. When the
submission says how many micro-batches its pipelines run (``micro_batches`` m, with
``pipeline_parallel`` p), the baseline also holds the pipeline's fill and drain: a stage computes
m of every m + p - 1 slots (GPipe's bubble; 1F1B's is the same), which no slope on the job's
sizes can learn from the few pipelined jobs a fleet has. When it says its training FLOPs per
sample (``flops_per_sample``), they replace ``6 x parameters x tokens``, a rule that holds for
dense transformers and is off by orders of magnitude for convnets on large inputs and for
recommenders, whose parameters are mostly embedding rows (MLPerf's first-round cold starts:
e^+6.5 for ResNet-50, e^-7.6 for DLRM).

>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.hardware import HardwareArrays
>>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
>>> job = encoder.job({"model_type": "llm-7b", "model_family": "dense_llm", "framework": "pytorch",
...     "precision": "bf16", "param_count": 7_000_000_000, "global_batch_size": 1024,
...     "seq_len": 4096, "num_devices": 64, "tensor_parallel": 1, "pipeline_parallel": 1})
>>> pair = encoder.pair(job, encoder.hw.index["H100-SXM"])
>>> pair["hw=H100-SXM"], pair["type=llm-7b"], "dense_llm:bandwidth_per_flop" in pair
(0.35, 1.0, True)
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from leap_stream.core.events import PRECISIONS
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.inputs import check_groups

__all__ = [
    "ASSUMED_MFU",
    "ONEHOT_VALUES",
    "PAIR_TYPE_SLOPES",
    "TEAM_ONEHOT_VALUE",
    "TYPE_SLOPES",
    "FeatureEncoder",
    "JobFeatures",
    "RecentCache",
]

# The utilisation the roofline baseline and the communication estimate assume for compute: the
# model learns how far off it is per family, model type and hardware. At the peak (1.0) a job
# running at a typical 40% starts predicted e^0.9 too fast, and each new one-hot's first steps
# (AdaGrad's, sized by the error) take a share of that common bias instead of what is its own:
# MLPerf by round 31.2% -> 40.1% within 20%, in every round (docs/real-data.md).
ASSUMED_MFU = 0.4
COMMUNICATION_OFFSETS = (0.0, 3.0, 6.0)
MEMORY_KNEES = (-1.5, 0.0, 1.5)
# Row positions in FeatureEncoder.numeric (they follow the numeric names' order).
_COMMUNICATION = slice(1, 1 + len(COMMUNICATION_OFFSETS))
_TYPE_COMMUNICATION = 1 + len(COMMUNICATION_OFFSETS) + len(MEMORY_KNEES) + 3
_PEAK_OVER_LINK = _TYPE_COMMUNICATION + 1
# Rows of FeatureEncoder.numeric that are the model type's own slopes (the last two): learned
# from the few hardware types that type ran on, they are not extrapolated beyond them
# (ThroughputModel.slope_range).
TYPE_SLOPES = slice(_TYPE_COMMUNICATION - 1, _TYPE_COMMUNICATION + 1)
# The same two among a pair's features (FeatureEncoder.pair_names: ..., numeric, devices).
PAIR_TYPE_SLOPES = slice(-3, -1)
_OFFSETS = np.array(COMMUNICATION_OFFSETS)[:, None]

# The values of a pair's seven one-hots (FeatureEncoder.onehot_keys). AdaGrad moves a weight by
# about its feature's value times the step (by its square while eps outweighs the feature's own
# gradients): the hardware's own three (the type; for this family; for this precision) are damped
# so that the spec sheet's slopes explain what they can before a type's one-hots take the rest.
# The slopes are what carries over to the types a family has seldom run on. 0.35 measured best
# of 1, 0.5, 0.35 and 0.25 on both 60-day fleets (docs/results.md). The model type's pair of
# one-hots (per hardware type 0.8, per vendor 0.35) splits what a model type measured on one
# type between that type and the vendor's others: a model type's kernels and software path are
# mostly a vendor's (CUDA, ROCm, XLA). 0.8 / 0.35 measured against 1 / none, 0.7 / 0.35 to 0.5,
# 0.6 / 0.35, 0.5 / 0.5 to 0.7 and 1 / 0.2 to 1 on both 60-day fleets (docs/results.md).
ONEHOT_VALUES = (0.35, 0.35, 0.35, 1.0, 1.0, 0.8, 0.35)
# One more one-hot, the submitting team's per vendor, when the submission says its ``team``: a
# team's containers, library pins and compiler flags make it a better or worse user of a vendor's
# parts, which every job of the team shares and no other job does. Below the configuration's
# one-hots, so that it takes a team's lasting lead or lag on a vendor and not each lineage's own
# noise. 0.35 measured best of 0.15 to 0.7 on both 60-day fleets (docs/results.md), once a
# lineage's latest residual was taken against the model with its team.
TEAM_ONEHOT_VALUE = 0.35
# What encoding a JobSubmitted record reads, in the order of the key its JobFeatures are cached by.
_JOB_FIELDS = ("model_family", "model_type", "precision", "framework", "param_count",
               "global_batch_size", "seq_len", "num_devices", "tensor_parallel",
               "pipeline_parallel", "micro_batches", "flops_per_sample", "team")  # fmt: skip
_job_key = operator.itemgetter(*_JOB_FIELDS)
# Entries per generation of the recent-jobs caches (see RecentCache): a submission's own job is
# encoded again at its completion and as its lineage's reference, seconds to days later. At
# 30,000 jobs a day, 4,096 configurations a generation encoded half of the 1.49 million reads of
# the benchmark's 20-day fleet again; 16,384 encode 18% (267,679), for about 50 MB more.
JOB_CACHE_SIZE = 16384
NUMERIC_CACHE_SIZE = 1024


class RecentCache:
    """A bounded cache of recent entries: two generations of dicts, the older dropped when the
    newer fills up (an entry read from the older moves to the newer), so memory stays bounded
    and what is in use stays."""

    __slots__ = ("new", "old", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.new: dict[Any, Any] = {}
        self.old: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        value = self.new.get(key)
        if value is None:
            value = self.old.pop(key, None)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: Any, value: Any) -> None:
        if len(self.new) >= self.size:
            self.old, self.new = self.new, {}
        self.new[key] = value


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """One submission's features, shared by all of its candidates."""

    key: tuple[str, str, str, str]  # (family, model type, precision, framework)
    shared_names: tuple[str, ...]  # the job's own features ...
    shared_values: np.ndarray  # ... and their values
    numeric_names: tuple[str, ...]  # per-hardware numeric features (see FeatureEncoder.numeric)
    family: str
    framework: str
    precision: str
    precision_index: int
    num_devices: int
    log_devices: float  # scaled
    # the baseline less log peak FLOP/s: log(ASSUMED_MFU x devices / FLOPs per sample x the
    # share of its time a pipeline stage computes)
    log_scale: float
    log_comm_over_work: float  # log(all-reduce bytes per device / FLOPs per device per step)
    # who submitted it ("" when not said): not in ``key``, so that what is cached per
    # configuration is not multiplied by the teams that run it
    team: str = ""

    @property
    def shared(self) -> dict[str, float]:
        """The job's own features as a dict."""
        return dict(zip(self.shared_names, self.shared_values.tolist(), strict=True))


class FeatureEncoder:
    """Builds feature dicts (for river) and the same features as arrays (for batch scoring).

    ``without``: input groups left out (:mod:`leap_stream.core.inputs`; an ablation): the
    encoder's own are ``hardware_specs``, ``job_configuration``, ``interactions`` and
    ``roofline``.
    """

    def __init__(self, hw: HardwareArrays, without: frozenset[str] = frozenset()) -> None:
        self.hw = hw
        self.without = check_groups(without)
        self.names = hw.names.tolist()
        self.vendors = [str(v) for v in hw.vendor_names]
        # natural logs of the spec sheet: peak FLOP/s (one row per precision), bytes/s
        log_peak = np.log(np.maximum(hw.peak_tflops, 1e-3) * 1e12)
        self.log_peak_by_precision = np.ascontiguousarray(log_peak.T)
        self.log_bandwidth = np.log(np.maximum(hw.memory_bw_tbps, 1e-6) * 1e12)
        self.log_interconnect = np.log(np.maximum(hw.interconnect_gbps, 1e-6) * 1e9)
        self.log_scale_out = np.log(np.maximum(hw.scale_out_gbps, 1e-6) * 1e9)
        self.devices_per_node = hw.devices_per_node
        if "hardware_specs" in self.without:  # every type looks like the median part
            for name in ("log_peak_by_precision", "log_bandwidth", "log_interconnect",
                         "log_scale_out", "devices_per_node"):  # fmt: skip
                figures = getattr(self, name)
                median = np.median(figures, axis=-1, keepdims=True)
                setattr(self, name, np.ascontiguousarray(np.broadcast_to(median, figures.shape)))
        self.roofline = "roofline" not in self.without
        # Numeric features are log ratios to the peak, centred on the catalog's median part, so
        # a slope of 0 means "compute-bound" and 1 means "bound by that resource instead".
        bf16 = self.log_peak_by_precision[PRECISIONS.index("bf16")]
        self.centre_bandwidth = float(np.median(self.log_bandwidth - bf16))
        self.centre_peak = float(np.median(bf16))
        self._onehot_cache: dict[tuple[str, str, str, str], list[tuple[str, ...]]] = {}
        self._numeric_cache: dict[tuple[int, int], np.ndarray] = {}
        self._pair_cache: dict[tuple[tuple[str, str, str, str], int], tuple[str, ...]] = {}
        self._team_cache: dict[str, list[str]] = {}
        self._name_cache: dict[
            tuple[str, str, str, str], tuple[tuple[str, ...], tuple[str, ...]]
        ] = {}
        self._start_recent()

    _CACHES = ("_onehot_cache", "_numeric_cache", "_pair_cache", "_name_cache", "_team_cache")
    _RECENT = ("_job_cache", "_numeric_by_job")

    def _start_recent(self) -> None:
        # JobFeatures by the fields job() reads; a job's full numeric() by what it depends on
        self._job_cache = RecentCache(JOB_CACHE_SIZE)
        self._numeric_by_job = RecentCache(NUMERIC_CACHE_SIZE)

    def __getstate__(self) -> dict[str, Any]:
        # the caches are most of a pickled model and rebuild themselves on first use
        return {
            k: ({} if k in self._CACHES else v)
            for k, v in self.__dict__.items()
            if k not in self._RECENT
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # pickles from before input groups could be left out
        self.__dict__.setdefault("without", frozenset())
        self.__dict__.setdefault("devices_per_node", self.hw.devices_per_node)
        self.__dict__.setdefault("roofline", True)
        self.__dict__.setdefault("_team_cache", {})  # from before teams were features
        self._start_recent()

    def _names(self, key: tuple[str, str, str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        names = self._name_cache.get(key)
        if names is None:
            family, model_type, precision, framework = key
            # without the job x hardware terms a slope per family or model type becomes one
            # slope for all: the job's part of the name is a wildcard
            tag, type_tag = ("*", "*") if "interactions" in self.without else (family, model_type)
            shared = (
                f"family={family}",
                f"type={model_type}",
                f"precision={precision}",
                f"framework={framework}",
                f"{family}:log_params",
                f"{family}:log_batch_per_device",
                f"{family}:log_devices",
                f"{family}:log_seq",
                f"{family}:log_tp",
                f"{family}:log_pp",
            )
            # How throughput follows the hardware's figures differs by family, and within a
            # family by model type (compute-, memory- or communication-bound): slopes for each.
            numeric = (
                f"{tag}:bandwidth_per_flop",
                *(f"{tag}:communication/{k}" for k in COMMUNICATION_OFFSETS),
                *(f"{tag}:memory/{k}" for k in MEMORY_KNEES),
                f"{tag}:multi_node",
                f"{tag}:log_peak",
                f"type={type_tag}:bandwidth_per_flop",
                f"type={type_tag}:communication",
            )
            names = self._name_cache[key] = (shared, numeric)
        return names

    def job(self, job: dict[str, Any]) -> JobFeatures:
        """The shared part of a JobSubmitted record's features (the same, immutable object for
        records with the same configuration, while it is recent)."""
        # A submission is encoded again when it completes, and as its lineage's reference at
        # the next submissions: most calls repeat a recent configuration.
        try:
            key = _job_key(job)
        except KeyError:  # seq_len and the fields added later may be left out
            key = tuple([job.get(name) for name in _JOB_FIELDS])
        features = self._job_cache.get(key)
        if features is None:
            features = self._encode(job)
            self._job_cache.put(key, features)
        return features

    def _encode(self, job: dict[str, Any]) -> JobFeatures:
        family, framework, precision = job["model_family"], job["framework"], job["precision"]
        key = (family, job["model_type"], precision, framework)
        shared_names, numeric_names = self._names(key)
        params = float(job["param_count"])
        batch = float(job["global_batch_size"])
        devices = int(job["num_devices"])
        seq = job.get("seq_len") or 0
        log_devices = math.log2(devices) / 5.0
        flops = job.get("flops_per_sample")
        log_work = math.log(flops if flops else 6.0 * params * max(seq, 1))
        stages = max(int(job["pipeline_parallel"]), 1)
        shards = max(int(job["tensor_parallel"]), 1) * stages
        micro_batches = job.get("micro_batches")
        busy = micro_batches / (micro_batches + stages - 1) if micro_batches else 1.0
        replicas = max(devices / shards, 1.0)
        # ring all-reduce of 16-bit gradients: 2 (r - 1) / r x 2 bytes x parameters per shard
        allreduce = 4.0 * (replicas - 1.0) / replicas * params / shards
        log_comm_over_work = (
            math.log(allreduce) - (log_work + math.log(batch / devices)) if allreduce > 0 else -50.0
        )
        values = np.array(
            [
                1.0,
                1.0,
                1.0,
                1.0,
                (math.log10(params) - 9.0) / 1.5,
                (math.log2(batch / devices) - 5.0) / 4.0,
                log_devices,
                math.log2(seq) / 13.0 if seq else 0.0,
                math.log2(max(int(job["tensor_parallel"]), 1)) / 3.0,
                math.log2(max(int(job["pipeline_parallel"]), 1)) / 3.0,
            ]
        )
        if "job_configuration" in self.without:  # a zero is never learned from nor counted
            values[:] = 0.0
        values.flags.writeable = False  # shared by every record of this configuration
        return JobFeatures(
            key=key,
            shared_names=shared_names,
            shared_values=values,
            numeric_names=numeric_names,
            family=family,
            framework=framework,
            precision=precision,
            precision_index=PRECISIONS.index(precision) if precision in PRECISIONS else 0,
            num_devices=devices,
            log_devices=log_devices,
            log_scale=math.log(ASSUMED_MFU * devices * busy) - log_work,
            log_comm_over_work=log_comm_over_work,
            # a team is a job x hardware term: none without the interactions
            team="" if "interactions" in self.without else job.get("team") or "",
        )

    def onehot_keys(self, job: JobFeatures) -> list[tuple[str, ...]]:
        """Per hardware type (catalog order), the names of its one-hot features for this job.

        From the general to the specific: the hardware; the hardware for this family and for
        this precision; the vendor for this family and framework (what a new type of a known
        vendor starts from); and the hardware and the vendor for this very model type, which
        learn what no spec sheet says once the type is common (the vendor's carries a model
        type's measurements to the vendor's other types).
        """
        keys = self._onehot_cache.get(job.key)
        if keys is None:
            fam, model_type, prec, fw = job.key
            if "interactions" in self.without:  # one per type (or vendor): no job in them
                fam, model_type, prec, fw = "family=*", "*", "precision=*", "framework=*"
            keys = [
                (
                    f"hw={h}",
                    f"hw={h}|{fam}",
                    f"hw={h}|{prec}",
                    f"vendor={v}|{fam}",
                    f"vendor={v}|{fw}",
                    f"hw={h}|type={model_type}",
                    f"vendor={v}|type={model_type}",
                )
                for h, v in zip(self.names, self.vendors, strict=True)
            ]
            self._onehot_cache[job.key] = keys
        return keys

    def team_keys(self, team: str) -> list[str]:
        """Per hardware type (catalog order), the name of the one-hot of ``team`` on its vendor:
        what a team's software stack makes of a vendor's parts, for every job of the team."""
        keys = self._team_cache.get(team)
        if keys is None:
            keys = self._team_cache[team] = [f"vendor={v}|team={team}" for v in self.vendors]
        return keys

    def numeric(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """Per-hardware numeric features (rows: ``job.numeric_names``; columns: ``positions``,
        or every catalog type when None, then read-only)."""
        # Element by element the same numbers whichever columns are asked for: a job's full
        # table is computed once while it is recent, and subsets are gathered from it.
        key = (job.precision_index, job.num_devices, job.log_comm_over_work)
        features = self._numeric_by_job.get(key)
        if features is None:
            features = self._numeric_all(job)
            features.flags.writeable = False
            self._numeric_by_job.put(key, features)
        return features if positions is None else features[:, positions]

    def _numeric_all(self, job: JobFeatures) -> np.ndarray:
        """:meth:`numeric` of every catalog type, computed afresh."""
        key = (job.precision_index, job.num_devices)
        table = self._numeric_cache.get(key)
        if table is None:
            table = self._numeric_cache[key] = self._numeric_table(job)
        features = table.copy()
        # Gradient all-reduce time over compute time by the textbook estimate, as
        # log(1 + ratio): the share of a step spent talking rather than computing. FLOPs per
        # sample are unknown for families without a sequence length unless the submission says
        # them, so the ratio is only known up to a factor: a few offsets of it let the model
        # find where the knee lies.
        log_ratio = features[_PEAK_OVER_LINK] + job.log_comm_over_work
        features[_COMMUNICATION] = np.logaddexp(0.0, log_ratio - _OFFSETS)
        features[_TYPE_COMMUNICATION] = features[_COMMUNICATION.start + 1]
        return features[:_PEAK_OVER_LINK]

    def _numeric_table(self, job: JobFeatures) -> np.ndarray:
        """The rows of :meth:`numeric` that depend on precision and device count only; the
        communication rows are placeholders, and one last row holds log(0.4 peak / link)."""
        in_node = job.num_devices <= self.devices_per_node
        log_link = np.where(in_node, self.log_interconnect, self.log_scale_out)
        log_peak = self.log_peak_by_precision[job.precision_index]
        bandwidth = self.log_bandwidth - log_peak - self.centre_bandwidth
        placeholder = np.zeros_like(bandwidth)
        # Memory-bound past a knee: where the hardware's bandwidth per FLOP falls below what the
        # job needs (unknown per model type), throughput follows bandwidth, not FLOPs; hinges at
        # a few points let the model place the knee per family.
        memory = [np.logaddexp(0.0, -bandwidth - k) for k in MEMORY_KNEES]
        return np.stack(
            [
                bandwidth,
                *(placeholder for _ in COMMUNICATION_OFFSETS),
                *memory,
                ~in_node,
                log_peak - self.centre_peak,
                bandwidth,
                placeholder,
                log_peak + math.log(ASSUMED_MFU) - log_link,
            ]
        )

    def baseline(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """log of the compute roofline at the assumed utilisation: devices x peak FLOP/s x
        ``ASSUMED_MFU`` / FLOPs per sample, times the share of time a pipeline stage computes
        when known (0 without the ``roofline`` input group)."""
        log_peak = self.log_peak_by_precision[job.precision_index]
        if positions is not None:
            log_peak = log_peak[positions]
        if not self.roofline:
            return np.zeros(len(log_peak))
        return log_peak + job.log_scale

    def device_names(self) -> list[str]:
        """Per hardware type, the name of its slope on the device count (a pair feature)."""
        if "interactions" in self.without:
            return [f"hw={h}|*:log_devices" for h in self.names]
        return [f"hw={h}:log_devices" for h in self.names]

    def pair_names(self, job: JobFeatures, position: int) -> tuple[str, ...]:
        """Feature names of one (job, hardware) pair: the team's one-hot (when the job says its
        team), then :meth:`config_pair_names`."""
        names = self.config_pair_names(job, position)
        return (self.team_keys(job.team)[position], *names) if job.team else names

    def config_pair_names(self, job: JobFeatures, position: int) -> tuple[str, ...]:
        """The names a pair's features share with every team's submission of its configuration:
        shared, one-hots, numeric, devices."""
        key = (job.key, position)
        names = self._pair_cache.get(key)
        if names is None:
            names = self._pair_cache[key] = (
                *job.shared_names,
                *self.onehot_keys(job)[position],
                *job.numeric_names,
                self.device_names()[position],
            )
        return names

    def pair(self, job: JobFeatures, position: int) -> dict[str, float]:
        """The full feature dict of one (job, hardware) pair, as river sees it."""
        return dict(
            zip(self.pair_names(job, position), self.pair_values(job, position), strict=True)
        )

    def pair_values(self, job: JobFeatures, position: int) -> list[float]:
        """The values of :meth:`pair`, in the order of :meth:`pair_names`."""
        return [
            *((TEAM_ONEHOT_VALUE,) if job.team else ()),
            *job.shared_values.tolist(),
            *ONEHOT_VALUES,
            *self.numeric(job)[:, position].tolist(),
            job.log_devices,
        ]
