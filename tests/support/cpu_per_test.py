"""Where the suite's CPU goes, per test: a pytest plugin and its summary (``make test-cpu``).

Timings per test mislead on a loaded 2-core machine (a test waits while others run), and most of the suite's CPU
is spent in the processes tests start (workers, web apps, CLIs, browsers), which ``--durations`` does not see.
With ``-p tests.support.cpu_per_test`` and ``CPU_REPORT=PATH``, each test appends one JSON line to PATH: its
node id, the CPU of the pytest process during the test (``self_s``) and that of the child processes it reaped
(``children_s``: a process started by a test is reaped at its teardown), and its wall time. Each xdist process
appends to the same file. ``python -m tests.support.cpu_per_test PATH [--top N]`` sums them per file, most CPU
first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPORT_ENV = "CPU_REPORT"


def _cpu_s() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    path = os.environ.get(REPORT_ENV)
    own_0, children_0 = _cpu_s()
    started = time.monotonic()
    yield
    if not path:
        return
    own_1, children_1 = _cpu_s()
    row = {
        "id": item.nodeid,
        "self_s": round(own_1 - own_0, 3),
        "children_s": round(children_1 - children_0, 3),
        "wall_s": round(time.monotonic() - started, 3),
    }
    with Path(path).open(
        "a"
    ) as report:  # one short line per write: appends from several processes stay whole
        report.write(json.dumps(row) + "\n")


def summary(rows: list[dict[str, Any]], top: int) -> list[str]:
    """Lines of the per-file table, most CPU first, after a total."""
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for row in rows:
        sums = per_file[str(row["id"]).split("::", 1)[0]]
        sums[0] += row["self_s"]
        sums[1] += row["children_s"]
        sums[2] += row["wall_s"]
        sums[3] += 1
    own = sum(s[0] for s in per_file.values())
    children = sum(s[1] for s in per_file.values())
    lines = [f"{len(rows)} tests: {own + children:.0f} s CPU ({own:.0f} s pytest, {children:.0f} s children)"]
    lines.append("cpu_s  self_s  children_s  wall_s  tests  file")
    ranked = sorted(per_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    for name, (own_s, children_s, wall_s, count) in ranked[:top]:
        lines.append(
            f"{own_s + children_s:5.0f}  {own_s:6.0f}  {children_s:10.0f}  {wall_s:6.0f}  {count:5.0f}  {name}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.cpu_per_test", description=__doc__)
    parser.add_argument("report", type=Path, help="the file CPU_REPORT named")
    parser.add_argument("--top", type=int, default=30, help="files to list (default 30)")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.report.read_text().splitlines() if line.strip()]
    print("\n".join(summary(rows, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
