"""The heartbeat from the worker process's start (worker/runtime/heartbeat_writer.py): "alive, not ready" beats
from Celery's ``worker_init`` until ``worker_ready``, and what the probes conclude from them."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery.signals import worker_init, worker_shutdown

from tests.conftest import wait_for
from worker.runtime import heartbeat_file as hb
from worker.runtime.app import _sweep_forever, create_app
from worker.runtime.heartbeat_writer import StartupBeat

NODE = "agent-signal-7@pod-b"


@dataclass(frozen=True)
class _Sender:
    """What Celery's worker_init sends: the WorkController, with its app and node name (hashable, as Celery's
    signal cache needs)."""

    app: Any
    hostname: str


class TestNotReadyBeat:
    def test_a_not_ready_beat_is_live_and_not_ready(self, tmp_path: Path) -> None:
        """A fresh beat saying ready: false passes liveness and fails readiness, saying why."""
        hb.write(tmp_path / "hb", hb.Beat(NODE, 1, 1_000_000, ready=False))
        assert hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001, ready=False).ok
        verdict = hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001)
        assert not verdict.ok and "not ready" in verdict.reason and NODE in verdict.reason

    def test_a_beat_without_ready_reads_as_ready(self, tmp_path: Path) -> None:
        """A file an earlier release wrote (only once ready, no ``ready`` field) still counts as ready."""
        (tmp_path / "hb").write_text(json.dumps({"node": NODE, "pid": 1, "atMs": 1_000_000}))
        assert hb.read(tmp_path / "hb") == hb.Beat(NODE, 1, 1_000_000, ready=True)
        assert hb.check(tmp_path / "hb", max_age_s=60, now_s=1_001).ok

    @pytest.mark.parametrize("text", ['{"node": "n", "pid": 1, "atMs": 1, "ready": "yes"}', "[1, 2]"])
    def test_a_ready_that_is_not_a_boolean_is_an_error(self, tmp_path: Path, text: str) -> None:
        """``ready`` must be a JSON boolean, and the file an object: else the file is not a beat."""
        (tmp_path / "hb").write_text(text)
        with pytest.raises(ValueError, match="not a heartbeat file"):
            hb.read(tmp_path / "hb")


class TestStartupBeat:
    def test_beats_not_ready_from_start_until_finish(self, tmp_path: Path) -> None:
        """start writes a not-ready beat at once (clearing an old drain flag) and again every interval; finish
        stops it and says it had started."""
        path = tmp_path / "agent-signal" / "heartbeat.json"
        hb.mark_draining(path)
        startup = StartupBeat(str(path), interval_s=0.01)
        startup.start(NODE)
        try:
            first = hb.read(path)
            assert first is not None and first == hb.Beat(NODE, os.getpid(), first.at_ms, ready=False)
            assert not hb.is_draining(path)
            wait_for(lambda: (b := hb.read(path)) is not None and b.at_ms > first.at_ms, what="a second beat")
        finally:
            assert startup.finish() is True
        last = hb.read(path)
        assert last is not None and last.ready is False

    def test_finish_without_start_says_so(self, tmp_path: Path) -> None:
        """finish before start (no worker_init seen) is False, writes nothing, and a later start does nothing."""
        startup = StartupBeat(str(tmp_path / "hb"), interval_s=0.01)
        assert startup.finish() is False
        startup.start(NODE)
        assert hb.read(tmp_path / "hb") is None

    def test_no_file_setting_writes_nothing(self, tmp_path: Path) -> None:
        """With AGENT_SIGNAL_HEARTBEAT_FILE unset (no path) start writes nothing and finish says it never began."""
        startup = StartupBeat(None, interval_s=0.01)
        startup.start(NODE)
        assert startup.finish() is False
        assert list(tmp_path.iterdir()) == []

    def test_the_ready_loop_keeps_a_drain_flag_set_after_the_start(
        self, make_settings: Any, tmp_path: Path
    ) -> None:
        """A preStop between the process's start and its first broker connection: the sweep loop's first beat
        (ready) must not clear the drain flag the start-up beat's process is now bound by."""
        path = tmp_path / "heartbeat.json"
        startup = StartupBeat(str(path), interval_s=60)
        startup.start(NODE)
        hb.mark_draining(path)
        assert startup.finish() is True
        stop = threading.Event()
        stop.set()  # one pass: the loop's first beat, then it ends
        settings = make_settings(heartbeat_file=str(path))
        _sweep_forever(None, settings, stop, NODE, started=True)  # type: ignore[arg-type]
        beat = hb.read(path)
        assert beat is not None and beat.ready and hb.is_draining(path)
        assert not hb.check(path, max_age_s=60, now_s=beat.at_ms / 1000).ok  # draining: not ready


class TestWiring:
    def test_worker_init_starts_the_beat_for_its_own_app_only(
        self, make_settings: Any, tmp_path: Path
    ) -> None:
        """Celery's worker_init (sent before any broker connection) starts this app's not-ready beats; another
        app's worker_init does not; worker_shutdown stops them."""
        path = tmp_path / "heartbeat.json"
        app = create_app(make_settings(heartbeat_file=str(path), reconcile_interval_s=60))
        other = _Sender(app=object(), hostname="other@pod")
        worker_init.send(sender=other)
        assert hb.read(path) is None
        sender = _Sender(app=app, hostname=NODE)
        try:
            worker_init.send(sender=sender)
            beat = hb.read(path)
            assert beat is not None and beat.node == NODE and beat.ready is False
        finally:
            worker_shutdown.send(sender=sender)
            app.close()

    def test_the_outbox_relay_stops_taking_records_when_the_shutdown_begins(
        self, make_settings: Any, tmp_path: Path
    ) -> None:
        """Two reviews: the relay's daemon thread was never joined, so its deliveries' grace never came, and a join
        at worker_shutdown would have added that grace to the stop's budget. The relay stops when the shutdown
        begins (worker_shutting_down), its grace running while the tasks finish; worker_shutdown joins it."""
        from celery.signals import worker_ready, worker_shutting_down

        app = create_app(make_settings(heartbeat_file=str(tmp_path / "hb.json"), reconcile_interval_s=60))
        sender = _Sender(app=app, hostname=NODE)
        before = {t for t in threading.enumerate() if t.name == "outbox"}
        try:
            worker_init.send(sender=sender)
            worker_ready.send(sender=sender)
            relay = wait_for(
                lambda: next(
                    (t for t in threading.enumerate() if t.name == "outbox" and t not in before), None
                ),
                what="the relay's thread",
            )
            worker_shutting_down.send(sender=NODE, sig="SIGTERM", how="Warm", exitcode=0)
            wait_for(lambda: not relay.is_alive(), what="the relay to stop as the shutdown begins")
        finally:
            worker_shutdown.send(sender=sender)
            app.close()


def test_a_pool_child_has_a_minute_to_say_it_is_up() -> None:
    """Celery kills a new pool child that has not said it is up within ``worker_proc_alive_timeout`` (4 s by
    default) and forks another: on a starved machine every replacement of a SIGKILLed child missed it and the
    worker drained nothing for good (a helper reproduced it at 3% of a CPU; with 60 s it recovered in 12 s)."""
    from celery.app.defaults import DEFAULTS

    from worker.runtime.app import PROC_ALIVE_TIMEOUT_S
    from worker.settings import Settings

    app = create_app(Settings(redis_url="redis://127.0.0.1:6379/0", queue_name="q-alive"))
    assert app.conf.worker_proc_alive_timeout == PROC_ALIVE_TIMEOUT_S == 60.0
    assert DEFAULTS["worker_proc_alive_timeout"] < PROC_ALIVE_TIMEOUT_S


def test_a_beat_is_dated_by_the_hosts_clock_when_the_service_reads_redis(tmp_path: Path) -> None:
    """A process whose host is 90 s off Redis reads Redis's clock (worker/core/clock.py); its heartbeat file is read
    on this host by a probe that may not reach Redis, so the beat keeps the host's clock: a review found a fresh beat
    read 90 s old, and the kubelet would have restarted the worker in a loop."""
    import time

    from producers.cli.admin.probe import probe_worker
    from worker.core import clock
    from worker.runtime.heartbeat_writer import write_beat

    path = str(tmp_path / "beat.json")
    host_us = time.time_ns() // 1000
    before = clock._mono_offset_us
    clock.set_measured(host_us - 90_000_000, host_us, time.monotonic_ns() // 1000)  # the host 90 s ahead
    try:
        assert not clock.on_own_clock()
        write_beat(path, "w1@host", first=True)
    finally:
        clock._mono_offset_us = before
    code, line = probe_worker(path, 60, time.time(), liveness=True)
    assert code == 0, line
