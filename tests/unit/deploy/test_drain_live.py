"""The preStop against a real worker: ``drain`` flips readiness and the node stops consuming, then it drains.

A real ``agent-signal worker`` process on the test Redis (embedded when REDIS_URL is unset); a few seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers.cli.admin.probe import _celery_control, drain, probe_worker
from tests.conftest import wait_for
from worker.runtime import heartbeat_file as hb
from worker.runtime.app import create_app
from worker.store.events import EventStore

pytestmark = pytest.mark.integration


def test_drain_cancels_the_consumer_of_a_running_worker(
    make_settings: Any, start_worker: Any, tmp_path: Path, redis_client: Redis
) -> None:
    """The worker beats into its file; drain is answered by its node; readiness fails, liveness holds."""
    path = tmp_path / "hb" / "heartbeat.json"
    settings = make_settings(heartbeat_file=str(path))
    worker = start_worker(settings)
    beat = wait_for(lambda: hb.read(path), timeout_s=30, what="the first heartbeat")
    assert beat.node == worker.hostname_hint
    assert probe_worker(str(path), 60, time.time())[0] == 0

    code, line = drain(str(path), settings.queue_name, *_celery_control(settings, 10.0))
    assert code == 0, line
    assert f"no longer consuming from {settings.queue_name}" in line
    assert probe_worker(str(path), 60, time.time())[0] == 1
    assert probe_worker(str(path), 60, time.time(), liveness=True)[0] == 0
    app = create_app(settings)
    try:  # the node itself says it consumes nothing now
        active = app.control.inspect(destination=[beat.node], timeout=10).active_queues() or {}
    finally:
        app.close()
    assert active.get(beat.node) == []
    worker.stop()  # SIGTERM: the warm shutdown ends its heartbeat file (a probe passed on it for up to 60 s)
    engine = EventStore(redis_client, settings).keys  # and its entries in the operators' view of workers
    assert not redis_client.hexists(engine.workers, beat.node)
    assert not redis_client.hexists(engine.worker_info, beat.node)
    assert hb.read(path) is None and hb.is_draining(path)  # the flag waits for the next process's start
    assert probe_worker(str(path), 60, time.time(), liveness=True)[0] == 1


def test_drain_without_a_broker_leaves_the_worker_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``REDIS_URL`` and no stack to join: ``drain`` set its flag, then failed to reach the broker, leaving a
    worker its probe called unready while it kept consuming. Now it stops before the flag, exit 2."""
    from producers.cli.main import main

    path = tmp_path / "heartbeat.json"
    for name in ("REDIS_URL", "AGENT_SIGNAL_REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENT_SIGNAL_HEARTBEAT_FILE", str(path))
    monkeypatch.chdir(tmp_path)  # no stack file of a running `make run` here
    assert main(["drain"]) == 2
    assert "REDIS_URL is not set" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no drain flag beside the heartbeat file


def test_drain_with_a_broker_that_does_not_answer_leaves_the_worker_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A walk: with ``BROKER_URL`` naming a port nobody listens on, ``drain`` set its flag and then printed kombu's
    traceback (exit 1), a worker left unready while it consumed. It is one line naming ``BROKER_URL`` now, exit
    2, and no flag."""
    import socket

    from producers.cli.main import main

    with socket.socket() as probe:  # a port free now: nothing answers there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "heartbeat.json"
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("BROKER_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("AGENT_SIGNAL_HEARTBEAT_FILE", str(path))
    monkeypatch.chdir(tmp_path)
    assert main(["drain", "--timeout-s", "2"]) == 2
    err = capsys.readouterr().err
    assert "the broker did not answer" in err and "BROKER_URL" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # no drain flag beside the heartbeat file
