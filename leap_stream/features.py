"""Features of a (submission, hardware type) pair, built from the submission and the catalog.

A pair's features split in two: the job's own (model type, family, precision, sizes: the same
for every candidate) and the hardware's, seen through the job's family (one-hots of the hardware,
vendor and precision, and the catalog's figures on a log scale: peak TFLOPS at the job's
precision, memory bandwidth, the link the job's devices talk over). Numeric features are scaled
by fixed, documented constants so that plain SGD behaves without an online scaler.

The target is not raw throughput but its log ratio to a roofline baseline, ``log(devices x peak
FLOP/s / (6 x parameters x tokens per sample))``: what the model learns is then an efficiency
(MFU-like) correction, and a hardware type it has never seen starts from its spec sheet.

>>> from leap_stream.catalog import default_catalog
>>> from leap_stream.hardware import HardwareArrays
>>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
>>> job = encoder.job({"model_type": "llm-7b", "model_family": "dense_llm", "framework": "pytorch",
...     "precision": "bf16", "param_count": 7_000_000_000, "global_batch_size": 1024,
...     "seq_len": 4096, "num_devices": 64, "tensor_parallel": 1, "pipeline_parallel": 1})
>>> pair = encoder.pair(job, encoder.hw.index["H100-SXM"])
>>> pair["hw=H100-SXM"], pair["type=llm-7b"], "dense_llm:log_peak" in pair
(1.0, 1.0, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from leap_stream.events import PRECISIONS
from leap_stream.hardware import HardwareArrays

__all__ = ["FeatureEncoder", "JobFeatures"]


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """One submission's features, shared by all of its candidates."""

    shared: dict[str, float]  # the job's own features
    family: str
    framework: str
    precision: str
    precision_index: int
    num_devices: int
    log_devices: float  # scaled
    log_work: float  # log(6 x parameters x tokens per sample)


class FeatureEncoder:
    """Builds feature dicts (for river) and the same features as arrays (for batch scoring)."""

    def __init__(self, hw: HardwareArrays) -> None:
        self.hw = hw
        self.names = hw.names.tolist()
        self.vendors = [str(v) for v in hw.vendor_names]
        peak = np.maximum(hw.peak_tflops, 1e-3) * 1e12
        self.log_peak = np.log(peak)  # (H, precisions), natural log, for the baseline
        self.scaled_peak = (np.log2(peak / 1e12) - 9.0) / 2.0
        self.scaled_bandwidth = np.log2(np.maximum(hw.memory_bw_tbps, 1e-3)) / 2.0
        self._onehot_cache: dict[tuple[str, str, str], list[tuple[str, ...]]] = {}

    def job(self, job: dict[str, Any]) -> JobFeatures:
        """The shared part of a JobSubmitted record's features."""
        family, framework, precision = job["model_family"], job["framework"], job["precision"]
        params = float(job["param_count"])
        batch = float(job["global_batch_size"])
        devices = int(job["num_devices"])
        seq = job.get("seq_len") or 0
        log_devices = math.log2(devices) / 5.0
        shared = {
            f"family={family}": 1.0,
            f"type={job['model_type']}": 1.0,
            f"precision={precision}": 1.0,
            f"framework={framework}": 1.0,
            f"{family}:log_params": (math.log10(params) - 9.0) / 1.5,
            f"{family}:log_batch_per_device": (math.log2(batch / devices) - 5.0) / 4.0,
            f"{family}:log_devices": log_devices,
            f"{family}:log_seq": math.log2(seq) / 13.0 if seq else 0.0,
            f"{family}:log_tp": math.log2(max(int(job["tensor_parallel"]), 1)) / 3.0,
            f"{family}:log_pp": math.log2(max(int(job["pipeline_parallel"]), 1)) / 3.0,
        }
        return JobFeatures(
            shared=shared,
            family=family,
            framework=framework,
            precision=precision,
            precision_index=PRECISIONS.index(precision) if precision in PRECISIONS else 0,
            num_devices=devices,
            log_devices=log_devices,
            log_work=math.log(6.0 * params * max(seq, 1)),
        )

    def onehot_keys(self, job: JobFeatures) -> list[tuple[str, ...]]:
        """Per hardware type (catalog order), the names of its one-hot features for this job."""
        key = (job.family, job.framework, job.precision)
        keys = self._onehot_cache.get(key)
        if keys is None:
            fam, fw, prec = key
            keys = [
                (
                    f"hw={h}",
                    f"hw={h}|{fam}",
                    f"hw={h}|{prec}",
                    f"vendor={v}|{fam}",
                    f"vendor={v}|{fw}",
                )
                for h, v in zip(self.names, self.vendors, strict=True)
            ]
            self._onehot_cache[key] = keys
        return keys

    def numeric(self, job: JobFeatures, positions: np.ndarray) -> dict[str, np.ndarray]:
        """The per-hardware numeric features, as arrays over ``positions``."""
        hw = self.hw
        in_node = job.num_devices <= hw.devices_per_node[positions]
        link = np.where(in_node, hw.interconnect_gbps[positions], hw.scale_out_gbps[positions])
        fam = job.family
        return {
            f"{fam}:log_peak": self.scaled_peak[positions, job.precision_index],
            f"{fam}:log_bandwidth": self.scaled_bandwidth[positions],
            f"{fam}:log_link": np.log2(np.maximum(link, 1e-3)) / 4.0,
            f"{fam}:multi_node": (~in_node).astype(float),
        }

    def baseline(self, job: JobFeatures, positions: np.ndarray) -> np.ndarray:
        """log of the compute roofline: devices x peak FLOP/s / FLOPs per sample."""
        return (
            math.log(job.num_devices) + self.log_peak[positions, job.precision_index] - job.log_work
        )

    def pair(self, job: JobFeatures, position: int) -> dict[str, float]:
        """The full feature dict of one (job, hardware) pair, as river sees it."""
        x = dict(job.shared)
        for key in self.onehot_keys(job)[position]:
            x[key] = 1.0
        pos = np.array([position])
        for key, values in self.numeric(job, pos).items():
            x[key] = float(values[0])
        x[f"hw={self.names[position]}:log_devices"] = job.log_devices
        return x
