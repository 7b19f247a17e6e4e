"""Regenerate the plots and figures of ``docs/data.md`` from a generated fleet.

Usage (from the repository root)::

    .venv/bin/python benchmarks/plot_fleet.py --fleet out/fleet-30d --out docs/img

If ``--fleet`` holds no ``history.parquet`` yet, the fleet the docs describe is generated there
first (30 days, 3,000 attempts a day, seed 1: a few seconds). The script writes four PNGs and
prints the figures quoted in the doc: fleet statistics and the physics sanity checks against
public throughput figures.

The throughput-per-dollar plot and the sanity checks use fixed reference jobs priced directly
with :func:`leap_stream.data.fleet.physics.expected_throughput` (neutral hidden efficiencies),
so they do not depend on the sampled fleet; the other plots read the fleet's history and oracle.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI or the build machine

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from leap_stream.core.catalog import VENDORS, default_catalog
from leap_stream.core.events import FRAMEWORKS, PRECISIONS
from leap_stream.data.fleet import FleetConfig, HardwareArrays, generate_fleet
from leap_stream.data.fleet.generator import default_start
from leap_stream.data.fleet.physics import RELEASES, expected_throughput
from leap_stream.data.fleet.zoo import FAMILIES, FAMILY_NAMES

DOC_FLEET = FleetConfig(days=30, jobs_per_day=3_000, seed=1)
VENDOR_COLORS = {
    "NVIDIA": "#76b900",
    "AMD": "#d62728",
    "Intel": "#1f77b4",
    "Google": "#ff9f0e",
    "AWS": "#9467bd",
    "Graphcore": "#7f7f7f",
}
FAMILY_COLORS = dict(zip(FAMILY_NAMES, plt.get_cmap("tab10").colors, strict=False))


@dataclass(frozen=True)
class ReferenceJob:
    """A fixed training configuration with neutral hidden efficiencies (1.0).

    ``tokens`` is the work units per sample (the sequence length for sequence families);
    ``unit`` names what one sample is, for the sanity-check printout.
    """

    label: str
    family: str
    params: float
    active_params: float
    tokens: float
    traffic: float
    precision: str
    devices: int
    batch: int
    unit: str
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    framework: str = "pytorch"
    unit_per_sample: float = 1.0

    def throughput(self, hw: HardwareArrays, day: float, days: float) -> np.ndarray:
        """Expected samples/s of this job on every hardware type (NaN: cannot run there)."""
        index = FAMILY_NAMES.index(self.family)
        sequence = self.family in ("dense_llm", "moe", "speech")

        def one(value: float) -> np.ndarray:
            return np.array([value])

        return expected_throughput(
            hw,
            family_index=one(index).astype(int),
            param_count=one(int(self.params)).astype(np.int64),
            active_params=one(self.active_params),
            tokens=one(self.tokens),
            traffic=one(self.traffic),
            base_mfu=one(FAMILIES[index].base_mfu),
            type_efficiency=one(1.0),
            precision_index=one(PRECISIONS.index(self.precision)).astype(int),
            framework_index=one(FRAMEWORKS.index(self.framework)).astype(int),
            num_devices=one(self.devices).astype(int),
            tensor_parallel=one(self.tensor_parallel).astype(int),
            pipeline_parallel=one(self.pipeline_parallel).astype(int),
            global_batch_size=one(self.batch).astype(int),
            seq_len=one(self.tokens if sequence else np.nan),
            lineage_efficiency=np.ones((1, len(hw))),
            day=one(day),
            days=days,
        )[0]


# The three families of the cost plot. Hidden figures are picked inside the zoo's ranges:
# ResNet-50 does ~12 GFLOPs of training work per image = 6 x 25.6M params x 80 "tokens";
# the DLRM-like model takes the zoo's smallest active fraction (0.5%) and a mid traffic.
COST_JOBS = (
    ReferenceJob(
        "7B dense LLM (seq 4096, 8 devices)",
        "dense_llm",
        7e9,
        7e9,
        4096,
        30.0,
        "bf16",
        8,
        1024,
        "tokens",
        unit_per_sample=4096,
    ),
    ReferenceJob(
        "ResNet-50-like CNN (8 devices)",
        "cnn",
        25.6e6,
        25.6e6,
        80,
        800.0,
        "bf16",
        8,
        2048,
        "images",
    ),
    ReferenceJob(
        "DLRM-like recsys, 20B params (8 devices)",
        "recsys",
        2e10,
        1e8,
        1,
        100.0,
        "fp32",
        8,
        65536,
        "samples",
    ),
)

# Public figures to hold the physics against (per device, dense, mixed precision unless noted).
# Recalled, not re-measured: orders of magnitude, the doc says so.
SANITY = (
    (COST_JOBS[0], "H100-SXM", 8_000.0, "Llama-2-7B-class pre-training at ~40% MFU"),
    (COST_JOBS[0], "A100-SXM-80GB", 3_300.0, "7B at ~50% MFU (MosaicML/Megatron reports)"),
    (COST_JOBS[1], "A100-SXM-80GB", 2_800.0, "ResNet-50, MLPerf Training (DGX A100 / 8)"),
    (
        # 256 images a device (COST_JOBS[1]) does not fit 16 GB under the memory rule: use 64.
        ReferenceJob(
            "ResNet-50-like CNN (64 images/device)",
            "cnn",
            25.6e6,
            25.6e6,
            80,
            800.0,
            "fp16",
            8,
            512,
            "images",
        ),
        "V100-SXM2-16GB",
        1_200.0,
        "ResNet-50, NVIDIA mixed precision, V100",
    ),
    (
        ReferenceJob(
            "ViT-B/16 (8 devices)", "vit", 86e6, 86e6, 197, 80.0, "bf16", 8, 4096, "images"
        ),
        "A100-SXM-80GB",
        1_100.0,
        "ViT-B/16 training, timm/DeiT reports",
    ),
    (
        ReferenceJob(
            "GPT-3 175B (1024 devices, tp 8, pp 8)",
            "dense_llm",
            1.75e11,
            1.75e11,
            2048,
            30.0,
            "bf16",
            1024,
            1536,
            "tokens",
            tensor_parallel=8,
            pipeline_parallel=8,
            unit_per_sample=2048,
        ),
        "A100-SXM-80GB",
        100.0,
        "Megatron-LM 175B on 1024 A100s (~140 TFLOPS/GPU with recompute)",
    ),
    (COST_JOBS[2], "A100-SXM-80GB", 1_500_000.0, "MLPerf DLRM (Criteo 1TB) on DGX A100 / 8"),
)


def reference_world() -> tuple[HardwareArrays, float, float]:
    """The catalog at the last day of a 180-day trace: every type launched, all releases in."""
    catalog = default_catalog()
    days = 180.0
    return HardwareArrays.from_catalog(catalog, default_start(catalog, int(days))), days - 1, days


def plot_cost(hw: HardwareArrays, day: float, days: float, out: Path) -> None:
    """Samples per USD of the three reference jobs on every type, normalised per family."""
    fig, axes = plt.subplots(1, len(COST_JOBS), figsize=(15, 12), sharey=True)
    y = np.arange(len(hw))[::-1]
    colors = [VENDOR_COLORS[VENDORS[v]] for v in hw.vendor_index]
    for ax, job in zip(axes, COST_JOBS, strict=True):
        samples_per_usd = (
            job.throughput(hw, day, days) * 3600.0 / (job.devices * hw.price_per_device_hour)
        )
        best = np.nanmax(samples_per_usd)
        share = samples_per_usd / best
        ax.barh(y, np.nan_to_num(share), color=colors)
        for yi, value in zip(y, share, strict=True):
            if np.isnan(value):
                ax.text(0.01, yi, "cannot run", va="center", fontsize=7, color="0.5")
        ax.set_title(f"{job.label}\nbest: {best:,.0f} samples/USD", fontsize=10)
        ax.set_xlim(0, 1.05)
        ax.set_xlabel("samples per USD / best type")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, hw.names, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in VENDOR_COLORS.values()]
    fig.legend(handles, VENDOR_COLORS, loc="lower center", ncol=len(VENDOR_COLORS))
    fig.suptitle(
        "Ground-truth throughput per dollar (on-demand list price), per family: "
        "no type wins everything"
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.98))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _oracle_matrix(history: pd.DataFrame, oracle_path: Path, names: np.ndarray) -> np.ndarray:
    """The oracle as (submitted attempts, H), rows in the history's submission order."""
    table = pq.read_table(oracle_path)
    values = table.column("throughput").to_numpy(zero_copy_only=False).astype(float)
    matrix = values.reshape(-1, len(names))
    submitted = history[history.event_type == "submitted"]
    jobs = table.column("job_id").to_numpy(zero_copy_only=False)[:: len(names)]
    if not np.array_equal(jobs, submitted.job_id.to_numpy()):
        raise ValueError(f"{oracle_path}: oracle rows are not grouped in submission order")
    return matrix


def plot_drift(history: pd.DataFrame, oracle: np.ndarray, hw: HardwareArrays, out: Path) -> None:
    """Median per-job oracle ratio of a vendor's flagship to H100 by day, per family."""
    submitted = history[history.event_type == "submitted"].reset_index(drop=True)
    start = submitted.event_time.min().normalize()
    day = ((submitted.event_time - start).dt.total_seconds() // 86_400).astype(int).to_numpy()
    days = int(day.max()) + 1
    names = list(hw.names)
    panels = (
        ("MI300X", "AMD", ("dense_llm", "moe", "vit", "cnn")),
        ("Gaudi3", "Intel", ("cnn", "vit", "diffusion", "dense_llm")),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 4.6), sharey=True)
    for ax, (other, vendor, families) in zip(axes, panels, strict=True):
        ratio = oracle[:, names.index(other)] / oracle[:, names.index("H100-SXM")]
        for family in families:
            rows = (submitted.model_family.to_numpy() == family) & np.isfinite(ratio)
            frame = pd.DataFrame({"day": day[rows], "ratio": ratio[rows]})
            median = frame.groupby("day").ratio.median()
            ax.plot(
                median.index,
                median / median.iloc[:3].median(),
                marker=".",
                label=family,
                color=FAMILY_COLORS[family],
            )
        for release in RELEASES:
            if release.vendor in (vendor, "NVIDIA") and set(release.families) & set(families):
                at = release.at_fraction * days
                ax.axvline(at, color="0.4", ls="--", lw=0.8)
                # Vertical labels beside their line: releases a few days apart do not collide.
                ax.text(
                    at + 0.25,
                    0.86,
                    f"{release.vendor} x{release.factor}: {', '.join(release.families)}",
                    rotation=90,
                    fontsize=8,
                    va="bottom",
                    color="0.3",
                    bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0},
                )
        ax.set_title(f"{other} / H100-SXM, median per job, by submission day")
        ax.set_xlabel("day of the trace")
        ax.set_ylim(0.85, 1.23)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("ratio / its first-days median")
    fig.suptitle("The drift schedule: software releases move a vendor's efficiency per family")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_activity(history: pd.DataFrame, out: Path) -> None:
    """Attempts per day by family, model-type popularity, attempts per lineage."""
    submitted = history[history.event_type == "submitted"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    day = (submitted.event_time - submitted.event_time.min().normalize()).dt.days
    per_day = submitted.groupby([day, "model_family"]).size().unstack(fill_value=0)
    per_day = per_day.reindex(columns=list(FAMILY_NAMES), fill_value=0)
    axes[0].stackplot(
        per_day.index,
        per_day.T.to_numpy(),
        labels=per_day.columns,
        colors=[FAMILY_COLORS[f] for f in per_day.columns],
    )
    axes[0].set_title("attempts submitted per day, by family")
    axes[0].set_xlabel("day of the trace (lineages start empty: a few days of warm-up)")
    axes[0].legend(loc="lower right", fontsize=7, ncol=2)

    counts = submitted.model_type.value_counts().to_numpy()
    axes[1].loglog(np.arange(1, len(counts) + 1), counts, marker=".", ls="")
    axes[1].set_title(f"attempts per model type ({len(counts)} types), by rank")
    axes[1].set_xlabel("popularity rank")
    axes[1].set_ylabel("attempts")
    axes[1].grid(alpha=0.3, which="both")

    per_lineage = submitted.groupby("lineage_id").size()
    bins = np.arange(1, per_lineage.max() + 2)
    axes[2].hist(per_lineage, bins=bins, log=True, color="0.4")
    axes[2].set_title(f"attempts per lineage (mean {per_lineage.mean():.2f})")
    axes[2].set_xlabel("attempts")
    axes[2].set_ylabel("lineages")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_hardware_share(history: pd.DataFrame, hw: HardwareArrays, out: Path) -> None:
    """Share of completed attempts and device-hours per hardware type."""
    completed = history[history.event_type == "completed"]
    share = completed.hardware_type.value_counts(normalize=True).reindex(hw.names, fill_value=0)
    fig, ax = plt.subplots(figsize=(13, 4.8))
    colors = [VENDOR_COLORS[VENDORS[v]] for v in hw.vendor_index]
    ax.bar(np.arange(len(hw)), share.to_numpy() * 100, color=colors)
    ax.set_xticks(np.arange(len(hw)), hw.names, rotation=70, ha="right", fontsize=8)
    ax.set_ylabel("% of attempts")
    ax.set_title("Where attempts ran (catalog order: vendor, then generation)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in VENDOR_COLORS.values()]
    ax.legend(handles, VENDOR_COLORS, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def print_fleet_figures(history: pd.DataFrame, oracle: np.ndarray, hw: HardwareArrays) -> None:
    """The fleet statistics quoted in docs/data.md."""
    submitted = history[history.event_type == "submitted"]
    completed = history[history.event_type == "completed"]
    per_lineage = submitted.groupby("lineage_id").size()
    types_per_lineage = completed.groupby("lineage_id").hardware_type.nunique()
    top = submitted.model_type.value_counts(normalize=True)
    print(f"events {len(history):,}; attempts {len(submitted):,}; lineages {len(per_lineage):,}")
    print(
        f"attempts per lineage: mean {per_lineage.mean():.2f}, p99 {per_lineage.quantile(0.99)}, "
        f"max {per_lineage.max()}; lineages on >1 type: {(types_per_lineage > 1).mean():.1%}"
    )
    print("status:", completed.status.value_counts(normalize=True).round(3).to_dict())
    print(
        f"requested_hardware set: {submitted.requested_hardware.notna().mean():.1%}; "
        f"candidate list set: {submitted.candidate_hardware.notna().mean():.1%}"
    )
    print(
        f"model types used {len(top)}; top 1 {top.iloc[0]:.1%}; top 10 {top.iloc[:10].sum():.1%}; "
        f"top 10% {top.iloc[: len(top) // 10].sum():.1%}"
    )
    print("family share:", submitted.model_family.value_counts(normalize=True).round(3).to_dict())
    runnable = np.isfinite(oracle).mean(axis=0)
    print(
        f"oracle: {np.isfinite(oracle).mean():.1%} of cells runnable; types with any value "
        f"{int((runnable > 0).sum())}/{len(hw)}; never runnable: "
        f"{[str(n) for n in hw.names[runnable == 0]]}"
    )
    vendor_share = completed.hardware_type.map(
        dict(zip(hw.names, (VENDORS[v] for v in hw.vendor_index), strict=True))
    ).value_counts(normalize=True)
    print("vendor share of attempts:", vendor_share.round(3).to_dict())


def print_sanity(hw: HardwareArrays, day: float, days: float) -> None:
    """Model vs public per-device throughput for the SANITY jobs."""
    names = list(hw.names)
    print(f"{'reference job':44s} {'type':15s} {'model':>10s} {'public':>10s} {'ratio':>6s}")
    for job, hardware, public, source in SANITY:
        per_device = job.throughput(hw, day, days)[names.index(hardware)]
        value = per_device * job.unit_per_sample / job.devices
        print(
            f"{job.label:44s} {hardware:15s} {value:10,.0f} {public:10,.0f} "
            f"{value / public:6.2f}  {job.unit}/s/device; {source}"
        )


def main() -> None:
    """Parse arguments, generate the fleet if needed, write the plots, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=Path, default=Path("out/fleet-30d"))
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    if not (args.fleet / "history.parquet").exists():
        generate_fleet(DOC_FLEET, args.fleet, progress=False)
    args.out.mkdir(parents=True, exist_ok=True)

    hw_ref, day, days = reference_world()
    plot_cost(hw_ref, day, days, args.out / "throughput_per_dollar.png")
    print_sanity(hw_ref, day, days)

    history = pq.read_table(args.fleet / "history.parquet").to_pandas()
    start: datetime = history.event_time.min().normalize().to_pydatetime()
    hw = HardwareArrays.from_catalog(default_catalog(), start)
    oracle = _oracle_matrix(history, args.fleet / "oracle.parquet", hw.names)
    plot_drift(history, oracle, hw, args.out / "drift.png")
    plot_activity(history, args.out / "fleet_activity.png")
    plot_hardware_share(history, hw, args.out / "hardware_share.png")
    print_fleet_figures(history, oracle, hw)


if __name__ == "__main__":
    main()
