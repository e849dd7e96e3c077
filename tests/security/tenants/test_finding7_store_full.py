"""Finding 7 (issue 26), the store half: a full store never stops a worker process and never costs an event its
life. In the fault run Redis was full for ~5 s: 2 of 60 in-flight events ended dead, and the Celery worker
exited (``Unrecoverable error: OutOfMemoryError``), so processing stopped for every tenant.

Against a private ``redis-server`` with a small ``maxmemory`` (``noeviction``) that is both the store and the
broker, a real worker process: fill it while 60 events are in flight, free it, and every event ends done."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers import Producer
from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.support.private_redis import private_redis
from worker.keys.layout import BucketKeys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EVENTS = 60
SCOPES = 10
FULL_FOR_S = 5.0  # how long the fault keeps the store full (the finding's fault run)


def _fill(client: Redis) -> None:
    """Put the server well over its maxmemory (one small SETRANGE allocates a big string)."""
    client.setrange("fill:pad", 24 * 1024 * 1024, "x")


def _final(states: list[str | None]) -> list[str | None] | None:
    return states if all(s in ("done", "dead") for s in states) else None


def test_a_full_store_pauses_work_and_kills_no_worker_and_no_event(
    tmp_path: Path, make_settings: Any, start_worker: Any
) -> None:
    """Redis full for 5 s under 60 in-flight events (staged effects, actions, direct writes): the worker process
    stays alive, no event is dead, every event is done with its effect applied once after room returns, and
    /readyz said the store was full meanwhile."""
    with private_redis(tmp_path, "--maxmemory", "16mb", "--maxmemory-policy", "noeviction") as url:
        settings = make_settings(redis_url=url, telemetry_enabled=False)
        client = Redis.from_url(url, decode_responses=True)
        worker = start_worker(settings, concurrency=2, wait=False)  # it registers in the private Redis
        try:
            _fault_run(settings, client, worker)
        finally:  # the worker stops while its Redis still answers (else its shutdown waits 20 s on a dead one)
            worker.stop(signal.SIGQUIT)
        client.close()


def _fault_run(settings: Any, client: Redis, worker: Any) -> None:
    """Fill the store under the in-flight events, free it, and check every event and the worker (see above)."""
    keys = BucketKeys(settings.key_prefix)
    wait_for(lambda: client.hlen(keys.workers) or worker.popen.poll() is not None, what="the worker")
    producer = Producer(settings)
    events = [
        {
            "sourceType": "test.counter",
            "sourceId": f"full-{i}",
            "scopeKey": f"topic:full-{i % SCOPES}",
            "payload": {"counterKey": f"{keys.home_prefix}test:full:{i}", "sleepMs": 50},
        }
        for i in range(EVENTS)
    ]
    ids = [r.event_id for r in producer.enqueue_many(events)]
    wait_for(
        lambda: client.exists(f"{keys.home_prefix}test:attempts:full-0"), what="the first event to start"
    )
    _fill(client)
    with TestClient(create_web_app(settings, producer=producer)) as web:
        ready = web.get("/readyz").json()
    time.sleep(FULL_FOR_S)  # the fault's length: the store stays full while the worker runs
    client.delete("fill:pad")
    states = wait_for(
        lambda: _final([client.hget(keys.event(i), "state") for i in ids]) or worker.popen.poll() is not None,
        timeout_s=120,
        what="every event final (or the worker gone)",
    )
    log = worker.log()
    assert worker.popen.poll() is None, f"the worker exited:\n{log[-3000:]}"
    assert states.count("dead") == 0, log[-3000:]
    assert states == ["done"] * EVENTS
    assert [client.get(f"{keys.home_prefix}test:full:{i}") for i in range(EVENTS)] == ["1"] * EVENTS
    assert "backs off until there is room" in log  # it met the full store, and waited
    assert ready["ready"] is True and ready["checks"]["memory"].startswith("full: ")
    producer.close()
