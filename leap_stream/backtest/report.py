"""The backtest report: one self-contained HTML page a fleet operator can read.

A headline table of the summary (model against the lookup-table baseline), the model's accuracy
by prediction source (beside the oracle's noise ceiling when the replay had an oracle), a table of
decision figures when the replay had an oracle, the held-out hardware's figures when the replay
held some out, then plots, each a PNG embedded as a base64 ``data:`` URI
(no external file, script, font or link) with a caption saying how to read it. Figures are drawn
on matplotlib's Agg canvas directly, so no pyplot state or GUI backend is involved.
``docs/metrics.md`` explains every figure.

>>> import tempfile
>>> from datetime import date
>>> from pathlib import Path
>>> from leap_stream.backtest.metrics import AttemptOutcome, Backtest
>>> bt = Backtest()
>>> bt.observe_submission(date(2025, 1, 1), True, True, True)
>>> bt.observe(AttemptOutcome(date(2025, 1, 1), "cnn", "MI300X", "succeeded", 105.0, 100.0,
...                           90.0, 110.0, "model", 120.0, True, True, True, 8.0))
>>> with tempfile.TemporaryDirectory() as tmp:
...     page = Path(tmp) / "report.html"
...     write_report(page, bt.summary({"submitted": 1}, 1.0), bt.daily(), bt.by_hardware(),
...                  bt.by_family(), bt.calibration())
...     html = page.read_text()
>>> html.count("<img ")  # six plots: without an oracle there is no cost plot
6
>>> "<td>Within 10%</td><td>100.0%</td><td>0.0%</td>" in html  # 105 vs 100; 120 vs 100
True
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from leap_stream.backtest.metrics import source_label
from leap_stream.core.ranking import SOURCES

__all__ = ["blank_figure", "embedded", "html_page", "write_report"]

MODEL_COLOR = "#1f77b4"
LOOKUP_COLOR = "#ff7f0e"
EXTRA_COLOR = "#7f7f7f"
ORACLE_COLOR = "#222222"
# Daily shares are noisy on quiet days; past this many days a 7-day rolling mean is drawn over
# the faint daily line so the trend reads at a glance.
_SMOOTH_AFTER_DAYS = 28
_WINDOW = 7
_DPI = 100
_DASH = "—"

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1000px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.6em; font-size: 1.25em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.95em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.note { text-align: left; color: #666; font-size: 0.9em; }
thead th { background: #f4f4f4; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; }
figcaption { color: #444; font-size: 0.92em; max-width: 900px; }
p.muted { color: #666; }
"""


def write_report(
    path: Path,
    summary: Mapping[str, Any],
    daily: pd.DataFrame,
    by_hardware: pd.DataFrame,
    by_family: pd.DataFrame,
    calibration: pd.DataFrame,
    title: str = "leap-stream backtest",
    nightly: pd.DataFrame | None = None,
) -> None:
    """Write the backtest report as one self-contained HTML file.

    Parameters
    ----------
    path
        Where to write the page (its parent directory must exist).
    summary
        :meth:`leap_stream.backtest.metrics.Backtest.summary`.
    daily, by_hardware, by_family, calibration
        The matching :class:`~leap_stream.backtest.metrics.Backtest` tables.
    title
        The page's heading.
    nightly
        ``replay --nightly``'s table (``nightly.csv``; the summary then has a ``nightly``
        block): a section with the models' means, what served, and accuracy per night.

    Examples
    --------
    See the module docstring.
    """
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="muted">{_run_line(summary)}</p>',
        "<h2>Headline figures</h2>",
        _headline_table(summary),
    ]
    if summary.get("by_source"):
        sections += ["<h2>Accuracy by prediction source</h2>", _by_source_table(summary)]
    if "decisions" in summary:
        sections += ["<h2>Decisions (scored with the oracle's true throughput)</h2>"]
        sections += [_decisions_table(summary["decisions"])]
        if summary["decisions"].get("by_source"):
            sections += [_decisions_by_source_table(summary["decisions"])]
    if summary.get("holdout"):
        sections += ["<h2>Held-out hardware</h2>", _holdout_table(summary["holdout"])]
    if nightly is not None and summary.get("nightly"):
        sections += _nightly_section(summary["nightly"], nightly)
    sections.append("<h2>Plots</h2>")
    nominal = summary.get("intervals", {}).get("nominal", math.nan)
    plots: list[tuple[str, Callable[[], Figure | None], str]] = [
        ("Accuracy over time", lambda: _accuracy_plot(daily), _ACCURACY_CAPTION),
        ("Coverage over time", lambda: _coverage_plot(daily), _COVERAGE_CAPTION),
        (
            "Interval calibration",
            lambda: _calibration_plot(calibration, nominal),
            _CALIBRATION_CAPTION,
        ),
        (
            "Error by hardware type",
            lambda: _breakdown_plot(by_hardware, "hardware"),
            _HARDWARE_CAPTION,
        ),
        ("Error by model family", lambda: _breakdown_plot(by_family, "family"), _FAMILY_CAPTION),
        ("Accuracy by prediction source", lambda: _source_plot(summary), _SOURCE_CAPTION),
    ]
    if "decisions" in summary:
        plots.append(("Cost savings over time", lambda: _savings_plot(daily), _SAVINGS_CAPTION))
    for heading, draw, caption in plots:
        sections.append(f"<h3>{heading}</h3>")
        figure = draw()
        if figure is None:
            sections.append('<p class="muted">Nothing to plot: no attempt has these figures.</p>')
            continue
        sections.append(embedded(figure, heading, caption))
    Path(path).write_text(html_page(title, sections), encoding="utf-8")


def html_page(title: str, sections: Sequence[str]) -> str:
    """A self-contained page: ``title``, the report's style, the ``sections`` (HTML)."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def embedded(figure: Figure, alt: str, caption: str) -> str:
    """``figure`` as an inline PNG with its (HTML) caption."""
    alt = html.escape(alt, quote=True)
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{_png(figure)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


# -- tables ------------------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return _DASH
    return f"{100.0 * value:.{digits}f}%"


def _signed_pct(value: float | None) -> str:
    return _DASH if value is None else f"{100.0 * value:+.1f}%".replace("-", "−")


def _count(value: int | None) -> str:
    return _DASH if value is None else f"{value:,}"


def _run_line(summary: Mapping[str, Any]) -> str:
    events = summary.get("events", {})
    parts = [f"{_count(v)} {html.escape(str(k))} events" for k, v in events.items()]
    parts += [
        f"{_count(summary.get('submissions'))} submissions",
        f"{_count(summary.get('attempts'))} completed attempts",
        f"{_count(summary.get('succeeded'))} succeeded",
        f"replayed at {summary.get('events_per_second', 0):,.0f} events/s",
    ]
    return " · ".join(parts)


def _row(label: str, model: str, lookup: str, note: str) -> str:
    return f'<tr><td>{label}</td><td>{model}</td><td>{lookup}</td><td class="note">{note}</td></tr>'


def _headline_table(s: Mapping[str, Any]) -> str:
    acc = s["accuracy"]
    lookup = s["baselines"]["lookup"]
    lacc = lookup["accuracy"]
    cmp_ = lookup["comparison"]
    iv = s["intervals"]
    advantage = cmp_["advantage_abstain_as_miss_points"]
    rows = [
        _row(
            "Coverage",
            _pct(s["coverage"]),
            _pct(lookup["coverage"]),
            "submissions with an eligible candidate that got a ranking",
        ),
        _row(
            "Coverage, device-hour weighted",
            _pct(s["coverage_gpu_hours"]),
            _pct(lookup["coverage_gpu_hours"]),
            "the same, each completed attempt weighted by its device-hours",
        ),
        _row(
            "Within 10%",
            _pct(acc["within_10pct"]),
            _pct(lacc["within_10pct"]),
            f"succeeded attempts each predicted (n = {_count(acc['n'])} model, "
            f"{_count(lacc['n'])} lookup): |predicted − actual| ≤ 10% of actual",
        ),
        _row(
            "Within 20%",
            _pct(acc["within_20pct"]),
            _pct(lacc["within_20pct"]),
            "as above, 20% band",
        ),
        _row(
            "Within 10%, abstention = miss",
            _pct(acc["within_10pct_abstain_as_miss"]),
            _pct(lookup["within_10pct_abstain_as_miss"]),
            "over all measured successes; no prediction counts as a miss",
        ),
        _row(
            "Median absolute % error (MdAPE)",
            _pct(acc["mdape"]),
            _pct(lacc["mdape"]),
            "half of the predictions are closer than this",
        ),
        _row(
            "Mean absolute % error (MAPE)",
            _pct(acc["mape"]),
            _pct(lacc["mape"]),
            "pulled up by a few large misses",
        ),
        _row(
            "Median signed error",
            _signed_pct(acc["median_signed_error"]),
            _signed_pct(lacc["median_signed_error"]),
            "+ over-predicts, − under-predicts",
        ),
        _row(
            "Within 10%, both predicted",
            _pct(cmp_["model_within_10pct"]),
            _pct(cmp_["lookup_within_10pct"]),
            f"the {_count(cmp_['n'])} attempts both predicted: a like-for-like comparison",
        ),
        _row(
            "Advantage, abstention = miss",
            _DASH if advantage is None else f"{advantage:+.1f} pts".replace("-", "−"),
            _DASH,
            "model minus lookup within-10% share, percentage points",
        ),
        _row(
            f"Interval coverage (nominal {_pct(iv['nominal'], 0)})",
            _pct(iv["coverage"]),
            _DASH,
            f"measured throughput inside the model's interval (n = {_count(iv['n'])})",
        ),
        _row(
            "Median interval width",
            _pct(iv["median_relative_width"]),
            _DASH,
            "(upper − lower) / predicted: narrower is more useful, if coverage holds",
        ),
    ]
    head = "<thead><tr><th>Figure</th><th>Model</th><th>Lookup table</th><th></th></tr></thead>"
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>"


def _decisions_table(d: Mapping[str, Any]) -> str:
    head = (
        "<thead><tr><th>Figure</th><th>Model</th><th>Lookup table</th>"
        "<th>User's request</th><th></th></tr></thead>"
    )

    def row(label: str, a: str, b: str, c: str, note: str) -> str:
        return (
            f"<tr><td>{label}</td><td>{a}</td><td>{b}</td><td>{c}</td>"
            f'<td class="note">{note}</td></tr>'
        )

    rows = [
        row(
            "Top-1 regret",
            _pct(d["top1_regret"]),
            _pct(d["lookup_top1_regret"]),
            _pct(d["requested_regret"]),
            "mean extra cost of the pick over the truly cheapest eligible hardware "
            f"(n = {_count(d['n'])})",
        ),
        row(
            "Savings vs the user's request",
            _pct(d["savings_vs_requested"]),
            _DASH,
            _DASH,
            f"1 − model cost / requested cost, summed (n = {_count(d['n_vs_requested'])})",
        ),
        row(
            "Savings vs the lookup table",
            _pct(d["savings_vs_lookup"]),
            _DASH,
            _DASH,
            f"1 − model cost / lookup cost, summed (n = {_count(d['n_vs_lookup'])})",
        ),
        row(
            "Pairwise order accuracy",
            _pct(d["pairwise_order_accuracy"]),
            _DASH,
            _DASH,
            f"candidate pairs ranked in their true cost order "
            f"({_count(d['pairwise_total'])} pairs)",
        ),
    ]
    if "unrunnable_picks" in d:
        hours = d.get("unrunnable_pick_hours")
        charge = "a fixed time on it" if hours is None else f"{60 * hours:g} minutes on it"
        rows.append(
            row(
                "First choices that cannot run",
                _count(d["unrunnable_picks"]),
                _count(d.get("lookup_unrunnable_picks")),
                _DASH,
                f"attempts whose first choice does not run the job in truth: charged {charge} "
                "(or the measured time to failure), plus the next runnable choice",
            )
        )
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>"


def _source_rows(by_source: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(source, label, figures) per prediction source present, in the core's order."""
    return [(s, source_label(s), by_source[s]) for s in SOURCES if s in by_source]


def _by_source_table(s: Mapping[str, Any]) -> str:
    ceiling = s.get("oracle_ceiling")
    oracle_by_source = (ceiling or {}).get("by_source", {})
    head = (
        "<thead><tr><th>Source</th><th>n</th><th>Share</th><th>Within 10%</th>"
        "<th>Within 20%</th><th>MdAPE</th><th>Interval coverage</th>"
        + ("<th>Oracle within 10%</th><th>Oracle MdAPE</th>" if ceiling else "")
        + "</tr></thead>"
    )

    def row(label: str, f: Mapping[str, Any], coverage: Any, oracle: Any, share: str) -> str:
        cells = [
            _count(f.get("n")),
            share,
            _pct(f.get("within_10pct")),
            _pct(f.get("within_20pct")),
            _pct(f.get("mdape")),
            _pct(coverage),
        ]
        if ceiling:
            cells += [_pct((oracle or {}).get("within_10pct")), _pct((oracle or {}).get("mdape"))]
        return (
            f"<tr><td>{html.escape(label)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        )

    rows = [row("All", s["accuracy"], s["intervals"]["coverage"], ceiling, _pct(1.0, 0))]
    for source, label, figures in _source_rows(s["by_source"]):
        rows.append(
            row(
                label,
                figures,
                figures.get("interval_coverage"),
                oracle_by_source.get(source),
                _pct(figures.get("share")),
            )
        )
    note = (
        '<p class="muted">Each scored attempt is filed under the source of the model\'s '
        "prediction for the hardware it ran on: <b>lineage prior</b>, the training job ran "
        "there before; <b>transfer</b>, it ran on other hardware only; <b>first attempt "
        "(model)</b>, it had not run anywhere yet; <b>cold start</b>, the model has seen too "
        "little of that hardware or model type."
        + (
            " <b>Oracle</b>: the fleet's noise-free throughput for the same attempts against "
            "what they measured, the ceiling run-to-run noise leaves: read each gap against it."
            if ceiling
            else ""
        )
        + "</p>"
    )
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>{note}"


def _decisions_by_source_table(d: Mapping[str, Any]) -> str:
    head = (
        "<thead><tr><th>Source of the top pick</th><th>n</th><th>Top-1 regret</th>"
        "<th>Savings vs request</th><th>First choices that cannot run</th></tr></thead>"
    )
    rows = [
        f"<tr><td>{html.escape(label)}</td><td>{_count(f.get('n'))}</td>"
        f"<td>{_pct(f.get('top1_regret'))}</td><td>{_pct(f.get('savings_vs_requested'))}</td>"
        f"<td>{_count(f.get('unrunnable_picks'))}</td></tr>"
        for _, label, f in _source_rows(d["by_source"])
    ]
    note = (
        '<p class="muted">The decisions above, filed by the source of the model\'s prediction '
        "for the hardware it put first.</p>"
    )
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>{note}"


def _holdout_table(h: Mapping[str, Any]) -> str:
    head = (
        "<thead><tr><th>Policy</th><th>Predicted</th><th>Within 10%</th><th>Within 20%</th>"
        "<th>MdAPE</th></tr></thead>"
    )
    rows = []
    for key, label in (("model", "Model"), ("lookup", "Lookup table"), ("oracle", "Oracle")):
        f = h.get(key)
        if f is None:
            continue
        rows.append(
            f"<tr><td>{label}</td><td>{_count(f.get('n'))}</td>"
            f"<td>{_pct(f.get('within_10pct_abstain_as_miss'))}</td>"
            f"<td>{_pct(f.get('within_20pct_abstain_as_miss'))}</td>"
            f"<td>{_pct(f.get('mdape'))}</td></tr>"
        )
    types = ", ".join(html.escape(t) for t in h.get("hardware", []))
    note = (
        f'<p class="muted">Completions on {types or "the held-out types"} taught neither the '
        f"model nor the lookup table until each type's first {_count(h.get('first'))} scored "
        f"attempts had been predicted: these {_count(h.get('n'))} attempts score cold hardware "
        "as a new accelerator meets it. Shares are over all of them, an abstention counting "
        "as a miss; MdAPE over the attempts each policy predicted.</p>"
    )
    return f"<table>{head}<tbody>{''.join(rows)}</tbody></table>{note}"


_NIGHTLY_LABELS = {
    "online": "online model",
    "river_batch": "river, batch retrain",
    "lightgbm": "LightGBM, batch retrain",
    "ensemble": "ensemble (mean of the three)",
    "lookup": "lookup table",
}
_NIGHTLY_STYLE = {
    "online": (MODEL_COLOR, "-"),
    "river_batch": ("#2ca02c", "-"),
    "lightgbm": ("#9467bd", "-"),
    "ensemble": ("#8c564b", "-"),
    "lookup": (LOOKUP_COLOR, "--"),
}
_NIGHTLY_CAPTION = (
    "Each night's snapshot scored on the next day's attempts: the share of that day's "
    "succeeded attempts whose predicted throughput was within 10% of the measured one (higher "
    "is better), per model, all on the same attempts (an abstention of the lookup table counts "
    "as a miss). The batch models rank with the online core's lineage priors and pairwise "
    "transfer; only the model's predictions differ. Black rings: the model the "
    "champion/challenger rule had serving that day."
)


def _nightly_section(block: Mapping[str, Any], frame: pd.DataFrame) -> list[str]:
    """The nightly retrains: the models' means, what served, and accuracy per night."""
    served = block["served"]
    head = (
        "<thead><tr><th>Model</th><th>Nights</th><th>Within 10%</th><th>Within 20%</th>"
        "<th>MAPE</th><th>MdAPE</th><th>Top-1 regret</th><th>Nights served</th></tr></thead>"
    )
    rows = []
    for model, f in block["models"].items():
        rows.append(
            f"<tr><td>{html.escape(_NIGHTLY_LABELS.get(model, model))}</td>"
            f"<td>{_count(f.get('nights'))}</td><td>{_pct(f.get('within_10pct'))}</td>"
            f"<td>{_pct(f.get('within_20pct'))}</td><td>{_pct(f.get('mape'))}</td>"
            f"<td>{_pct(f.get('mdape'))}</td><td>{_pct(f.get('top1_regret'))}</td>"
            f"<td>{_count(served['nights'].get(model))}</td></tr>"
        )
    rows.append(
        f"<tr><td><b>what served</b></td><td>{_count(len(served['decisions']))}</td>"
        f"<td>{_pct(served.get('within_10pct'))}</td><td>{_pct(served.get('within_20pct'))}</td>"
        f"<td>{_pct(served.get('mape'))}</td><td>{_pct(served.get('mdape'))}</td>"
        f"<td>{_pct(served.get('top1_regret'))}</td><td>{_DASH}</td></tr>"
    )
    rule = block["rule"]
    points = served.get("points_vs_best_single")
    note = (
        f'<p class="muted">Means over the {block["nights"]} nights from {block["first_day"]} to '
        f"{block['last_day']} ({block['retrains']} retrains). Rule: a challenger serves from the "
        f"next day on when it beat the serving model by {_pct(rule['margin'])} within 10% over "
        f"the trailing {rule['window_days']} days, on at least {rule['min_attempts']:,} attempts "
        f"completed by midnight, after {block.get('warmup_nights', 0)} warm-up nights it reads "
        f"but that are not counted; {rule['initial']} served first; "
        f"{served['promotions']} promotions. What served against the best single model "
        f"({html.escape(str(served.get('best_single_model')))}): "
        + (_DASH if points is None else f"{points:+.1f} points".replace("-", "−"))
        + f" within 10%; picking each day's best model in hindsight: "
        f"{_pct(served.get('hindsight_within_10pct'))}.</p>"
    )
    parts = [
        "<h2>Nightly retrains</h2>",
        f"<table>{head}<tbody>{''.join(rows)}</tbody></table>{note}",
    ]
    figure = _nightly_plot(frame)
    if figure is not None:
        parts.append(embedded(figure, "Accuracy per night per model", _NIGHTLY_CAPTION))
    return parts


def _nightly_plot(frame: pd.DataFrame) -> Figure | None:
    frame = frame[(frame["predicted"] > 0) & ~frame["warmup"]]
    if frame.empty:
        return None
    figure = blank_figure(9.5, 3.8)
    days = pd.to_datetime(frame["day"])
    ax = _time_axes(figure, days.drop_duplicates().reset_index(drop=True))
    for model, (color, style) in _NIGHTLY_STYLE.items():
        mine = frame[frame["model"] == model]
        if mine.empty:
            continue
        ax.plot(
            pd.to_datetime(mine["day"]),
            mine["within_10pct"].astype(float),
            color=color,
            linestyle=style,
            marker="o",
            ms=3,
            lw=1.5,
            label=_NIGHTLY_LABELS[model],
        )
    served = frame[frame["served"]]
    ax.plot(
        pd.to_datetime(served["day"]),
        served["within_10pct"].astype(float),
        "o",
        mfc="none",
        mec="black",
        ms=9,
        mew=1.2,
        label="served",
    )
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("within 10% of actual")
    _legend_above(ax)
    return figure


# -- plots -------------------------------------------------------------------------------------

_ACCURACY_CAPTION = (
    "Share of each day's succeeded attempts whose predicted throughput was within 10% of the "
    "measured one (higher is better), by submission day. Blue: the model, over the attempts it "
    "predicted. Orange: the lookup table, over the attempts it predicted. Dashed orange: the "
    "lookup table with its abstentions counted as misses, the fair comparison when it often "
    "has nothing to say. Faint lines are daily values; bold ones their 7-day rolling mean."
)
_COVERAGE_CAPTION = (
    "Share of each day's submissions with at least one eligible candidate that got a ranking "
    "(higher is better). The model ranks as soon as it can predict; the lookup table only "
    "where it has seen the same model type on the hardware before, so it rises as the fleet's "
    "history fills in."
)
_CALIBRATION_CAPTION = (
    "Are the prediction intervals honest? Left: per day, the share of succeeded attempts whose "
    "measured throughput fell inside the model's interval; right: the same per prediction "
    "source over the whole replay. The dashed line is the nominal level: above it the "
    "intervals are too wide (cautious), below it too narrow (over-confident)."
)
_HARDWARE_CAPTION = (
    "Median absolute percentage error per hardware type the attempts ran on (shorter is "
    "better), model against lookup table on the attempts both predicted (like for like: the "
    "lookup table predicts only configurations it has seen, mostly reruns, the easiest "
    "attempts), with the number of succeeded attempts and of those both predicted. The tick is "
    "the model on all its attempts. A missing bar means the two never both predicted for that "
    "type. Types with few attempts are noisy."
)
_SOURCE_CAPTION = (
    "The model's accuracy per prediction source (the source of its prediction for the hardware "
    "each attempt ran on), with the number of scored attempts. Left: share within 10% of the "
    "measured throughput (longer is better); right: median absolute percentage error (shorter "
    "is better). Black ticks, with an oracle: the oracle's noise-free throughput scored the "
    "same way, the best any predictor can do against run-to-run noise."
)
_FAMILY_CAPTION = (
    "The same per model family: where the model has learned the workload well, and where it "
    "still leans on cold-start guesses."
)
_SAVINGS_CAPTION = (
    "Cost of running each day's attempts on the model's top pick, scored with the true "
    "throughput. Savings vs requested: 1 − model cost / cost on the hardware the user asked "
    "for (above zero: the model saves money). Savings vs lookup: the same against the lookup "
    "table's pick. Top-1 regret: mean extra cost of the model's pick over the truly cheapest "
    "eligible hardware (zero is perfect; lower is better)."
)


def blank_figure(width: float, height: float) -> Figure:
    """An empty figure drawn on Agg (no pyplot state)."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # render with Agg, without pyplot's global state
    return figure


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_axes(figure: Figure, days: pd.Series, where: Any = None) -> Any:
    ax = figure.add_subplot() if where is None else figure.add_subplot(where)
    span = (days.max() - days.min()).days if len(days) else 0
    # The data is daily: on a short replay, tick whole days (the automatic locator picks hours).
    if span <= 14:
        ax.xaxis.set_major_locator(mdates.DayLocator(interval=1 if span <= 7 else 2))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%d %b"))
        pad = pd.Timedelta(hours=12)
        ax.set_xlim(days.min() - pad, days.max() + pad)
    else:
        locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(alpha=0.3)
    return ax


def _legend_above(ax: Any) -> None:
    """A legend in one row above the axes, where it can never hide a line."""
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=4, fontsize=9, frameon=False)


def _lines(
    ax: Any,
    daily: pd.DataFrame,
    series: Sequence[tuple[str, str, str, str]],
) -> bool:
    """Draw (column, label, color, linestyle) series; False when every value is missing."""
    daily = _calendar(daily)
    drawn = False
    smooth = len(daily) > _SMOOTH_AFTER_DAYS
    for column, label, color, style in series:
        values = daily[column].astype(float)
        if values.isna().all():
            continue
        drawn = True
        if smooth:
            ax.plot(daily["day"], values, color=color, linestyle=style, alpha=0.25, lw=0.8)
            rolling = values.rolling(_WINDOW, center=True, min_periods=1).mean()
            ax.plot(daily["day"], rolling, color=color, linestyle=style, lw=2, label=label)
        else:
            ax.plot(
                daily["day"],
                values,
                color=color,
                linestyle=style,
                marker="o",
                ms=4,
                lw=1.5,
                label=label,
            )
    return drawn


def _calendar(daily: pd.DataFrame) -> pd.DataFrame:
    """``daily`` with a row for every calendar day from its first to its last (NaN on a day
    without data): a gap breaks the lines instead of being drawn across, and a rolling mean
    of seven rows spans seven days."""
    days = pd.to_datetime(daily["day"])
    every = pd.date_range(days.min(), days.max(), freq="D", name="day")
    return daily.assign(day=days).set_index("day").reindex(every).reset_index()


def _share_plot(
    daily: pd.DataFrame, series: Sequence[tuple[str, str, str, str]], ylabel: str
) -> Figure | None:
    if daily.empty:
        return None
    figure = blank_figure(9.5, 3.6)
    ax = _time_axes(figure, daily["day"])
    if not _lines(ax, daily, series):
        return None
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel(ylabel)
    _legend_above(ax)
    return figure


def _accuracy_plot(daily: pd.DataFrame) -> Figure | None:
    return _share_plot(
        daily,
        [
            ("within_10pct", "model", MODEL_COLOR, "-"),
            ("lookup_within_10pct", "lookup table", LOOKUP_COLOR, "-"),
            (
                "lookup_within_10pct_abstain_as_miss",
                "lookup table, abstention = miss",
                LOOKUP_COLOR,
                "--",
            ),
        ],
        "within 10% of actual",
    )


def _coverage_plot(daily: pd.DataFrame) -> Figure | None:
    return _share_plot(
        daily,
        [
            ("coverage", "model", MODEL_COLOR, "-"),
            ("lookup_coverage", "lookup table", LOOKUP_COLOR, "-"),
        ],
        "submissions ranked",
    )


def _calibration_plot(calibration: pd.DataFrame, nominal: float) -> Figure | None:
    if calibration.empty:
        return None
    figure = blank_figure(11, 3.6)
    grid = figure.add_gridspec(1, 3)
    ax = _time_axes(figure, calibration["day"], grid[0, :2])
    overall = calibration[calibration["source"] == "all"].sort_values("day")
    daily = pd.DataFrame({"day": overall["day"], "coverage": overall["coverage"]})
    _lines(ax, daily.reset_index(drop=True), [("coverage", "empirical", MODEL_COLOR, "-")])
    ax.axhline(nominal, color="black", linestyle="--", lw=1, label=f"nominal {nominal:.0%}")
    ax.set_ylabel("actual inside interval")
    _legend_above(ax)

    # Points, not bars: a few points off nominal matter, so the axis does not start at zero.
    dots = figure.add_subplot(grid[0, 2], sharey=ax)
    per_source = (
        calibration[calibration["source"] != "all"]
        .groupby("source", sort=False)[["n", "covered"]]
        .sum()
    )
    shares = (per_source["covered"] / per_source["n"]).to_numpy()
    positions = np.arange(len(shares))
    dots.plot(positions, shares, "o", color=MODEL_COLOR, ms=8)
    for x, share in zip(positions, shares, strict=True):
        dots.annotate(
            f"{share:.1%}",
            (x, share),
            textcoords="offset points",
            xytext=(9, -3),
            ha="left",
            fontsize=8,
        )
    dots.axhline(nominal, color="black", linestyle="--", lw=1)
    labels = [
        f"{name}\n(n={n:,})" for name, n in zip(per_source.index, per_source["n"], strict=True)
    ]
    dots.set_xticks(positions, labels, fontsize=8, parse_math=False)
    dots.set_xlim(-0.6, len(shares) - 0.4)
    dots.set_title("by prediction source", fontsize=10)
    dots.grid(axis="y", alpha=0.3)
    dots.tick_params(labelleft=False)
    lowest = float(np.nanmin([*overall["coverage"], *shares, nominal]))
    ax.set_ylim(max(0.0, math.floor((lowest - 0.05) * 10) / 10), 1.01)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    return figure


def _breakdown_plot(table: pd.DataFrame, key: str) -> Figure | None:
    table = table[(table["model_n"] > 0) | (table["lookup_n"] > 0)]
    if table.empty:
        return None
    k = len(table)
    figure = blank_figure(9.5, 1.0 + 0.32 * k)
    ax = figure.add_subplot()
    positions = np.arange(k)[::-1]  # most attempts on top
    height = 0.4
    for offset, policy, color, label in (
        (height / 2, "model", MODEL_COLOR, "model"),
        (-height / 2, "lookup", LOOKUP_COLOR, "lookup table"),
    ):
        ax.barh(
            positions + offset,
            table[f"both_{policy}_mdape"],
            height,
            color=color,
            label=f"{label}, attempts both predicted",
        )
    ax.scatter(
        table["model_mdape"],
        positions + height / 2,
        marker="|",
        s=120,
        color="black",
        zorder=3,
        label="model, all its attempts",
    )
    labels = [
        f"{name}  (n={n:,}, both {both:,})"
        for name, n, both in zip(table[key], table["n"], table["both_n"], strict=True)
    ]
    ax.set_yticks(positions, labels, fontsize=8, parse_math=False)  # a $ is text
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("median absolute percentage error (MdAPE)")
    ax.grid(axis="x", alpha=0.3)
    _legend_above(ax)
    ax.set_ylim(-0.7, k - 0.3)
    return figure


def _source_plot(summary: Mapping[str, Any]) -> Figure | None:
    rows = _source_rows(summary.get("by_source") or {})
    if not rows:
        return None
    oracle = (summary.get("oracle_ceiling") or {}).get("by_source", {})
    k = len(rows)
    figure = blank_figure(9.5, 1.2 + 0.45 * k)
    grid = figure.add_gridspec(1, 2)
    positions = np.arange(k)[::-1]  # the core's order, top down
    labels = [f"{label}  (n={f['n']:,})" for _, label, f in rows]
    for column, (key, xlabel) in enumerate(
        (("within_10pct", "within 10% of actual"), ("mdape", "MdAPE"))
    ):
        ax = figure.add_subplot(grid[0, column])
        values = [np.nan if f.get(key) is None else f[key] for _, _, f in rows]
        ax.barh(positions, values, 0.6, color=MODEL_COLOR, label="model")
        ceiling = [(oracle.get(source) or {}).get(key) for source, _, _ in rows]
        if any(v is not None for v in ceiling):
            ax.plot(
                [np.nan if v is None else v for v in ceiling],
                positions,
                "|",
                color=ORACLE_COLOR,
                ms=18,
                mew=2.5,
                label="oracle (noise ceiling)",
            )
        ax.set_yticks(positions, labels if column == 0 else [], fontsize=8, parse_math=False)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        if key == "within_10pct":
            ax.set_xlim(0, 1.0)
            _legend_above(ax)
    return figure


def _savings_plot(daily: pd.DataFrame) -> Figure | None:
    if daily.empty:
        return None
    figure = blank_figure(9.5, 3.6)
    ax = _time_axes(figure, daily["day"])
    drawn = _lines(
        ax,
        daily,
        [
            ("savings_vs_requested", "savings vs requested", MODEL_COLOR, "-"),
            ("savings_vs_lookup", "savings vs lookup table", LOOKUP_COLOR, "-"),
            ("top1_regret", "top-1 regret", EXTRA_COLOR, ":"),
        ],
    )
    if not drawn:
        return None
    ax.axhline(0.0, color="black", lw=0.8)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("share of cost")
    _legend_above(ax)
    return figure
