"""A web pod whose broker is away (a RabbitMQ restart): ``/readyz`` says so (503, ``broker: error``), and the
readiness probe of the manifests, ``agent-signal probe web --without-broker``, keeps the pod ready, since the door
stores events meanwhile and the reconcile sweep sends their drains once the broker is back (a store that is away,
or a store check that fails, is still not ready: tests/unit/cli/test_output_formats.py). A deploy audit: the probe read /readyz alone, so one broker restart took every web pod out of
its Service, ingest, the console and KEDA's backlog read with them. A real door served over HTTP, its broker a
port nothing listens on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from producers.cli.admin.probe import probe_web
from tests.conftest import free_port

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-web-probe-0123456789"


def test_the_door_stays_ready_without_its_broker_and_takes_events(
    make_settings: Callable[..., Any], serve_web: Callable[..., Any]
) -> None:
    settings = make_settings(bootstrap_key=BOOT, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    _, url = serve_web(settings)
    readyz = f"{url}/readyz"
    answer = httpx.get(readyz, headers={"Authorization": f"Bearer {BOOT}"}, timeout=30)
    assert answer.status_code == 503 and answer.json()["checks"]["broker"].startswith("error")
    assert answer.json()["checks"]["redis"] == "ok"

    assert probe_web(readyz, BOOT, 30.0)[0] == 1
    code, line = probe_web(readyz, BOOT, 30.0, without_broker=True)
    assert code == 0 and "ready without the broker" in line
    assert probe_web(readyz, None, 30.0, without_broker=True)[0] == 1  # no credential: no checks to read

    event = {"sourceType": "test.counter", "sourceId": "while-away", "scopeKey": "topic:t", "payload": {}}
    sent = httpx.post(f"{url}/v1/events", json=event, headers={"Authorization": f"Bearer {BOOT}"}, timeout=30)
    assert sent.status_code == 202, sent.text  # stored: the sweep sends its drain once the broker is back
