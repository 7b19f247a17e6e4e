"""Tests of ``leap-stream ablate`` (leap_stream.backtest.ablation) on a small generated fleet.

Three variants replay in this process (``workers=0``) once for the module; the command line runs
one more through the process pool.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.backtest.ablation import LOOKUP_TABLE, VARIANTS, ResumeError, Variant, ablate
from leap_stream.backtest.nightly import NightlyOptions
from leap_stream.backtest.replay import replay
from leap_stream.core.catalog import Catalog
from leap_stream.data.fleet import FleetConfig

FLEET = FleetConfig(days=4, jobs_per_day=300, seed=17)
CHOSEN = [v for v in VARIANTS if v.name in ("full", "no_prior_throughput", "no_hardware_specs")]


@pytest.fixture(scope="module")
def fleet(generated_fleet: Callable[[FleetConfig], Path]) -> Path:
    return generated_fleet(FLEET)


@pytest.fixture(scope="module")
def ablation(fleet: Path, hw_catalog: Catalog) -> tuple[pd.DataFrame, Path]:
    out = fleet / "ablation"
    table = ablate(
        fleet / "history.parquet",
        out,
        hw_catalog,
        oracle=fleet / "oracle.parquet",
        variants=CHOSEN,
        workers=0,
        progress=False,
    )
    return table, out


def _summary(out: Path, variant: str) -> dict[str, Any]:
    return json.loads((out / "variants" / variant / "summary.json").read_text())


def test_each_row_is_its_own_replays_figures(ablation: tuple[pd.DataFrame, Path]) -> None:
    table, out = ablation
    assert table["variant"].tolist() == [*(v.name for v in CHOSEN), LOOKUP_TABLE]
    rows = table.set_index("variant")
    for variant in CHOSEN:
        summary = _summary(out, variant.name)
        row = rows.loc[variant.name]
        assert row["within_10pct"] == summary["accuracy"]["within_10pct_abstain_as_miss"]
        assert row["coverage"] == summary["coverage"]
        assert row["top1_regret"] == summary["decisions"]["top1_regret"]
    full = _summary(out, "full")
    lookup = rows.loc[LOOKUP_TABLE]
    assert lookup["within_10pct"] == full["baselines"]["lookup"]["within_10pct_abstain_as_miss"]
    assert lookup["top1_regret"] == full["decisions"]["lookup_top1_regret"]
    # differences in points from the full model, which is its own reference
    assert (rows.loc["full", [c for c in rows.columns if c.endswith("_points")]] == 0).all()
    points = rows.loc["no_hardware_specs", "within_10pct_points"]
    expected = rows.loc["no_hardware_specs", "within_10pct"] - rows.loc["full", "within_10pct"]
    assert points == pytest.approx(100.0 * expected)


def test_the_variants_really_differ(ablation: tuple[pd.DataFrame, Path]) -> None:
    table, out = ablation
    rows = table.set_index("variant")
    # lineages repeat in the fleet: their earlier attempts are worth many points ...
    assert rows.loc["no_prior_throughput", "within_10pct_points"] < -10.0
    # ... and without them no prediction is a transfer
    assert math.isnan(rows.loc["no_prior_throughput", "transfer_within_10pct"])
    assert "transfer" not in _summary(out, "no_prior_throughput")["accuracy"]["by_source"]
    assert rows.loc["full", "transfer_within_10pct"] > 0
    # every attempt was replayed by every variant
    counts = {v.name: _summary(out, v.name)["accuracy"]["n"] for v in CHOSEN}
    assert len(set(counts.values())) == 1, counts


def test_it_writes_the_table_as_csv_markdown_and_a_page_with_a_plot(
    ablation: tuple[pd.DataFrame, Path],
) -> None:
    table, out = ablation
    pd.testing.assert_frame_equal(pd.read_csv(out / "ablation.csv"), table, check_dtype=False)
    markdown = (out / "ablation.md").read_text()
    assert markdown.count("\n") == len(table) + 2  # header, rule, a line per row
    assert "| `no_prior_throughput` |" in markdown and "n/a" in markdown
    page = (out / "ablation.html").read_text()
    assert page.count("<img ") == 1 and page.count("<tr>") == len(table) + 1


def test_the_full_variant_is_required(fleet: Path, hw_catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="full"):
        ablate(
            fleet / "history.parquet",
            tmp_path,
            hw_catalog,
            variants=[Variant("no_roofline", frozenset({"roofline"}))],
            workers=0,
        )


def test_the_cli_runs_variants_in_worker_processes(
    fleet: Path, ablation: tuple[pd.DataFrame, Path], tmp_path: Path
) -> None:
    table, _ = ablation
    result = CliRunner().invoke(
        cli.app,
        [
            "ablate", str(fleet / "history.parquet"), "--out", str(tmp_path),
            "--oracle", str(fleet / "oracle.parquet"), "--variant", "no_roofline",
            "--workers", "2",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "no_roofline" in result.output
    pooled = pd.read_csv(tmp_path / "ablation.csv").set_index("variant")
    assert pooled.index.tolist() == ["full", "no_roofline", LOOKUP_TABLE]
    # a replay is deterministic: the pool's full row is the in-process one
    full = table.set_index("variant").loc["full"]
    assert pooled.loc["full", "within_10pct"] == full["within_10pct"]
    assert pooled.loc["full", "top1_regret"] == full["top1_regret"]


def test_the_cli_refuses_an_unknown_variant(fleet: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.app,
        ["ablate", str(fleet / "history.parquet"), "--out", str(tmp_path), "--variant", "no_x"],
    )
    assert result.exit_code == 2
    assert "unknown variant" in result.output


def test_input_groups_are_left_out_of_the_in_process_online_core_only(
    fleet: Path, hw_catalog: Catalog, tmp_path: Path
) -> None:
    history = fleet / "history.parquet"
    options = {"nightly": NightlyOptions(nights=1, workers=0)}, {"rankings": lambda events: []}
    for extra in options:
        with pytest.raises(ValueError, match="in-process online core only"):
            replay(history, tmp_path, hw_catalog, without={"roofline"}, **extra)
    with pytest.raises(ValueError, match="unknown input group"):
        replay(history, tmp_path, hw_catalog, without={"specs"}, progress=False, report=False)


def test_resume_reads_the_variants_already_replayed_and_replays_the_rest(
    fleet: Path, ablation: tuple[pd.DataFrame, Path], hw_catalog: Catalog, tmp_path: Path
) -> None:
    _, done = ablation
    out = tmp_path / "ablation"
    shutil.copytree(done, out)
    stored = out / "variants" / "full" / "summary.json"
    marked = json.loads(stored.read_text())
    marked["accuracy"]["within_10pct_abstain_as_miss"] = 0.123  # read back, never replayed
    stored.write_text(json.dumps(marked))
    more = [*CHOSEN, next(v for v in VARIANTS if v.name == "no_roofline")]
    history, oracle = fleet / "history.parquet", fleet / "oracle.parquet"
    table = ablate(
        history, out, hw_catalog, oracle=oracle, variants=more, workers=0, progress=False,
        resume=True,
    ).set_index("variant")  # fmt: skip
    assert table.loc["full", "within_10pct"] == 0.123
    assert (out / "variants" / "no_roofline" / "summary.json").exists()
    assert table.loc["no_roofline", "within_10pct_points"] == pytest.approx(
        (_summary(out, "no_roofline")["accuracy"]["within_10pct_abstain_as_miss"] - 0.123) * 100
    )
    with pytest.raises(ResumeError, match="other inputs"):  # without the oracle: other inputs
        ablate(history, out, hw_catalog, variants=more, workers=0, progress=False, resume=True)
    first = next(iter(hw_catalog))  # a price moves the regret: another catalog, other inputs
    cheaper = first.model_copy(update={"price_per_device_hour": first.price_per_device_hour / 2})
    repriced = Catalog([cheaper, *list(hw_catalog)[1:]])
    with pytest.raises(ResumeError, match="other inputs"):
        ablate(
            history, out, repriced, oracle=oracle, variants=more, workers=0, progress=False,
            resume=True,
        )  # fmt: skip
