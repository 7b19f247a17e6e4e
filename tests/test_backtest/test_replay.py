"""Tests of leap_stream.backtest.replay on the tiny hand-made history of ``core_fixtures.py``.

The history (see ``TINY_EVENTS``): lineage L1 runs one configuration on H100-SXM (j1, 20,000
samples/s), then on MI300X (j2, 30,000), each with a single candidate; an orphan completion
(j99) follows. The next day L1 resubmits it with both as candidates and runs on H100-SXM as
requested (j3, 21,000); L2 fails on H100-SXM (j4); L3 asks for bf16 on a K80 only (nothing
eligible) and never completes (j5).

Worked out by hand:

- j3 is a repeat of j1's configuration on the same hardware: the online model predicts j1's
  20,000 exactly (error -1/21, a hit within 10%), and so does the lookup (its median of one);
  the lookup abstains on j1 and j2 (first sight of each type), so it scores 1 of 3.
- j3's ranking rests on L1's own measurements (no risk charge): MI300X costs
  8 x 6.00 / 30,000 per sample against H100-SXM's 8 x 6.16 / 20,000, so both the model and
  the lookup pick MI300X while the user asked for H100-SXM. Every other attempt had one
  candidate: all policies agree there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from core_fixtures import (
    TINY_EVENTS,
    TINY_ORACLE,
    TinyHistory,
    completed_event,
    hours,
    submitted_event,
    write_csv_unchecked,
)
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.backtest.replay import (
    UNRUNNABLE_PICK_HOURS,
    OracleError,
    OracleStream,
    _Session,
    replay,
)
from leap_stream.core.catalog import Catalog
from leap_stream.data.history import HistoryError, events_to_table, write_history, write_oracle

BATCH = 512  # global_batch_size of every tiny-history job
DEVICES = 8


def _run(
    tiny: TinyHistory, out: Path, history: Path | None = None, **kwargs: Any
) -> dict[str, Any]:
    kwargs.setdefault("oracle", tiny.oracle)
    history = history or tiny.history
    return replay(history, out, tiny.catalog, progress=False, report=False, **kwargs)


def _cost(catalog: Catalog, steps: int, hardware: str, true_throughput: float) -> float:
    """USD to process an attempt's samples on ``hardware`` at its true throughput."""
    price = catalog[hardware].price_per_device_hour
    return steps * BATCH * DEVICES * price / (3600.0 * true_throughput)


@pytest.fixture
def summary(tiny_history: TinyHistory, tmp_path: Path) -> dict[str, Any]:
    return _run(tiny_history, tmp_path / "out")


def test_event_counts(summary: dict[str, Any]) -> None:
    assert summary["events"] == {
        "submitted": 5,
        "completed": 5,
        "unmatched_completions": 1,  # j99
        "implausible_completions": 0,
        "never_completed": 1,  # j5
    }
    assert summary["submissions"] == 5
    assert summary["attempts"] == 4  # j1..j4: the orphan is no attempt
    assert summary["succeeded"] == 3


def test_coverage(summary: dict[str, Any]) -> None:
    # j5 has no eligible candidate and counts for neither policy
    assert summary["coverage"] == 1.0
    assert summary["baselines"]["lookup"]["coverage"] == 0.5  # j3, j4 of j1..j4
    # device-hours: j1, j2 ran 1 h on 8 devices, j3, j4 2 h: the lookup covered 32 of 48
    assert summary["coverage_gpu_hours"] == 1.0
    assert summary["baselines"]["lookup"]["coverage_gpu_hours"] == pytest.approx(32 / 48, 1e-5)


def test_accuracy_of_a_repeat_is_a_hit(summary: dict[str, Any]) -> None:
    accuracy = summary["accuracy"]
    assert accuracy["n"] == 3  # the model predicted all three measured attempts
    repeat = accuracy["by_source"]["lineage_prior"]
    assert repeat == {
        "n": 1,
        "within_10pct": 1.0,
        "within_20pct": 1.0,
        "mdape": pytest.approx(1 / 21, abs=1e-6),
    }
    assert summary["by_source"]["lineage_prior"]["interval_coverage"] == 1.0
    assert sum(block["n"] for block in summary["by_source"].values()) == 3
    assert summary["intervals"]["n"] == 3
    assert summary["intervals"]["by_source"]["lineage_prior"] == {"n": 1, "coverage": 1.0}


def test_lookup_abstains_on_first_sight(summary: dict[str, Any]) -> None:
    lookup = summary["baselines"]["lookup"]
    # only j3 had an entry: the median of j1's 20,000 (the orphan's 5,000 was not learned)
    assert lookup["accuracy"]["n"] == 1
    assert lookup["accuracy"]["within_10pct"] == 1.0
    assert lookup["accuracy"]["mdape"] == pytest.approx(1 / 21, abs=1e-6)
    assert lookup["accuracy"]["median_signed_error"] == pytest.approx(-1 / 21, abs=1e-6)
    assert lookup["within_10pct_abstain_as_miss"] == pytest.approx(1 / 3, abs=1e-6)
    assert lookup["comparison"]["n"] == 1
    assert lookup["comparison"]["lookup_within_10pct"] == 1.0


def test_decisions(summary: dict[str, Any], tiny_history: TinyHistory) -> None:
    catalog = tiny_history.catalog
    j1 = _cost(catalog, 1000, "H100-SXM", 20_000.0)
    j2 = _cost(catalog, 1000, "MI300X", 30_000.0)
    j3_h100 = _cost(catalog, 1000, "H100-SXM", 21_000.0)  # requested
    j3_mi300x = _cost(catalog, 1000, "MI300X", 33_000.0)  # model, lookup and best
    j4 = _cost(catalog, 10, "H100-SXM", 20_000.0)  # failed, but its steps still cost
    model = [j1, j2, j3_mi300x, j4]
    requested = [j1, j2, j3_h100, j4]
    decisions = summary["decisions"]
    assert decisions["n"] == 4
    assert decisions["top1_regret"] == 0.0
    assert decisions["lookup_top1_regret"] == 0.0
    assert decisions["requested_regret"] == pytest.approx((j3_h100 / j3_mi300x - 1) / 4, 1e-5)
    assert decisions["requested_regret"] == pytest.approx(0.153333, abs=1e-5)
    assert decisions["savings_vs_requested"] == pytest.approx(1 - sum(model) / sum(requested), 1e-5)
    assert decisions["n_vs_requested"] == 4
    assert decisions["savings_vs_lookup"] == 0.0
    assert decisions["n_vs_lookup"] == 4
    assert decisions["pairwise_total"] == 0  # scored one attempt in ten: none of four
    assert decisions["pairwise_order_accuracy"] is None


def test_daily(tiny_history: TinyHistory, tmp_path: Path) -> None:
    _run(tiny_history, tmp_path)
    daily = pd.read_csv(tmp_path / "daily.csv")
    catalog = tiny_history.catalog
    assert daily["day"].tolist() == ["2025-06-02", "2025-06-03"]
    assert daily["submissions"].tolist() == [2, 3]
    assert daily["succeeded"].tolist() == [2, 1]
    assert daily["coverage"].tolist() == [1.0, 1.0]
    assert daily["lookup_coverage"].tolist() == [0.0, 1.0]
    day2 = daily.iloc[1]
    assert day2["within_10pct"] == 1.0
    assert day2["mdape"] == pytest.approx(1 / 21, abs=1e-6)
    assert day2["top1_regret"] == 0.0
    j3_h100 = _cost(catalog, 1000, "H100-SXM", 21_000.0)
    j3_mi300x = _cost(catalog, 1000, "MI300X", 33_000.0)
    j4 = _cost(catalog, 10, "H100-SXM", 20_000.0)
    assert day2["savings_vs_requested"] == pytest.approx(
        1 - (j3_mi300x + j4) / (j3_h100 + j4), 1e-5
    )
    assert daily.iloc[0]["savings_vs_requested"] == pytest.approx(0.0, abs=1e-6)


def test_without_an_oracle_there_are_no_decisions(
    tiny_history: TinyHistory, tmp_path: Path, summary: dict[str, Any]
) -> None:
    plain = _run(tiny_history, tmp_path / "plain", oracle=None)
    assert "decisions" not in plain
    assert plain["accuracy"] == summary["accuracy"]
    assert plain["events"] == summary["events"]


def test_replays_are_deterministic(tiny_history: TinyHistory, tmp_path: Path) -> None:
    outputs = []
    for i, batch_rows in enumerate((65_536, 65_536, 3)):  # and across history batches
        out = tmp_path / f"run{i}"
        _run(tiny_history, out, batch_rows=batch_rows)
        summary = json.loads((out / "summary.json").read_text())
        assert summary.pop("events_per_second") > 0
        outputs.append((summary, (out / "daily.csv").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]


def test_report_is_written_only_when_asked(tiny_history: TinyHistory, tmp_path: Path) -> None:
    _run(tiny_history, tmp_path / "quiet")
    assert sorted(p.name for p in (tmp_path / "quiet").iterdir()) == ["daily.csv", "summary.json"]
    out = tmp_path / "reported"
    replay(
        tiny_history.history,
        out,
        tiny_history.catalog,
        oracle=tiny_history.oracle,
        progress=False,
        report=True,
    )
    html = (out / "report.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html")
    assert "history.parquet" in html  # the title names the history


def _oracle(tmp_path: Path, frame: pd.DataFrame) -> Path:
    path = tmp_path / "bad-oracle.parquet"
    write_oracle([frame], path)
    return path


def test_an_oracle_out_of_order_raises(tiny_history: TinyHistory, tmp_path: Path) -> None:
    order = ["j2", "j1", "j3", "j4", "j5"]
    swapped = TINY_ORACLE.set_index("job_id").loc[order].reset_index()
    with pytest.raises(OracleError, match=r"expected job 'j1' next .* found 'j2'"):
        _run(tiny_history, tmp_path / "out", oracle=_oracle(tmp_path, swapped))


def test_an_oracle_that_ends_early_raises(tiny_history: TinyHistory, tmp_path: Path) -> None:
    short = TINY_ORACLE[TINY_ORACLE["job_id"] != "j5"]
    with pytest.raises(OracleError, match=r"ended before job 'j5'"):
        _run(tiny_history, tmp_path / "out", oracle=_oracle(tmp_path, short))


def test_an_oracle_naming_unknown_hardware_raises(
    tiny_history: TinyHistory, tmp_path: Path
) -> None:
    renamed = TINY_ORACLE.replace({"hardware_type": {"MI300X": "MI999"}})
    with pytest.raises(OracleError, match=r"not in the catalog: \['MI999'\]"):
        _run(tiny_history, tmp_path / "out", oracle=_oracle(tmp_path, renamed))


@pytest.mark.parametrize("batch_rows", [1, 2, 1 << 20])
def test_oracle_stream_across_batches(tiny_history: TinyHistory, batch_rows: int) -> None:
    index = {name: i for i, name in enumerate(tiny_history.catalog.names)}
    stream = OracleStream(tiny_history.oracle, index, batch_rows=batch_rows)
    for job_id, rows in TINY_ORACLE.groupby("job_id", sort=False):
        vector = stream.take(str(job_id))
        assert vector.shape == (len(index),)
        expected = np.full(len(index), np.nan)
        for hardware, value in zip(rows["hardware_type"], rows["throughput"], strict=True):
            expected[index[hardware]] = value
        np.testing.assert_array_equal(vector, expected)
    with pytest.raises(OracleError, match="ended before job 'j6'"):
        stream.take("j6")


# ------------------------------------------------------------------- quarantine of bad rows

# TINY_EVENTS with six broken rows inserted: (position in the dirty file, column, event).
# Each would change the figures if it were replayed: a submission the oracle does not expect,
# or a completion that would end its attempt early.
_BROKEN = [
    (1, "precision", ("submitted", submitted_event("j6", "L4", hours(0.5), precision="bf32"))),
    (3, "throughput", ("completed", completed_event("j2", "L1", hours(2.5), "MI300X",
                                                    throughput=-5.0))),
    (7, "event_time", ("submitted", submitted_event("j7", "L5", hours(1.5)))),
    (9, "event_id", ("submitted", {**submitted_event("j8", "L6", hours(24.5)),
                                   "event_id": "j3/submitted"})),
    (11, "throughput", ("completed", completed_event("j3", "L1", hours(25.5), "H100-SXM",
                                                     throughput=99.0, status="failed"))),
    (13, "throughput", ("completed", completed_event("j4", "L2", hours(26.5), "H100-SXM",
                                                     throughput="fast"))),  # not a number
]  # fmt: skip


def _dirty_events() -> list[tuple[str, dict[str, Any]]]:
    events = list(TINY_EVENTS)
    for position, _, event in _BROKEN:
        events.insert(position, event)
    return events


@pytest.fixture
def dirty_history(tmp_path: Path) -> Path:
    path = tmp_path / "dirty.csv"
    events = _dirty_events()
    assert events[2] == TINY_EVENTS[1] and events[-1] == TINY_EVENTS[-1]
    write_csv_unchecked(events, path)
    return path


@pytest.fixture
def dirty_oracle(tmp_path: Path) -> Path:
    """The oracle of the dirty history: its rejected submissions are listed too."""
    extra = pd.DataFrame(
        [("j6", "H100-SXM", 1.0), ("j7", "H100-SXM", 1.0), ("j8", "H100-SXM", 1.0)],
        columns=TINY_ORACLE.columns,
    )
    order = ["j1", "j6", "j2", "j7", "j3", "j8", "j4", "j5"]
    frame = pd.concat([TINY_ORACLE, extra]).set_index("job_id").loc[order].reset_index()
    path = tmp_path / "dirty-oracle.parquet"
    write_oracle([frame], path)
    return path


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in ("events_per_second", "rejects")}


def test_a_dirty_history_replays_without_its_bad_rows(
    tiny_history: TinyHistory, tmp_path: Path, dirty_history: Path, dirty_oracle: Path
) -> None:
    clean = _run(tiny_history, tmp_path / "clean")
    out = tmp_path / "dirty"
    dirty = _run(tiny_history, out, history=dirty_history, oracle=dirty_oracle)

    assert _figures(dirty) == _figures(clean)
    assert (out / "daily.csv").read_bytes() == (tmp_path / "clean" / "daily.csv").read_bytes()
    rejects = pd.read_csv(out / "rejects.csv")
    assert rejects.columns.tolist() == ["row", "column", "reason"]
    assert list(zip(rejects["row"], rejects["column"], strict=True)) == [
        (position, column) for position, column, _ in _BROKEN
    ]
    assert rejects["reason"].iloc[0] == "'bf32' is not one of fp32|bf16|fp16|fp8"
    assert rejects["reason"].iloc[3] == "'j3/submitted' repeats row 8"
    assert rejects["reason"].iloc[5] == "'fast' is not a valid double"
    written = json.loads((out / "summary.json").read_text())
    by_column = {"event_id": 1, "event_time": 1, "precision": 1, "throughput": 3}
    expected = {"rows": 6, "by_column": by_column}
    assert dirty["rejects"] == written["rejects"] == expected


def test_a_clean_replay_has_an_empty_rejects_block_and_no_rejects_file(
    tiny_history: TinyHistory, tmp_path: Path, dirty_history: Path
) -> None:
    out = tmp_path / "out"
    _run(tiny_history, out, history=dirty_history, oracle=None)
    assert (out / "rejects.csv").exists()
    summary = _run(tiny_history, out)  # a clean history into the same directory
    assert summary["rejects"] == {"rows": 0, "by_column": {}}
    assert not (out / "rejects.csv").exists()  # the previous run's is gone


def test_strict_stops_at_the_first_bad_row(
    tiny_history: TinyHistory, tmp_path: Path, dirty_history: Path
) -> None:
    out = tmp_path / "out"
    # the first broken row, though values that do not cast (row 13's) are checked first
    with pytest.raises(HistoryError, match=r"dirty\.csv row 1, column 'precision': 'bf32'"):
        _run(tiny_history, out, history=dirty_history, strict=True)
    assert not (out / "rejects.csv").exists()
    assert not (out / "summary.json").exists()


def test_an_attempt_without_steps_has_no_decision_figures(
    tiny_history: TinyHistory, tmp_path: Path, summary: dict[str, Any]
) -> None:
    events = [
        (
            kind,
            {**event, "steps": None} if (kind, event["job_id"]) == ("completed", "j4") else event,
        )
        for kind, event in TINY_EVENTS
    ]
    history = tmp_path / "no-steps.parquet"
    write_history([events_to_table(events)], history)
    got = _run(tiny_history, tmp_path / "out", history=history)

    assert got["decisions"]["n"] == 3  # j4 is not priced
    assert got["decisions"]["n_vs_requested"] == 3
    j3_h100 = _cost(tiny_history.catalog, 1000, "H100-SXM", 21_000.0)
    j3_mi300x = _cost(tiny_history.catalog, 1000, "MI300X", 33_000.0)
    assert got["decisions"]["requested_regret"] == pytest.approx(
        (j3_h100 / j3_mi300x - 1) / 3, 1e-5
    )
    # everything else is scored as before
    unchanged = ("events", "attempts", "succeeded", "coverage", "accuracy", "intervals")
    for key in (*unchanged, "coverage_gpu_hours", "baselines", "state"):
        assert got[key] == summary[key], key


# ------------------------------------------------------------------- the oracle's ceiling


def test_oracle_ceiling_scores_the_oracle_against_what_was_measured(
    tiny_history: TinyHistory, tmp_path: Path
) -> None:
    # the oracle's expected throughput where each attempt ran: j1 +5%, j2 +25%, j3 0%
    expected = {("j1", "H100-SXM"): 21_000.0, ("j2", "MI300X"): 37_500.0}
    frame = TINY_ORACLE.copy()
    frame["throughput"] = [
        expected.get((job, hw), value)
        for job, hw, value in frame.itertuples(index=False, name=None)
    ]
    got = _run(tiny_history, tmp_path / "out", oracle=_oracle(tmp_path, frame))
    ceiling = got["oracle_ceiling"]
    assert ceiling["n"] == 3
    assert ceiling["within_10pct"] == pytest.approx(2 / 3, abs=1e-6)
    assert ceiling["within_20pct"] == pytest.approx(2 / 3, abs=1e-6)
    assert ceiling["mdape"] == pytest.approx(0.05, abs=1e-6)
    assert ceiling["by_source"]["lineage_prior"]["mdape"] == 0.0  # j3: 21,000 both
    # the ceiling is computed on the very attempts each by-source row scores
    assert {s: b["n"] for s, b in ceiling["by_source"].items()} == {
        s: b["n"] for s, b in got["by_source"].items()
    }


def test_without_an_oracle_there_is_no_ceiling(tiny_history: TinyHistory, tmp_path: Path) -> None:
    assert "oracle_ceiling" not in _run(tiny_history, tmp_path / "out", oracle=None)


# ------------------------------------------------------------------ a pick that cannot run


@pytest.mark.parametrize("j3_ran", ["H100-SXM", "MI300X"])
def test_a_first_choice_that_cannot_run_is_charged(
    tiny_history: TinyHistory, tmp_path: Path, j3_ran: str
) -> None:
    """j3's first choice (MI300X, for the model and the lookup) does not fit in truth.

    Each policy is charged the failed try on MI300X, then runs on its next choice, H100-SXM:
    15 minutes on 8 MI300X when j3 ran on H100-SXM, its measured 2 hours to failure when j3
    itself ran on MI300X and failed there.
    """
    oracle = TINY_ORACLE.copy()
    oracle.loc[(oracle["job_id"] == "j3") & (oracle["hardware_type"] == "MI300X"), "throughput"] = (
        None
    )
    events = list(TINY_EVENTS)
    if j3_ran == "MI300X":
        events = [
            (kind, completed_event("j3", "L1", hours(26), "MI300X", throughput=None,
                                   status="failed"))
            if (kind, event["job_id"]) == ("completed", "j3") else (kind, event)
            for kind, event in events
        ]  # fmt: skip
    history = tmp_path / "history.parquet"
    write_history([events_to_table(events)], history)
    got = _run(tiny_history, tmp_path / "out", history=history, oracle=_oracle(tmp_path, oracle))

    catalog = tiny_history.catalog
    failed_hours = UNRUNNABLE_PICK_HOURS if j3_ran == "H100-SXM" else 2.0
    wasted = DEVICES * catalog["MI300X"].price_per_device_hour * failed_hours
    j3_h100 = _cost(catalog, 1000, "H100-SXM", 21_000.0)  # the next choice, and the best
    decisions = got["decisions"]
    assert decisions["unrunnable_picks"] == 1
    assert decisions["lookup_unrunnable_picks"] == 1
    assert decisions["unrunnable_pick_hours"] == UNRUNNABLE_PICK_HOURS
    assert decisions["n"] == 4
    assert decisions["top1_regret"] == pytest.approx((wasted / j3_h100) / 4, 1e-5)
    assert decisions["lookup_top1_regret"] == decisions["top1_regret"]
    assert decisions["requested_regret"] == 0.0  # j3 asked for H100-SXM, the cheapest that runs
    j1 = _cost(catalog, 1000, "H100-SXM", 20_000.0)
    j2 = _cost(catalog, 1000, "MI300X", 30_000.0)
    j4 = _cost(catalog, 10, "H100-SXM", 20_000.0)
    requested = j1 + j2 + j3_h100 + j4
    assert decisions["savings_vs_requested"] == pytest.approx(-wasted / requested, 1e-4)
    assert decisions["by_source"]["lineage_prior"]["unrunnable_picks"] == 1  # j3's pick


# ------------------------------------------------------------------ held-out hardware

# L1 on MI300X only: a failure (j1), then three successes. With MI300X held out for its first
# scored attempt, j1 and j2 are never learned: j3 is then no repeat (no lineage prior, nothing
# in the lookup table), and only j4 repeats j3.
_HOLDOUT_EVENTS = [
    ("submitted", submitted_event("j1", "L1", hours(0), candidates=["MI300X"])),
    ("completed", completed_event("j1", "L1", hours(1), "MI300X", throughput=None,
                                  status="failed")),
    ("submitted", submitted_event("j2", "L1", hours(2), candidates=["MI300X"])),
    ("completed", completed_event("j2", "L1", hours(3), "MI300X", throughput=30_000.0)),
    ("submitted", submitted_event("j3", "L1", hours(4), candidates=["MI300X"])),
    ("completed", completed_event("j3", "L1", hours(5), "MI300X", throughput=31_000.0)),
    ("submitted", submitted_event("j4", "L1", hours(6), candidates=["MI300X"])),
    ("completed", completed_event("j4", "L1", hours(7), "MI300X", throughput=30_500.0)),
]  # fmt: skip


@pytest.fixture
def holdout_history(tmp_path: Path) -> Path:
    path = tmp_path / "holdout.parquet"
    write_history([events_to_table(_HOLDOUT_EVENTS)], path)
    return path


def test_held_out_hardware_is_not_learned_until_its_first_attempts_are_scored(
    tiny_history: TinyHistory, tmp_path: Path, holdout_history: Path
) -> None:
    catalog = tiny_history.catalog
    learned = replay(holdout_history, tmp_path / "all", catalog, progress=False, report=False)
    held = replay(
        holdout_history,
        tmp_path / "held",
        catalog,
        progress=False,
        report=False,
        holdout_hardware=["MI300X"],
        holdout_first=1,
    )
    assert "holdout" not in learned
    # learning from everything: j3 and j4 repeat what L1 measured, the lookup predicts both
    assert learned["by_source"]["lineage_prior"]["n"] == 2
    assert learned["baselines"]["lookup"]["accuracy"]["n"] == 2
    # held out: j2 (the first scored attempt) is predicted cold and never learned, nor is j1
    assert held["by_source"]["lineage_prior"]["n"] == 1  # j4, from j3
    assert held["baselines"]["lookup"]["accuracy"]["n"] == 1  # j4
    block = held["holdout"]
    assert (block["hardware"], block["first"], block["n"]) == (["MI300X"], 1, 1)
    assert block["withheld_completions"] == 2  # j1 (failed: not scored) and j2
    assert block["model"]["n"] == 1
    assert sum(block["model_sources"].values()) == 1
    assert block["lookup"]["n"] == 0 and block["lookup"]["within_10pct_abstain_as_miss"] == 0.0
    assert "lineage_prior" not in block["model_sources"]
    assert held["events"]["unmatched_completions"] == 0


def test_a_held_out_completion_leaves_no_pending_submission(
    tiny_history: TinyHistory,
) -> None:
    session = _Session(tiny_history.catalog, None, ["MI300X"], 1)
    for kind, event in _HOLDOUT_EVENTS[:4]:
        (session.submitted if kind == "submitted" else session.completed)(event)
    assert session.core.pending == {} and session.lookup.pending == {}
    assert session.core.priors == {}  # not even the lineage's prior heard of j2
    assert len(session.lookup.table) == 0
    assert session.holdout_left == {"MI300X": 0}


def test_holdout_arguments_are_checked(tiny_history: TinyHistory, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not in the catalog: MI999"):
        _run(tiny_history, tmp_path / "a", holdout_hardware=["MI999"])
    with pytest.raises(ValueError, match="holdout_first must be >= 1"):
        _run(tiny_history, tmp_path / "b", holdout_hardware=["MI300X"], holdout_first=0)
    with pytest.raises(ValueError, match="needs the in-process core"):
        _run(tiny_history, tmp_path / "c", holdout_hardware=["MI300X"], rankings=lambda e: e)


def test_the_replay_command_holds_hardware_out_and_prints_by_source(
    tiny_history: TinyHistory, tmp_path: Path, holdout_history: Path
) -> None:
    runner = CliRunner()
    out = tmp_path / "out"
    args = ["replay", str(holdout_history), "--out", str(out), "--no-report"]
    result = runner.invoke(cli.app, [*args, "--holdout-hardware", "MI300X", "--holdout-first", "1"])
    assert result.exit_code == 0, result.output
    assert "accuracy by prediction source" in result.output
    assert "lineage prior" in result.output
    assert "held-out hardware (MI300X)" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["holdout"]["first"] == 1 and summary["holdout"]["n"] == 1

    default = runner.invoke(cli.app, [*args, "--holdout-hardware", "MI300X,H100-SXM"])
    assert default.exit_code == 0, default.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["holdout"]["first"] == 20  # the documented default
    assert summary["holdout"]["hardware"] == ["H100-SXM", "MI300X"]
    assert summary["holdout"]["n"] == 3  # fewer than 20: every scored MI300X attempt

    for bad, message in (
        (["--holdout-hardware", "MI999"], "not in the catalog: MI999"),
        (["--holdout-first", "3"], "--holdout-first needs --holdout-hardware"),
    ):
        failed = runner.invoke(cli.app, [*args, *bad])
        assert failed.exit_code == 2 and message in failed.stderr
