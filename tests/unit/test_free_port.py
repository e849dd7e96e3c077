"""tests.conftest.free_port: each xdist worker's ports come from a span of its own, between TEST_PORT_BASE and the
kernel's ephemeral range, and a port something is bound to is skipped."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

import tests.conftest as conftest
from tests.conftest import EPHEMERAL_RANGE, TEST_PORT_BASE, free_port, free_ports, port_span

LOW = int(EPHEMERAL_RANGE.read_text().split()[0])  # this machine's; CI's is the same (32768)


def _as(monkeypatch: pytest.MonkeyPatch, worker: str, count: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)


def test_the_workers_spans_divide_the_room_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = []
    for index in range(16):
        _as(monkeypatch, f"gw{index}", "16")
        span = port_span()
        assert span is not None
        spans.append(span)
    assert spans[0].start == TEST_PORT_BASE and spans[-1].stop <= LOW
    assert all(a.stop == b.start for a, b in itertools.pairwise(spans))  # no two share a port


@pytest.mark.parametrize(("worker", "count"), [("gw3", "4"), ("gw11", "12"), ("", ""), ("master", "1")])
def test_a_worker_takes_its_ports_from_its_own_span(
    worker: str, count: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, worker, count)
    span = port_span()
    assert span is not None
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(p in span for p in ports), (span, ports)


def test_a_worker_past_the_count_takes_the_kernels_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    """xdist gives a crashed worker's replacement the next id, past the count it started with: it gets no span
    (every span belongs to a worker that may still run), so its ports come from bind(0) as before."""
    _as(monkeypatch, "gw4", "4")
    assert port_span() is None
    assert free_port() >= LOW


def test_a_bound_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, "gw2", "4")
    span = port_span()
    assert span is not None
    upcoming = span[(next(conftest._port_offsets) + 1) % len(span)]  # what the next pick would try
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", upcoming))
        except OSError:  # in use on this machine already: skipped all the same
            pass
        port = free_port()
    assert port != upcoming and port in span


def test_no_room_below_the_range_falls_back_to_the_kernels_pick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    crowded = tmp_path / "ip_local_port_range"
    crowded.write_text("1024\t65535\n")
    monkeypatch.setattr(conftest, "EPHEMERAL_RANGE", crowded)
    _as(monkeypatch, "gw0", "4")
    assert port_span() is None
    assert 1024 <= free_port() <= 65535
