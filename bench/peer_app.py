"""The peer: what a Celery user would write instead of our pipeline, as a minimal Celery app for the bench.

One task per event, ``peer.apply_event(event_id, scope)``, acks-late like ours. :func:`apply_event` is its
whole body, in the order such a user writes it:

1. claim the event: ``SET <prefix>dedupe:<event id> <task id> NX EX 1 day`` (taken already: a duplicate,
   done, nothing written);
2. take the scope's lock, a redis-py :class:`redis.lock.Lock` (``<prefix>lock:<scope>``, 30 s timeout,
   non-blocking). Held by another task: give the claim back (``DEL``, pipelined with ``INCR <prefix>busy``,
   the bench's contention count) and retry the task with ``self.retry(countdown=0.05)``;
3. write the effect and the receipt in one ``MULTI``: ``HINCRBY <prefix>activity <scope> 1`` (the per-scope
   activity counter), ``SET <prefix>receipt:<event id> <json> EX 3 days``, ``LPUSH <prefix>receipts:<scope>
   <event id>`` (the scope's receipt index) and ``INCR <prefix>done`` (the bench's completion counter);
4. release the lock.

Running it (the bench does this, :func:`bench.peer_bench.peer_workers`)::

    PEER_REDIS_URL=redis://127.0.0.1:6379/0 PEER_KEY_PREFIX=peer-1a2b3c4d: \\
        python -m bench.peer_app worker --concurrency 1 --pool prefork

:func:`main` reads the two variables and hands the rest of the command line to ``celery worker``
(``app.worker_main``, the entry a Celery user calls; ours runs the same ``worker`` command without importing the rest of
Celery's command group, which changes its start, not its work). The Redis is both the broker and the tasks' store. Importing this module reads no environment and
opens no connection; :func:`create_peer_app` builds the app (connecting no signal), each worker child opens
its own Redis client on its first task, and :func:`main` alone adds the bench's readiness announcement. Every key, the broker's included (``global_keyprefix``), is under the prefix, so the
bench deletes them by prefix afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from celery import Celery
from celery.signals import worker_ready
from redis import Redis
from redis.lock import Lock

from worker.settings import kombu_url_for

__all__ = [
    "PEER_TASK",
    "PREFIX_ENV",
    "REDIS_URL_ENV",
    "Outcome",
    "PeerKeys",
    "apply_event",
    "create_peer_app",
    "main",
]

PEER_TASK = "peer.apply_event"
REDIS_URL_ENV = "PEER_REDIS_URL"
PREFIX_ENV = "PEER_KEY_PREFIX"
DEDUPE_TTL_S = 24 * 60 * 60  # a redelivery comes within the visibility timeout (1 h); a day is ample
RECEIPT_TTL_S = 3 * 24 * 60 * 60  # as long as our receipts (receipt_retention_s)
LOCK_TIMEOUT_S = 30.0  # as our scope lease (lease_ttl_s): a crashed holder frees the scope after 30 s
BUSY_RETRY_COUNTDOWN_S = 0.05
VISIBILITY_TIMEOUT_S = 3600  # as ours (visibility_timeout_s)


@dataclass(frozen=True)
class PeerKeys:
    """Every key the peer writes, all under ``prefix`` (one bench run's own)."""

    prefix: str

    def dedupe(self, event_id: str) -> str:
        return f"{self.prefix}dedupe:{event_id}"

    def lock(self, scope: str) -> str:
        return f"{self.prefix}lock:{scope}"

    def receipt(self, event_id: str) -> str:
        return f"{self.prefix}receipt:{event_id}"

    def receipts(self, scope: str) -> str:
        """The scope's receipt index (list of event ids, newest first)."""
        return f"{self.prefix}receipts:{scope}"

    @property
    def activity(self) -> str:
        """Per-scope activity counters (hash scope -> events applied)."""
        return f"{self.prefix}activity"

    @property
    def done(self) -> str:
        """Events applied, all scopes: the bench's completion signal."""
        return f"{self.prefix}done"

    @property
    def busy(self) -> str:
        """Times a task found its scope locked and retried itself."""
        return f"{self.prefix}busy"

    @property
    def ready(self) -> str:
        """Worker processes that are consuming (each adds one when ready)."""
        return f"{self.prefix}ready"

    @property
    def broker_prefix(self) -> str:
        return f"{self.prefix}broker:"

    @property
    def queue(self) -> str:
        return self.prefix.rstrip(":")


class Outcome(Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    BUSY = "busy"  # the scope's lock is held: the task retries itself


def apply_event(client: Redis, keys: PeerKeys, event_id: str, scope: str, claim: str) -> Outcome:
    """The peer task's body (``claim`` is the task id, kept in the dedupe key for whoever looks)."""
    if not client.set(keys.dedupe(event_id), claim, nx=True, ex=DEDUPE_TTL_S):
        return Outcome.DUPLICATE
    lock = Lock(client, keys.lock(scope), timeout=LOCK_TIMEOUT_S, blocking=False)
    if not lock.acquire():
        pipe = client.pipeline(transaction=False)
        pipe.delete(keys.dedupe(event_id))  # the retry claims it again
        pipe.incr(keys.busy)  # the bench's count of lock-busy retries (same round trip)
        pipe.execute()
        return Outcome.BUSY
    try:
        receipt = json.dumps({"eventId": event_id, "scope": scope, "at": time.time()})
        pipe = client.pipeline(transaction=True)
        pipe.hincrby(keys.activity, scope, 1)
        pipe.set(keys.receipt(event_id), receipt, ex=RECEIPT_TTL_S)
        pipe.lpush(keys.receipts(scope), event_id)
        pipe.incr(keys.done)
        pipe.execute()
    finally:
        lock.release()
    return Outcome.APPLIED


class _ChildClient:
    """One Redis client per process, opened on its first task: a prefork child never uses its parent's."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: Redis | None = None
        self.pid = 0

    def get(self) -> Redis:
        if self.client is None or self.pid != os.getpid():
            self.client = Redis.from_url(self.url, decode_responses=True)
            self.pid = os.getpid()
        return self.client


def create_peer_app(redis_url: str, prefix: str) -> Celery:
    """The peer's Celery app: JSON, acks-late, prefetch 1, its queue and broker keys under ``prefix``; the
    broker is ``redis_url`` (in kombu's spelling: an embedded Redis's ``unix://`` URL becomes
    ``redis+socket://``), and the tasks' client the same Redis."""
    keys = PeerKeys(prefix)
    app = Celery("peer", broker=kombu_url_for(redis_url), set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": VISIBILITY_TIMEOUT_S,
            "global_keyprefix": keys.broker_prefix,
        },
        task_default_queue=keys.queue,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    child = _ChildClient(redis_url)

    def run(self: Any, event_id: str, scope: str) -> None:
        if apply_event(child.get(), keys, event_id, scope, self.request.id) is Outcome.BUSY:
            raise self.retry(countdown=BUSY_RETRY_COUNTDOWN_S, max_retries=None)

    app.task(name=PEER_TASK, shared=False, bind=True, acks_late=True, ignore_result=True, max_retries=None)(
        run
    )
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.peer_app worker <celery worker flags>``: the app from the environment, then Celery."""
    args = list(sys.argv[1:] if argv is None else argv)
    redis_url, keys = os.environ[REDIS_URL_ENV], PeerKeys(os.environ[PREFIX_ENV])
    app = create_peer_app(redis_url, keys.prefix)

    def announce_ready(**_: Any) -> None:  # the bench waits for one per worker process (PeerKeys.ready)
        with Redis.from_url(redis_url) as client:
            client.incr(keys.ready)

    worker_ready.connect(announce_ready, weak=False)
    app.worker_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
