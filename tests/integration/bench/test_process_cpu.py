"""bench.profiling.process_cpu reads each side's CPU around the pipeline rows' shapes, children included."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import AbstractContextManager

import pytest

from bench.profiling import process_cpu
from worker.settings import Settings

BURN = "import sys; sum(range(3 * 10**7)); print('burnt', flush=True); sys.stdin.read()"


def test_a_process_cpu_counts_its_children() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        burnt = process_cpu.cpu_s(child.pid)
        assert burnt >= 0.05  # a loop of 30 million additions
        with_children = process_cpu.cpu_s(os.getpid())
        own = os.times()
        # this process's figure holds its live child's (less a clock tick of rounding per process)
        assert with_children - (own.user + own.system) >= burnt - 0.03
    finally:
        child.communicate("")
    assert process_cpu.cpu_s(child.pid) == 0.0  # gone (reaped): nothing to read


@pytest.mark.integration
def test_every_shape_is_measured_on_real_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    real_workers = process_cpu.workers

    def counted(settings: Settings, count: int) -> AbstractContextManager[list[subprocess.Popen[bytes]]]:
        started.append(count)
        return real_workers(settings, count)

    monkeypatch.setattr(process_cpu, "workers", counted)
    # enough events that Redis's share passes a clock tick (10 ms) however the ticks fall: 20 lone events took ~4 ms
    # of its CPU, and a clean-clone run read 0.0
    (measured,) = process_cpu.measure(events=150, rounds=1, processes=1)
    assert started == [1]  # --processes: every shape on that many worker processes
    splits = list(measured)
    assert [(s.shape, s.events) for s in splits] == [
        ("spread (1 event/scope)", 150),
        ("burst (8 scopes)", 300),
        ("no-op task", 150),
    ]
    assert all(s.wall_s > 0 and "cores busy" in s.row() for s in splits)
    # the right processes are read: the workers and Redis did the work (clock ticks: summed over the shapes)
    assert sum(s.workers_s for s in splits) > 0 and sum(s.redis_s for s in splits) > 0


@pytest.mark.parametrize("argv", [["--events", "0"], ["--rounds", "0"], ["--processes", "0"]])
def test_nothing_to_measure_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        process_cpu.main(argv)
    assert "--events, --rounds and --processes must be at least 1" in capsys.readouterr().err


def test_the_cpu_ratio_divides_the_no_ops_cpu_per_task_by_ours_per_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_cpu.os, "cpu_count", lambda: 2)
    # per event: spread 0.5 ms of CPU, burst 0.25 ms, the no-op 1.5 ms; each side's share differs
    spread = process_cpu.Split("spread", 100, wall_s=0.025, workers_s=0.03, redis_s=0.015, producer_s=0.005)
    burst = process_cpu.Split("burst", 200, wall_s=0.05, workers_s=0.02, redis_s=0.02, producer_s=0.01)
    noop = process_cpu.Split("no-op", 100, wall_s=0.075, workers_s=0.1, redis_s=0.02, producer_s=0.03)
    line = process_cpu.Round(spread, burst, noop).ceilings()
    assert "spread 3.00x, burst 6.00x" in line
    # busy, over the 2 cores: spread and no-op kept both busy, the burst half of them
    assert "cores busy: spread 100%, burst 50%, no-op 100%" in line


def test_each_round_prints_its_rows_then_its_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def split(shape: str, cpu_s: float) -> process_cpu.Split:
        return process_cpu.Split(shape, 100, wall_s=1.0, workers_s=cpu_s, redis_s=0.0, producer_s=0.0)

    rounds = [
        process_cpu.Round(split("spread", 0.5), split("burst", 0.25), split("no-op task", 1.0)),
        process_cpu.Round(split("spread", 0.25), split("burst", 0.5), split("no-op task", 1.0)),
    ]
    asked: list[int] = []

    def measure(
        events: int, rounds_: int, processes: int, *, telemetry: bool = True
    ) -> list[process_cpu.Round]:
        asked.append(processes)
        return rounds

    monkeypatch.setattr(process_cpu, "measure", measure)
    assert process_cpu.main(["--processes", "3"]) == 0
    assert asked == [3]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["spread", "burst", "no-op", "CPU"] * 2
    assert "spread 2.00x, burst 4.00x" in lines[3] and "spread 4.00x, burst 2.00x" in lines[7]
