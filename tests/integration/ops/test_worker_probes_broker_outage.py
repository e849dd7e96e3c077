"""A worker started while its broker (and store) is down: its liveness probe passes from the start, its readiness
probe does not until the broker answers (worker/runtime/heartbeat_writer.py; docs/operations.md, "Probes").

A deploy audit: the heartbeat file began at Celery's ``worker_ready``, which comes only after the first broker
connection, so a worker started during a Redis outage had no heartbeat at all and Kubernetes' startup probe
restarted it every 3 minutes for as long as the outage lasted. A real ``agent-signal worker`` process pointed at a
port nothing listens on, then a real ``redis-server`` started on that port.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from producers.cli.admin.probe import probe_worker
from tests.conftest import free_port, wait_for
from worker.runtime import heartbeat_file as hb

pytestmark = pytest.mark.integration

# Generous: the beats come every 0.5 s (the tests' reconcile interval); the probe must fail for not being
# ready, never because a loaded machine wrote a beat late.
MAX_AGE_S = 60.0


def _probe(path: Path, *, liveness: bool) -> tuple[int, str]:
    return probe_worker(str(path), MAX_AGE_S, time.time(), liveness=liveness)


def _answers(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except RedisConnectionError:
        return False


@contextmanager
def _redis_on(port: int, directory: Path) -> Iterator[None]:
    """A ``redis-server`` on ``port`` (no persistence) until the block ends."""
    log = (directory / f"redis-{port}.log").open("wb")
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    proc = subprocess.Popen([*args, "--save", "", "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT)
    client = Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        wait_for(partial(_answers, client), timeout_s=20, what=f"redis-server on {port}")
        yield
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_a_worker_started_without_its_broker_is_live_and_not_ready(
    make_settings: Any, start_worker: Any, tmp_path: Path
) -> None:
    """Broker down at start: liveness passes, readiness says not ready while Celery retries its connection;
    once a Redis answers at that address, readiness passes too."""
    # Given a worker whose Redis (its store and its broker) has nothing listening
    port = free_port()
    path = tmp_path / "hb" / "heartbeat.json"
    settings = make_settings(redis_url=f"redis://127.0.0.1:{port}/0", heartbeat_file=str(path))
    worker = start_worker(settings, wait=False)

    # When Celery has failed to connect, and the process has beaten since
    wait_for(
        lambda: "Cannot connect to redis" in worker.log(), timeout_s=60, what="a broker connection retry"
    )
    first = wait_for(lambda: hb.read(path), timeout_s=60, what="a heartbeat")
    wait_for(
        lambda: (beat := hb.read(path)) is not None and beat.at_ms > first.at_ms,
        timeout_s=60,
        what="a later heartbeat",
    )

    # Then it is alive and not ready
    live = wait_for(lambda: _probe(path, liveness=True)[0] == 0, timeout_s=60, what="liveness to pass")
    assert live, worker.log()
    code, line = _probe(path, liveness=False)
    assert code == 1 and "not ready" in line, line
    assert worker.popen.poll() is None, worker.log()

    # And once its Redis answers, the worker connects and becomes ready
    with _redis_on(port, tmp_path):
        wait_for(lambda: _probe(path, liveness=False)[0] == 0, timeout_s=90, what="readiness to pass")
        beat = hb.read(path)
        assert beat is not None and beat.ready and beat.node == first.node and beat.pid == first.pid
