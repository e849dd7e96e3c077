"""Erasure fences out a drain whose lease ran out, on a real Redis with a real worker: ERASE_HOLD moves the scope's
fencing number (worker/store/lua/erase_hold.lua), so a holder that was paused past its TTL and resumes after the
erasure cannot apply its action's effect or commit the erased user's event."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from redis import Redis

import worker.ops.erasure as erasure
from producers import Producer
from sessions.store import session_scope
from tests.conftest import wait_for
from tests.security.data.test_erasure import _dump, _mentions
from tests.support.waiting import drain_marker
from worker.keys.layout import BucketKeys

pytestmark = [pytest.mark.integration]

GONE, OTHER, SECRET = "u-erase-fence", "u-stays-fence", "lynx-obsidian"
# A short lease, so the paused holder loses it in about a second (the erasure holds its own for 10 s at least).
SHORT_LEASE = {"lease_ttl_s": 1.0, "lease_renew_interval_s": 0.25}


def test_a_holder_paused_past_its_lease_cannot_write_after_the_users_erasure(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """SIGSTOP the drain of the erased user's event inside its first action until its lease runs out; erase the
    user; resume it. Its action's effect is refused at the fence (fenceRejected rises) and nothing of the user
    comes back: the scope is shared with another user, so it keeps its fence and only the erasure's move of that
    fence stands between the stale holder and its write."""
    settings = make_settings(**SHORT_LEASE)
    start_worker(settings)  # concurrency 1: the one pool process is the holder that is stopped
    producer = Producer(settings)
    k, scope = producer.keys, "topic:erase-fence"
    b = k.for_scope(scope)
    theirs = producer.enqueue(
        {
            "sourceType": "test.counter",
            "sourceId": "theirs-1",
            "scopeKey": scope,
            "userId": OTHER,
            "payload": {"counterKey": f"{k.home_prefix}test:c-theirs"},
        }
    ).event_id
    wait_for(lambda: (producer.status(theirs) or {}).get("status") == "done", what="the other user's event")
    mine = producer.enqueue(
        {
            "sourceType": "test.two-step",
            "sourceId": "step-1",
            "scopeKey": scope,
            "userId": GONE,
            "payload": {"note": SECRET},
        }
    ).event_id
    started, go = f"{k.home_prefix}test:two-step-started:step-1", f"{k.home_prefix}test:two-step-go:step-1"
    effect = f"{k.home_prefix}test:two-step-first:step-1"
    holder = int(wait_for(lambda: redis_client.get(started), what="the first action to start"))
    os.kill(holder, signal.SIGSTOP)
    try:
        wait_for(lambda: not redis_client.exists(b.lease(scope)), timeout_s=30, what="the lease to run out")
        report = erasure.erase_user(
            producer.store, k, GONE, session_scope=session_scope, erasers=producer.erasers
        )
        assert report.busy_scopes == []
        redis_client.set(go, "1")  # the action goes on as soon as the holder runs again
    finally:
        os.kill(holder, signal.SIGCONT)
    # one pool process: the marker runs once the resumed holder's drain has ended
    drain_marker(producer, redis_client, keys, scope, "after-erasure")
    assert producer.store.stats(k).get("fenceRejected", 0) >= 1
    assert not redis_client.exists(effect), "the stale holder applied the erased user's effect"
    assert not redis_client.exists(f"{k.home_prefix}test:two-step-second:step-1")
    assert (producer.status(mine) or {}).get("status") == "erased"
    redis_client.delete(started, go)  # the test's own instrumentation, not the user's data
    assert _mentions(_dump(redis_client, keys), GONE, SECRET) == []
    producer.close()
