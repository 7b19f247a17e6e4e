"""How many machine instructions a replay executes per event, and in which library.

Usage (from the repository root; needs valgrind)::

    .venv/bin/python benchmarks/replay_instructions.py                 # 3 days x 5,000/day, ~4 min
    .venv/bin/python benchmarks/replay_instructions.py --fleet out/fleet-3d --cache-sim

Timing cannot compare two cores that differ by a few percent on a machine whose speed moves by a
tenth within a minute; an instruction count can. The script re-runs itself under valgrind's
callgrind with collection off, compiles the core's numba kernels (``warm_up``), and counts only
inside the ``replay()`` call (no oracle, no report), so imports, compilation and the fleet's
generation are left out. Printed: events, instructions in all and per event, each library's share
(the CPython interpreter, numpy, the numba kernels' own code, ...), and with ``--cache-sim`` the
first-level data cache misses callgrind's cache model counts. The same code, fleet and
environment give the same count to within a few hundredths of a percent, whatever else the
machine is doing. Under valgrind the replay runs about 50 times slower than alone.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from replay_speed import add_fleet_arguments, ensure_fleet

# (label, pattern of the shared object a function's instructions ran in), first match wins.
# numba's JIT-compiled kernels have no object file: callgrind names it "???".
LIBRARIES: tuple[tuple[str, str], ...] = (
    ("the CPython interpreter and runtime", r"libpython|/lib-dynload/"),
    ("numpy", r"/numpy/|/numpy\.libs/(?!.*openblas)"),
    ("numba's dispatch and boxing", r"/numba/|/llvmlite/"),
    ("OpenBLAS", r"openblas"),
    ("pyarrow", r"/pyarrow/"),
    ("libm", r"/libm\."),
    ("libc", r"/libc\.|/ld-linux"),
    ("the numba kernels' own code", r"^\?\?\?$"),
)
_NAMED = re.compile(r"c?ob=\((\d+)\)(?: (.*))?")


def count(fleet: Path, cache_sim: bool) -> Path:
    """Run this script's inner replay under callgrind; return the output file."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    out = Path(tempfile.mkdtemp(prefix="leap-callgrind-"))
    command = [
        valgrind,
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out / 'callgrind.out'}",
        *(["--cache-sim=yes"] if cache_sim else []),
        sys.executable,
        __file__,
        "--inner",
        str(fleet),
        str(out / "replay"),
    ]
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    return out / "callgrind.out"


def inner(fleet: Path, out: Path) -> None:
    """Under callgrind: warm up, then collect only while ``replay()`` runs."""
    from leap_stream.backtest.replay import replay
    from leap_stream.core.catalog import default_catalog
    from leap_stream.core.leap import warm_up

    catalog = default_catalog()
    warm_up(catalog)
    toggle = ["callgrind_control", "--instr"]
    subprocess.run([*toggle, "on", str(os.getpid())], check=True, capture_output=True)
    summary = replay(fleet / "history.parquet", out, catalog, progress=False, report=False)
    subprocess.run([*toggle, "off", str(os.getpid())], check=True, capture_output=True)
    events = summary["events"]["submitted"] + summary["events"]["completed"]
    (out / "events.txt").write_text(f"{events}\n")


def costs_by_object(callgrind_out: Path) -> tuple[list[str], dict[str, list[int]]]:
    """The events counted, and each shared object's own cost of each (what ran in it, not in
    what it called), read from callgrind's output format."""
    names: dict[str, str] = {}
    totals: dict[str, list[int]] = {}
    events: list[str] = []
    current: list[int] = []
    after_call = False  # the cost line after calls= is the callee's, not the caller's
    with callgrind_out.open() as lines:
        for line in lines:
            if line[0].isdigit() or line[0] in "+-*":
                if after_call:
                    after_call = False
                    continue
                for k, value in enumerate(line.split()[1:]):
                    current[k] += int(value)
            elif line.startswith(("ob=", "cob=")):
                key, name = _NAMED.match(line.strip()).groups()  # type: ignore[union-attr]
                if name:
                    names[key] = name
                if line[0] == "o":
                    current = totals.setdefault(names[key], [0] * len(events))
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("events:"):
                events = line.split()[1:]
    return events, totals


def shares(totals: dict[str, list[int]], column: int = 0) -> tuple[int, Counter[str]]:
    """One event's total, and its split by :data:`LIBRARIES`."""
    by_library = Counter[str]()
    for name, cost in totals.items():
        label = next((label for label, pattern in LIBRARIES if re.search(pattern, name)), None)
        by_library[label or "the rest"] += cost[column]
    return sum(by_library.values()), by_library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fleet_arguments(parser, days=3, jobs_per_day=5_000, seed=5)
    parser.add_argument(
        "--cache-sim", action="store_true", help="also count first-level data cache misses"
    )
    parser.add_argument("--inner", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(*args.inner)
        return
    with tempfile.TemporaryDirectory() as scratch:
        fleet = args.fleet or Path(scratch) / "fleet"
        ensure_fleet(fleet, args.days, args.jobs_per_day, args.seed)
        print("counting under callgrind (about 50 times slower than a replay alone)")
        callgrind_out = count(fleet, args.cache_sim)
    events = int((callgrind_out.parent / "replay" / "events.txt").read_text())
    events_counted, totals = costs_by_object(callgrind_out)
    total, by_library = shares(totals)
    print(f"events replayed      {events:,}")
    print(f"instructions         {total:,}  ({total / events:,.0f} an event)")
    for label, cost in by_library.most_common():
        print(f"  {label:<40}{cost / total:>7.1%}")
    if args.cache_sim:
        misses = sum(shares(totals, events_counted.index(event))[0] for event in ("D1mr", "D1mw"))
        print(f"L1 data misses       {misses:,}  ({misses / events:,.1f} an event)")
    print(f"callgrind's output   {callgrind_out}  (callgrind_annotate reads it)")


if __name__ == "__main__":
    main()
