"""Tests of leap_stream.backtest.report:

one self-contained page with the headline figures and plots.
"""

from __future__ import annotations

import base64
import re
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from leap_stream.backtest.metrics import AttemptOutcome, Backtest
from leap_stream.backtest.report import _calendar, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _backtest(oracle: bool) -> Backtest:
    """Four measured successes over two days.

    Model errors 5%, 5%, 5%, 30% (within 10%: 75.0%); the lookup table predicts two of them
    (5% and 30%: 50.0%, or 25.0% with abstentions as misses); interval coverage 3 of 4. The
    first two are lineage priors, the last two transfers. With an oracle, the oracle expects
    102 on the first three and 112 on the last (2%, 2%, 2%, 12% off: within 10% 75.0%); the
    model's picks were lineage priors, the last one a transfer pick that could not run.
    """
    bt = Backtest(interval_level=0.9)
    cases = [
        (date(2025, 5, 1), 105.0, 100.0, 100.0),
        (date(2025, 5, 1), 105.0, 100.0, None),
        (date(2025, 5, 2), 95.0, 100.0, 130.0),
        (date(2025, 5, 2), 130.0, 100.0, None),
    ]
    for i, (day, predicted, actual, lookup) in enumerate(cases):
        costs: dict[str, Any] = (
            {
                "cost_model": 11.0,
                "cost_lookup": 12.0,
                "cost_requested": 20.0,
                "cost_best": 10.0,
                "oracle_predicted": 112.0 if i == 3 else 102.0,
                "model_pick_source": "transfer" if i == 3 else "lineage_prior",
                "model_pick_unrunnable": i == 3,
            }
            if oracle
            else {}
        )
        bt.observe_submission(day, True, True, lookup is not None)
        bt.observe(
            AttemptOutcome(
                day=day,
                family="cnn",
                hardware="MI300X",
                status="succeeded",
                actual=actual,
                model_predicted=predicted,
                model_lower=predicted * 0.9,
                model_upper=predicted * 1.1,
                model_source="lineage_prior" if i < 2 else "transfer",
                lookup_predicted=lookup,
                has_eligible=True,
                model_ranked=True,
                lookup_ranked=lookup is not None,
                device_hours=2.0,
                **costs,
            )
        )
    return bt


def _write(tmp_path: Path, bt: Backtest, title: str = "leap-stream backtest") -> str:
    path = tmp_path / "report.html"
    write_report(
        path,
        bt.summary({"submitted": 4, "completed": 4}, events_per_second=25_000.0),
        bt.daily(),
        bt.by_hardware(),
        bt.by_family(),
        bt.calibration(),
        title=title,
    )
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # one file, nothing beside it
    return path.read_text(encoding="utf-8")


def _cells(page: str, label: str) -> list[str]:
    """The value cells of the table row whose first cell is ``label``."""
    match = re.search(rf"<tr><td>{re.escape(label)}</td>(.*?)</tr>", page)
    assert match, f"no row {label!r}"
    return re.findall(r"<td>(.*?)</td>", match.group(1))


@pytest.mark.parametrize(("oracle", "plots"), [(True, 7), (False, 6)])
def test_page_has_the_headline_figures_and_one_image_per_plot(
    tmp_path: Path, oracle: bool, plots: int
) -> None:
    page = _write(tmp_path, _backtest(oracle))
    assert _cells(page, "Within 10%") == ["75.0%", "50.0%"]
    assert _cells(page, "Within 10%, abstention = miss") == ["75.0%", "25.0%"]
    assert _cells(page, "Advantage, abstention = miss") == ["+50.0 pts", "—"]
    assert _cells(page, "Coverage") == ["100.0%", "50.0%"]
    assert _cells(page, "Interval coverage (nominal 90%)") == ["75.0%", "—"]
    assert "25,000 events/s" in page
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == page.count("<img ") == plots
    assert all(base64.b64decode(image).startswith(PNG_SIGNATURE) for image in images)
    assert ("Top-1 regret" in page) is oracle
    if oracle:
        assert _cells(page, "Top-1 regret") == ["10.0%", "20.0%", "100.0%"]
        assert _cells(page, "Savings vs the user's request")[0] == "45.0%"  # 1 - 44 / 80


def test_page_references_nothing_outside_itself(tmp_path: Path) -> None:
    page = _write(tmp_path, _backtest(oracle=True))
    sources = re.findall(r'src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    for forbidden in ("href=", "<script", "<link", "url(", "@import", "http://", "https://"):
        assert forbidden not in page


def test_names_with_a_dollar_sign_are_drawn_as_text(tmp_path: Path) -> None:
    bt = Backtest(interval_level=0.9)
    for family in ("vit$_{$x", "vit $5-$10 budget"):  # mathtext, were it parsed: an error
        bt.observe_submission(date(2025, 5, 1), True, True, False)
        bt.observe(
            AttemptOutcome(
                day=date(2025, 5, 1), family=family, hardware="H100$x$", status="succeeded",
                actual=100.0, model_predicted=105.0, model_lower=90.0, model_upper=110.0,
                model_source="model", lookup_predicted=None, has_eligible=True,
                model_ranked=True, lookup_ranked=False, device_hours=1.0,
            )
        )  # fmt: skip
    page = _write(tmp_path, bt)
    assert page.count("<img ") >= 4


def test_a_day_without_data_breaks_the_lines_rather_than_joining_them() -> None:
    daily = pd.DataFrame({"day": [date(2025, 5, 1), date(2025, 5, 2), date(2025, 5, 5)],
                          "model_within_10pct": [0.5, 0.6, 0.7]})  # fmt: skip
    calendar = _calendar(daily)
    assert [d.day for d in calendar["day"]] == [1, 2, 3, 4, 5]
    assert calendar["model_within_10pct"].isna().tolist() == [False, False, True, True, False]


def test_title_is_escaped(tmp_path: Path) -> None:
    page = _write(tmp_path, _backtest(oracle=False), title="fleet <east> & west")
    assert "<h1>fleet &lt;east&gt; &amp; west</h1>" in page
    assert "<east>" not in page


def test_empty_backtest_still_writes_a_page(tmp_path: Path) -> None:
    page = _write(tmp_path, Backtest())
    assert "<img " not in page
    assert page.count("Nothing to plot") == 6
    assert _cells(page, "Within 10%") == ["—", "—"]


@pytest.mark.parametrize("oracle", [True, False])
def test_accuracy_by_source_beside_the_oracle_ceiling(tmp_path: Path, oracle: bool) -> None:
    page = _write(tmp_path, _backtest(oracle))
    assert "<h2>Accuracy by prediction source</h2>" in page
    ceiling = ["75.0%", "2.0%"] if oracle else []
    # n, share, within 10%, within 20%, MdAPE, interval coverage[, oracle within 10%, MdAPE]
    assert _cells(page, "All") == ["4", "100%", "75.0%", "75.0%", "5.0%", "75.0%", *ceiling]
    prior = ["100.0%", "2.0%"] if oracle else []
    assert _cells(page, "lineage prior") == ["2", "50.0%", "100.0%", "100.0%", "5.0%",
                                             "100.0%", *prior]  # fmt: skip
    transfer = ["50.0%", "7.0%"] if oracle else []
    assert _cells(page, "transfer") == ["2", "50.0%", "50.0%", "50.0%", "17.5%", "50.0%",
                                        *transfer]  # fmt: skip
    assert page.index("lineage prior") < page.index("<td>transfer")  # the core's order
    assert ("Oracle within 10%" in page) is oracle


def test_decisions_count_unrunnable_picks_and_file_them_by_source(tmp_path: Path) -> None:
    page = _write(tmp_path, _backtest(oracle=True))
    assert _cells(page, "First choices that cannot run") == ["1", "0", "—"]
    table = page[page.index("Source of the top pick") :]
    assert re.search(
        r"<tr><td>transfer</td><td>1</td><td>10.0%</td><td>45.0%</td><td>1</td>", table
    )
    assert re.search(r"<tr><td>lineage prior</td><td>3</td>", table)


def test_held_out_hardware_gets_its_own_section(tmp_path: Path) -> None:
    bt = _backtest(oracle=True)
    summary = bt.summary({"submitted": 4, "completed": 4}, events_per_second=1.0)
    assert "holdout" not in summary
    summary["holdout"] = {
        "hardware": ["B300"],
        "first": 20,
        "n": 20,
        "model": {"n": 20, "within_10pct_abstain_as_miss": 0.35,
                  "within_20pct_abstain_as_miss": 0.6, "mdape": 0.14},
        "lookup": {"n": 0, "within_10pct_abstain_as_miss": 0.0,
                   "within_20pct_abstain_as_miss": 0.0, "mdape": None},
    }  # fmt: skip
    path = tmp_path / "report.html"
    write_report(path, summary, bt.daily(), bt.by_hardware(), bt.by_family(), bt.calibration())
    page = path.read_text(encoding="utf-8")
    assert "<h2>Held-out hardware</h2>" in page and "Completions on B300" in page
    assert _cells(page, "Model") == ["20", "35.0%", "60.0%", "14.0%"]
    assert _cells(page, "Lookup table") == ["0", "0.0%", "0.0%", "—"]
