"""The command line end to end on a tiny fleet: exit codes, what is printed, what is written."""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from realdata_paths import MLPERF_CSV as REAL_MLPERF_CSV
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.runtime import GC_THRESHOLDS

runner = CliRunner()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-day fleet of ~60 attempts a day, generated once through the CLI."""
    out = tmp_path_factory.mktemp("fleet")
    result = runner.invoke(
        cli.app, ["generate", "--out", str(out), "--days", "3", "--jobs-per-day", "60"]
    )
    assert result.exit_code == 0, result.output
    return out


def test_generate_writes_history_and_oracle_and_prints_their_counts(fleet: Path) -> None:
    history = pd.read_parquet(fleet / "history.parquet")
    oracle = pd.read_parquet(fleet / "oracle.parquet")
    attempts = int((history["event_type"] == "submitted").sum())
    assert attempts > 0
    assert oracle["job_id"].nunique() == attempts


def test_replay_prints_the_table_and_writes_its_files(fleet: Path, tmp_path: Path) -> None:
    args = ["replay", str(fleet / "history.parquet"), "--out", str(tmp_path)]
    result = runner.invoke(cli.app, [*args, "--oracle", str(fleet / "oracle.parquet")])

    assert result.exit_code == 0, result.output
    for label in ("coverage (eligible submissions ranked)", "within 10%", "top-1 regret"):
        assert label in result.output
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json", "daily.csv", "report.html"}
    assert "skipped" not in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rejects"] == {"rows": 0, "by_column": {}}
    assert summary["off_catalog"] == {"completions": 0, "by_hardware": {}}
    assert "warning" not in result.stderr
    rows = len(pd.read_parquet(fleet / "history.parquet"))
    assert summary["events"]["submitted"] + summary["events"]["completed"] == rows
    assert f"{rows:,} events replayed" in result.output


def test_replay_without_oracle_or_report_leaves_both_out(fleet: Path, tmp_path: Path) -> None:
    args = ["replay", str(fleet / "history.parquet"), "--out", str(tmp_path), "--no-report"]
    result = runner.invoke(cli.app, args)

    assert result.exit_code == 0, result.output
    assert "top-1 regret" not in result.output
    assert not (tmp_path / "report.html").exists()
    assert "decisions" not in json.loads((tmp_path / "summary.json").read_text())


def test_replay_with_another_fleets_oracle_exits_2_on_one_line(fleet: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    generated = runner.invoke(
        cli.app,
        ["generate", "--out", str(other), "--days", "1", "--jobs-per-day", "5", "--seed", "99"],
    )
    assert generated.exit_code == 0, generated.output

    args = ["replay", str(fleet / "history.parquet"), "--out", str(tmp_path / "replay")]
    result = runner.invoke(cli.app, [*args, "--oracle", str(other / "oracle.parquet")])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "expected job" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def broken_history(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """The fleet's history as CSV with a bad precision and a non-numeric throughput."""
    out = tmp_path_factory.mktemp("broken")
    good = out / "history.csv"
    converted = runner.invoke(
        cli.app, ["history", "convert", str(fleet / "history.parquet"), str(good)]
    )
    assert converted.exit_code == 0, converted.output
    frame = pd.read_csv(good, keep_default_na=False, dtype=str)
    submitted = int((frame["event_type"] == "submitted").to_numpy().nonzero()[0][3])
    succeeded = int((frame["status"] == "succeeded").to_numpy().nonzero()[0][5])
    frame.loc[submitted, "precision"] = "bf32"
    frame.loc[succeeded, "throughput"] = "fast"
    broken = out / "broken.csv"
    frame.to_csv(broken, index=False)
    return broken, submitted, succeeded


def test_replay_skips_bad_rows_into_rejects_csv(
    fleet: Path, broken_history: tuple[Path, int, int], tmp_path: Path
) -> None:
    broken, submitted, succeeded = broken_history
    args = ["replay", str(broken), "--out", str(tmp_path), "--no-report"]
    # the oracle still lists the rejected submission's job: the replay passes over it
    result = runner.invoke(cli.app, [*args, "--oracle", str(fleet / "oracle.parquet")])

    assert result.exit_code == 0, result.output
    assert f"2 bad history rows skipped, listed in {tmp_path / 'rejects.csv'}" in result.output
    rejects = pd.read_csv(tmp_path / "rejects.csv")
    assert sorted(zip(rejects["row"], rejects["column"], strict=True)) == sorted(
        [(submitted, "precision"), (succeeded, "throughput")]
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rejects"] == {"rows": 2, "by_column": {"precision": 1, "throughput": 1}}
    rows = len(pd.read_parquet(fleet / "history.parquet"))
    assert summary["events"]["submitted"] + summary["events"]["completed"] == rows - 2


def test_replay_strict_stops_at_the_first_bad_row_with_exit_code_2(
    broken_history: tuple[Path, int, int], tmp_path: Path
) -> None:
    broken, submitted, succeeded = broken_history
    args = ["replay", str(broken), "--out", str(tmp_path), "--no-report", "--strict"]
    result = runner.invoke(cli.app, args)

    assert result.exit_code == 2
    # the first broken row, though a value that does not cast is the first rule checked
    assert submitted < succeeded
    assert result.stderr.startswith("error: ")
    assert f"row {submitted}, column 'precision': 'bf32'" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "rejects.csv").exists()


def test_replay_warns_of_completions_on_hardware_the_catalog_does_not_name(
    fleet: Path, tmp_path: Path
) -> None:
    history = pd.read_parquet(fleet / "history.parquet")
    ran_on = history["hardware_type"].dropna()
    renamed = ran_on.mode()[0]  # spelled otherwise, as another tool would
    history["hardware_type"] = history["hardware_type"].replace(renamed, renamed.lower())
    history.to_parquet(tmp_path / "history.parquet")
    out = tmp_path / "replay"
    out.mkdir()
    (out / "report.html").write_text("an earlier replay's")

    result = runner.invoke(
        cli.app, ["replay", str(tmp_path / "history.parquet"), "--out", str(out), "--no-report"]
    )

    assert result.exit_code == 0, result.output
    count = int((ran_on == renamed).sum())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["off_catalog"] == {"completions": count, "by_hardware": {renamed.lower(): count}}
    assert f"{count:,} completions ran on hardware the catalog does not name" in " ".join(
        result.stderr.split()
    )
    assert not (out / "report.html").exists()  # not beside this replay's figures
    # neither scored nor abstentions: the model predicted every attempt it could be scored on
    accuracy = summary["accuracy"]
    assert accuracy["within_10pct_abstain_as_miss"] == accuracy["within_10pct"]


def test_batch_commands_refuse_what_they_cannot_use_on_one_line(
    fleet: Path, tmp_path: Path
) -> None:
    one_day = tmp_path / "one-day"
    args = ["generate", "--out", str(one_day), "--days", "1", "--jobs-per-day", "20"]
    assert runner.invoke(cli.app, args).exit_code == 0
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    history = str(fleet / "history.parquet")
    cases = {  # command: words of its one-line error
        ("replay", str(one_day / "history.parquet"), "--nightly", "--workers", "0",
         "--out", str(tmp_path / "n")): "need submissions on two days at least",
        ("ablate", history, "--oracle", str(one_day / "oracle.parquet"), "--workers", "0",
         "--variant", "no_roofline", "--out", str(tmp_path / "a")): "oracle",
        ("import", "gavel", str(a_file), "--out", str(tmp_path / "g")): "cannot read",
    }  # fmt: skip
    for command, words in cases.items():
        result = runner.invoke(cli.app, list(command))
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, command
        assert words in result.stderr, (command, result.stderr)
    # an output directory that is a file: refused before any work
    result = runner.invoke(cli.app, ["replay", history, "--out", str(a_file)])
    assert result.exit_code == 2 and "Invalid value for '--out'" in result.output


def test_bad_catalog_exits_2(fleet: Path, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text("not toml at all\n")
    args = ["replay", str(fleet / "history.parquet"), "--out", str(tmp_path), "--catalog"]
    result = runner.invoke(cli.app, [*args, str(catalog)])

    assert result.exit_code == 2
    assert str(catalog) in result.stderr


def test_every_problem_of_a_bad_catalog_is_on_the_one_line_apart(tmp_path: Path) -> None:
    packaged = Path(cli.__file__).parent / "core" / "catalog.toml"
    text = packaged.read_text().replace("memory_gb = 12\n", 'memory_gb = "12"\nfoo = 1\n', 1)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(text)
    args = ["generate", "--out", str(tmp_path / "fleet"), "--days", "1", "--catalog"]
    result = runner.invoke(cli.app, [*args, str(catalog)])

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "got '12'; " in " ".join(result.stderr.split())
    assert "foo: unknown field" in result.stderr


def test_history_convert_round_trips_and_validate_counts(fleet: Path, tmp_path: Path) -> None:
    rows = len(pd.read_parquet(fleet / "history.parquet"))
    target = tmp_path / "not" / "yet" / "h.avro"  # made on the way
    converted = runner.invoke(
        cli.app, ["history", "convert", str(fleet / "history.parquet"), str(target)]
    )
    assert converted.exit_code == 0, converted.output
    assert f"wrote {rows:,} rows" in " ".join(converted.output.split())

    result = runner.invoke(cli.app, ["history", "validate", str(target)])

    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    assert f"{rows:,}" in result.output


def test_a_command_runs_with_the_collector_tuned_for_long_runs(fleet: Path) -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults
    try:
        result = runner.invoke(cli.app, ["history", "validate", str(fleet / "history.parquet")])
        assert result.exit_code == 0, result.output
        assert gc.get_threshold() == GC_THRESHOLDS != (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_history_validate_names_the_row_and_column_of_a_broken_csv(
    fleet: Path, tmp_path: Path
) -> None:
    good = tmp_path / "history.csv"
    runner.invoke(cli.app, ["history", "convert", str(fleet / "history.parquet"), str(good)])
    frame = pd.read_csv(good, keep_default_na=False, dtype=str)
    row = int((frame["event_type"] == "submitted").to_numpy().nonzero()[0][3])
    frame.loc[row, "precision"] = "bf32"
    broken = tmp_path / "broken.csv"
    frame.to_csv(broken, index=False)

    result = runner.invoke(cli.app, ["history", "validate", str(broken)])

    assert result.exit_code == 2
    assert f"row {row}, column 'precision': 'bf32'" in result.stderr
    assert "valid" not in result.stdout


def test_history_convert_refuses_to_overwrite_its_input(fleet: Path) -> None:
    path = str(fleet / "history.parquet")
    result = runner.invoke(cli.app, ["history", "convert", path, path])

    assert result.exit_code == 2
    assert "same file" in result.stderr


@pytest.mark.skipif(not REAL_MLPERF_CSV.exists(), reason=f"{REAL_MLPERF_CSV} not present")
def test_import_mlperf_writes_the_history_and_prints_the_next_command(tmp_path: Path) -> None:
    result = runner.invoke(
        cli.app, ["import", "mlperf", str(REAL_MLPERF_CSV), "--out", str(tmp_path)]
    )

    assert result.exit_code == 0, result.output
    history = pd.read_parquet(tmp_path / "history.parquet")
    attempts = int((history["event_type"] == "submitted").sum())
    assert re.search(rf"rows kept \(attempts\)\W+{attempts:,}\b", result.output)
    assert f"leap-stream replay {tmp_path / 'history.parquet'}" in result.output


def test_import_mlperf_without_its_columns_exits_2(tmp_path: Path) -> None:
    table = tmp_path / "results.csv"
    table.write_text("round,submitter\nv3.1,A\n")
    result = runner.invoke(cli.app, ["import", "mlperf", str(table), "--out", str(tmp_path)])

    assert result.exit_code == 2
    assert "missing required column" in result.stderr


def test_demo_generates_replays_and_points_at_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "DEMO_DAYS", 2)
    monkeypatch.setattr(cli, "DEMO_JOBS_PER_DAY", 40)
    result = runner.invoke(cli.app, ["demo", "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "replay" / "report.html").exists()
    assert "top-1 regret" in result.output
    assert "report.html" in result.output
