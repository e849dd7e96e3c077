"""Draining in this process: a producer and an in-process pipeline on the same settings, closed after
(:func:`producer_and_pipeline`, for tests that enqueue and drain one scope at a time with ``pipeline.drain_scope``),
and dead events made the way a worker makes them (:func:`dead_by_drain`): ``test.flaky`` events
(tests/support/policies.py), each in a scope of its own, drained until they die (the settings' ``max_attempts``
must be 1).

And a recovery after a kill, explained: what a recovery test that timed out needs to say where it stalled: its
scopes' records, leases, drain markers and inboxes, the fair-share ready list and drain tickets, the broker's list and kombu's unacknowledged messages, and the
worker processes (pid, state, kernel wait channel). :func:`recovery_state` reads it (keys through worker/keys);
:func:`describe` renders it one scope per line for a ``wait_for(..., explain=...)``. With ``TEST_WORKER_LOG_DIR``
set (a loop that hunts a rare failure; the worker's log is kept there too, tests/conftest.py) :class:`StateSampler`
writes it every half second as JSON lines, so a slow recovery that still passed can be read afterwards.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from redis import Redis

from producers import Producer
from worker.core.tenancy import DEFAULT_TENANT
from worker.drain.pipeline import Pipeline
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.settings import Settings
from worker.telemetry.recorder import DISABLED


@contextmanager
def producer_and_pipeline(settings: Settings) -> Iterator[tuple[Producer, Pipeline]]:
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    try:
        yield producer, pipeline
    finally:
        producer.close()
        pipeline.store.client.close()


def dead_by_drain(producer: Producer, pipeline: Pipeline, name: str, count: int) -> list[str]:
    """``count`` dead events, source ids and scopes ``<name>-<i>`` / ``topic:<name>-<i>``, in the order they died
    (each in a later millisecond of Redis's clock than the one before, so the DLQ lists them in this order)."""
    dead = []
    for i in range(count):
        scope = f"topic:{name}-{i}"
        event = {"sourceType": "test.flaky", "sourceId": f"{name}-{i}", "scopeKey": scope, "payload": {}}
        dead.append(producer.enqueue(event).event_id)
        assert pipeline.drain_scope(scope).next == "idle"
        died_by = _redis_ms(producer)  # the death was dated at or before this millisecond
        while _redis_ms(producer) <= died_by:  # the next one scores later: the DLQ lists them in this order
            pass
    return dead


def _redis_ms(producer: Producer) -> int:
    seconds, micros = producer.store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


KEEP_DIR_ENV = "TEST_WORKER_LOG_DIR"


def _message(raw: str | bytes) -> dict[str, Any]:
    """A broker message as a line: its task, id, ETA and whether kombu put it back (``redelivered``)."""
    try:
        message = json.loads(raw)
        message = message[0] if isinstance(message, list) else message  # unacked: [message, exchange, key]
        headers, props = message.get("headers", {}), message.get("properties", {})
        delivery = props.get("delivery_info") or {}
        return {
            "task": headers.get("task"),
            "id": headers.get("id"),
            "eta": headers.get("eta"),
            "redelivered": bool(delivery.get("redelivered") or headers.get("redelivered")),
        }
    except (ValueError, AttributeError):
        return {"raw": raw[:200]}


def _broker(client: Redis, keys: BucketKeys, queue: str) -> dict[str, Any]:
    """The queue's list and kombu's unacknowledged messages (with how long ago each was delivered)."""
    now = time.time()
    scored: list[tuple[Any, float]] = client.zrange(keys.broker_unacked + "_index", 0, -1, withscores=True)  # type: ignore[assignment]
    delivered = dict(scored)
    unacked = [
        {**_message(raw), "age_s": round(now - delivered[tag], 2) if tag in delivered else None}
        for tag, raw in client.hgetall(keys.broker_unacked).items()
    ]
    return {
        "queue": [_message(raw) for raw in client.lrange(keys.broker_queue(queue), 0, -1)],
        "unacked": unacked,
    }


def worker_processes(root: int | None = None) -> list[str]:
    """Every process under ``root`` (this one by default): pid, parent, state, wait channel, command line."""
    found, todo = [], [root or os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            todo.append(int(kid))
            try:
                state = Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                wchan = Path(f"/proc/{kid}/wchan").read_text()
                cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
            except OSError:
                continue
            found.append(f"{kid} parent={pid} state={state} wchan={wchan} {cmd}")
    return found


def recovery_state(
    client: Redis,
    keys: BucketKeys,
    queue: str,
    producer: Producer,
    scopes: Sequence[tuple[str, str]],
    extra: Callable[[str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The state of ``scopes`` ((scope key, event id) pairs of the default tenant) and of what drains them.
    ``extra(scope_key)``: more fields per scope (a test policy's own keys)."""
    rows = []
    for scope, event_id in scopes:
        record = producer.status(event_id) or {}
        rows.append(
            {
                "scope": scope,
                "status": record.get("status"),
                "attempts": record.get("attempts"),
                "inbox": client.llen(keys.inbox(scope)),
                "lease": client.get(keys.lease(scope)),
                "lease_pttl": client.pttl(keys.lease(scope)),
                "sched": client.get(keys.scheduled(scope)),
                "sched_pttl": client.pttl(keys.scheduled(scope)),
                **(extra(scope) if extra else {}),
            }
        )
    return {
        "t": round(time.time(), 3),
        "not_done": [row["scope"] for row in rows if row["status"] != "done"],
        "scopes": rows,
        "ready_tenants": client.lrange(keys.ready_tenants, 0, -1),
        "ready": client.lrange(keys.ready(DEFAULT_TENANT), 0, -1),
        "tickets": client.get(keys.drain_tickets),
        "tickets_pttl": client.pttl(keys.drain_tickets),
        "reconcile_lock_pttl": client.pttl(keys.reconcile_lock),
        "workers": client.hgetall(keys.workers),
        "broker": _broker(client, keys, queue),
        "processes": worker_processes(),
    }


def describe(state: dict[str, Any]) -> str:
    """``state`` for a failure message: the scopes not done one a line (all when every one is), then the rest."""
    rows = [row for row in state["scopes"] if row["status"] != "done"] or state["scopes"]
    rest = {k: v for k, v in state.items() if k not in ("scopes", "ready", "broker", "processes")}
    lines = [json.dumps(rest), f"ready ({len(state['ready'])}): {state['ready']}"]
    lines += [f"queue: {m}" for m in state["broker"]["queue"]]
    lines += [f"unacked: {m}" for m in state["broker"]["unacked"]]
    lines += [f"process: {p}" for p in state["processes"]]
    lines += [json.dumps(row) for row in rows]
    return "\n".join(lines)


class StateSampler:
    """``sample()`` written to ``out`` every half second, as JSON lines, from :meth:`start` to :meth:`end`; nothing
    without ``out`` (a plain test run)."""

    def __init__(self, out: Path | None, sample: Callable[[], dict[str, Any]]) -> None:
        self.out, self.sample = out, sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.out is not None:
            self._thread = threading.Thread(
                target=self._run, args=(self.out,), daemon=True, name="state-sampler"
            )
            self._thread.start()

    def _run(self, out: Path) -> None:
        with out.open("a") as f:
            while not self._stop.is_set():
                try:
                    f.write(json.dumps(self.sample()) + "\n")
                except Exception as exc:  # best effort: the test's own wait decides
                    f.write(json.dumps({"error": repr(exc)}) + "\n")
                f.flush()
                self._stop.wait(0.5)

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
