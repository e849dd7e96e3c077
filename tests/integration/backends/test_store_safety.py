"""Nothing lost when Redis is misconfigured or full, against private ``redis-server`` processes: an evicting
policy refuses to start (unless accepted), missing persistence and high memory show on /readyz and /metrics,
a disabled CONFIG is skipped, and a full Redis refuses a whole batch (503, nothing of it stored)."""

from __future__ import annotations

import logging
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis
from redis.exceptions import OutOfMemoryError

from producers import HttpProducer, Producer, StoreUnavailable
from producers.http.app import create_web_app
from tests.conftest import ROOT, settings_env
from tests.support.private_redis import private_redis
from tests.support.prom import parse, total
from worker.keys.layout import BucketKeys
from worker.runtime.tasks import DRAIN_TASK
from worker.store.server.safety import NO_PERSISTENCE, UnsafeStore

pytestmark = pytest.mark.integration


def _event(source_id: str, scope: str) -> dict[str, Any]:
    return {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": scope, "payload": {}}


def _fill(url: str) -> None:
    """Put the server well over its maxmemory: one small SETRANGE allocates a 3 MB string (accepted, since the
    server was under its limit when the command arrived), so transient client buffers cannot decide the test."""
    client = Redis.from_url(url)
    client.setrange("fill:pad", 3 * 1024 * 1024, "x")
    memory = client.info("memory")
    assert memory["used_memory"] > memory["maxmemory"] + 1024 * 1024
    with pytest.raises(OutOfMemoryError):
        client.set("fill:probe", "1")
    client.close()


class TestEviction:
    def test_evicting_policy_refuses_web_and_worker(self, tmp_path: Path, make_settings: Any) -> None:
        """An allkeys-lru Redis stops the web app and the worker at boot, naming the policy and the fix; the worker
        leaves no metrics directory of its own behind (its temporary directory is this test's)."""
        scratch = tmp_path / "tmp"
        scratch.mkdir()
        with private_redis(tmp_path, "--maxmemory-policy", "allkeys-lru") as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False)
            with pytest.raises(UnsafeStore, match=r"maxmemory-policy is allkeys-lru.*noeviction"):
                with TestClient(create_web_app(settings)):
                    pass
            worker = subprocess.run(
                [sys.executable, "-m", "producers.cli", "worker"],
                cwd=ROOT,
                env={**settings_env(settings), "TMPDIR": str(scratch)},
                capture_output=True,
                text=True,
                timeout=120,
            )
        assert worker.returncode == 2, worker.stderr
        assert "allkeys-lru" in worker.stderr and "AGENT_SIGNAL_ALLOW_EVICTING_REDIS" in worker.stderr
        assert list(scratch.iterdir()) == []

    def test_override_starts_with_an_error_line(
        self, tmp_path: Path, make_settings: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true the app starts, logs an ERROR and /readyz names the policy."""
        with private_redis(tmp_path, "--maxmemory-policy", "volatile-lru") as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False, allow_evicting_redis=True)
            with caplog.at_level(logging.WARNING), TestClient(create_web_app(settings)) as client:
                ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"]["eviction"].startswith("accepted: volatile-lru")
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any("volatile-lru" in line and "accepted" in line for line in errors)


class TestWarnings:
    def test_no_persistence_in_production_shows_on_readyz_and_metrics(
        self, tmp_path: Path, make_settings: Any
    ) -> None:
        """Production on a Redis without appendonly or save points: /readyz says so (200) and the gauge is 0."""
        with private_redis(tmp_path, "--maxmemory", "100mb") as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False, env="production")
            with TestClient(create_web_app(settings)) as client:
                ready = client.get("/readyz")
                metrics = parse(client.get("/metrics/state").text)
        assert ready.status_code == 200
        assert ready.json() == {
            "ready": True,
            "checks": {"redis": "ok", "broker": "ok", "persistence": NO_PERSISTENCE},
        }
        assert total(metrics, "agent_signal_store_persistent") == 0
        assert 0 < total(metrics, "agent_signal_store_memory_ratio") < 1
        assert any(s.name == "agent_signal_store_persistent" for s in metrics)

    def test_persistent_redis_has_no_warning(self, tmp_path: Path, make_settings: Any) -> None:
        """With appendonly on, production /readyz has only the two ordinary checks and the gauge is 1."""
        with private_redis(tmp_path, "--appendonly", "yes") as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False, env="production")
            with TestClient(create_web_app(settings)) as client:
                ready = client.get("/readyz").json()
                metrics = parse(client.get("/metrics/state").text)
        assert ready == {"ready": True, "checks": {"redis": "ok", "broker": "ok"}}
        assert total(metrics, "agent_signal_store_persistent") == 1
        assert not any(s.name == "agent_signal_store_memory_ratio" for s in metrics)  # no maxmemory set

    def test_disabled_config_is_logged_and_skipped(
        self, tmp_path: Path, make_settings: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A Redis with CONFIG renamed away (managed Redis) starts: the log says the checks were skipped."""
        with private_redis(
            tmp_path, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""
        ) as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False, env="production")
            with caplog.at_level(logging.WARNING), TestClient(create_web_app(settings)) as client:
                ready = client.get("/readyz")
        assert ready.json() == {"ready": True, "checks": {"redis": "ok", "broker": "ok"}}
        assert any("CONFIG is disabled" in r.getMessage() for r in caplog.records)


class TestFullRedis:
    def test_full_redis_refuses_the_whole_batch(self, tmp_path: Path, make_settings: Any) -> None:
        """At maxmemory (noeviction) a batch is refused whole: SDK and HTTP say so, nothing of it is stored."""
        with private_redis(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction") as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False)
            keys = BucketKeys(settings.key_prefix)
            producer = Producer(settings)
            batch = [_event("full-1", "topic:a"), _event("full-2", "topic:b"), _event("full-3", "topic:a")]
            ids = [p.event_id for p in producer.emitter.validate_many(batch)]
            _fill(url)
            with pytest.raises(StoreUnavailable, match=r"out of memory.*nothing of it was stored"):
                producer.enqueue_many(batch)
            with TestClient(create_web_app(settings, producer=producer)) as client:
                answer = client.post("/v1/events", json={"events": batch})
                ready = client.get("/readyz").json()
                http = HttpProducer("http://testserver")
                http.client = client
                waits: list[float] = []
                http.sleep = waits.append  # the retries' waits, recorded instead of slept
                with pytest.raises(StoreUnavailable, match="nothing of it was stored") as raised:
                    http.enqueue_many(batch)
            assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
            error = answer.json()["error"]
            assert error["code"] == "store_unavailable" and error["field"] is None
            assert "nothing of it was stored" in error["message"]
            assert raised.value.retry_after_s == 5
            assert waits == [5, 5]  # Retry-After honoured until the waits would pass max_wait_s (10 s)
            assert ready["ready"] is True and ready["checks"]["memory"].startswith("full: ")
            client_ = Redis.from_url(url, decode_responses=True)
            assert client_.exists(*[keys.event(i) for i in ids]) == 0
            assert client_.llen(keys.inbox("topic:a")) == client_.llen(keys.inbox("topic:b")) == 0
            client_.delete(*client_.keys("fill:*"))  # room again: the same batch goes in whole
            assert [r.status for r in producer.enqueue_many(batch)] == ["accepted"] * 3
            assert client_.llen(keys.inbox("topic:a")) == 2
            client_.close()
            producer.close()

    # Reaching the task finalizes this Celery app, which also replays earlier apps' shared task decorators.
    @pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
    def test_drain_on_a_full_redis_logs_one_line_and_keeps_the_event(
        self, tmp_path: Path, make_settings: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The drain task on a full Redis logs 'store unavailable' and returns; the event runs once there is room."""
        with private_redis(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction") as url:
            # the full-store wait's budget is a quarter of the soft limit (worker/drain/context.py): 1 s here
            settings = make_settings(
                redis_url=url, telemetry_enabled=False, task_soft_time_limit_s=4, task_time_limit_s=5
            )
            producer = Producer(settings)  # its create_app installs the in-process pipeline factory
            event = producer.enqueue(_event("drain-1", "topic:a"))
            drain = producer.app.tasks[DRAIN_TASK]
            _fill(url)
            with caplog.at_level(logging.ERROR):
                drain("default/topic:a")
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store unavailable")]
            assert len(lines) == 1 and "drain: OutOfMemoryError" in lines[0]
            # a scope names users: never in a message (worker/telemetry/log_privacy.py)
            assert "topic:a" not in lines[0]
            assert producer.status(event.event_id)["status"] == "queued"  # type: ignore[index]
            Redis.from_url(url).delete("fill:pad")
            drain("default/topic:a")
            assert producer.status(event.event_id)["status"] == "done"  # type: ignore[index]
            producer.close()


def test_any_route_answers_503_when_redis_is_gone(tmp_path: Path, make_settings: Any) -> None:
    """A read route whose Redis went away answers 503 store_unavailable with Retry-After, not a 500."""
    with ExitStack() as stack:
        with private_redis(tmp_path) as url:
            settings = make_settings(redis_url=url, telemetry_enabled=False, store_retry_after_s=9)
            client = stack.enter_context(TestClient(create_web_app(settings)))
        answer = client.get("/v1/events/evt_missing")  # the server is stopped now
    assert answer.status_code == 503 and answer.headers["retry-after"] == "9"
    error = answer.json()["error"]
    assert error["code"] == "store_unavailable" and "unreachable (ConnectionError)" in error["message"]
