"""tests.conftest.free_port: each xdist worker's ports come from a span of its own, below the kernel's ephemeral
range, and a port something is bound to is skipped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import tests.conftest as conftest
from tests.conftest import TEST_PORT_BASE, TEST_PORT_SPAN, free_port, free_ports


@pytest.mark.parametrize(("worker", "span"), [("gw0", 0), ("gw3", 3), ("", 0), ("master", 0)])
def test_a_worker_takes_its_ports_from_its_own_span(
    worker: str, span: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    start = TEST_PORT_BASE + span * TEST_PORT_SPAN
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(start <= p < start + TEST_PORT_SPAN for p in ports), ports
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert max(ports) < low  # the kernel never hands these out for bind(0) or an outgoing connection


def test_a_bound_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    start = TEST_PORT_BASE + 5 * TEST_PORT_SPAN
    upcoming = start + (next(conftest._port_offsets) + 1) % TEST_PORT_SPAN  # what the next pick would try
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", upcoming))
        except OSError:  # in use on this machine already: skipped all the same
            pass
        port = free_port()
    assert port != upcoming and start <= port < start + TEST_PORT_SPAN
