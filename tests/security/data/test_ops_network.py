"""Finding 10 of issue 26, its deploy half: ops surfaces follow the network. A worker's metrics port (series
labelled by tenant, no credential check) listened on every interface; it listens on loopback unless the
deployment opens it (deploy/k8s sets the pod's IP, behind a NetworkPolicy: tests/unit/deploy)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.integration


def _listening(port: int) -> set[str]:
    """The local addresses of the sockets listening on TCP ``port`` on this host (``/proc/net/tcp{,6}``)."""
    found = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # /proc prints each 32-bit word in host (little-endian) order
            ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, width, 4))
            family = socket.AF_INET if width == 4 else socket.AF_INET6
            found.add(socket.inet_ntop(family, ordered))
    return found


def test_ops_surfaces_follow_the_network_worker_metrics_bind_loopback(
    make_settings: Any, start_worker: Any
) -> None:
    """A worker given only a metrics port serves it on 127.0.0.1 and on no other address."""
    port = free_port()
    start_worker(make_settings(worker_metrics_port=port))
    wait_for(
        lambda: _get(f"http://127.0.0.1:{port}/metrics") == 200,
        timeout_s=30,
        what="the worker's metrics port",
    )
    assert _listening(port) == {"127.0.0.1"}


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0
