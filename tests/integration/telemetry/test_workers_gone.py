"""What /metrics/state says when every worker is gone (worker/ops/state_metrics.py). A walk stopped every worker
for minutes while producers kept sending: /readyz stayed 200 (rightly: the door stores events), and the backlog,
the stuck-scopes gauge and the console's cards only grew, with no series saying that no worker ran nor how long
the oldest event had waited. ``agent_signal_workers`` and ``agent_signal_backlog_oldest_seconds`` say both. A real
worker process, stopped the way a rollout stops it (SIGTERM), and real Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import Proc, wait_for
from tests.support.prom import parse, total
from tests.support.waiting import wait_final
from worker.core.tenancy import DEFAULT_TENANT
from worker.ops.state_metrics import state_exposition
from worker.store.events import EventStore

pytestmark = pytest.mark.integration

SCOPE = "topic:workers-gone"


def test_the_state_gauges_say_no_worker_runs_and_how_long_the_oldest_event_waited(
    make_settings: Any, start_worker: Callable[..., Proc], redis_client: Redis
) -> None:
    settings = make_settings()
    store = EventStore(redis_client, settings)

    def gauge(name: str, **labels: str) -> float:
        return total(parse(state_exposition(store, settings.queue_name).decode()), name, **labels)

    worker = start_worker(settings)
    assert gauge("agent_signal_workers") == 1
    worker.stop()  # a warm shutdown removes the worker's beat
    assert gauge("agent_signal_workers") == 0
    producer = Producer(settings)
    try:
        event = {"sourceType": "bot.message.merged", "sourceId": "gone-1", "scopeKey": SCOPE, "payload": {}}
        event_id = producer.enqueue(event).event_id
        wait_for(
            lambda: gauge("agent_signal_backlog_oldest_seconds", tenant=DEFAULT_TENANT) > 0,
            what="the oldest waiting event's age to show",
        )
        first = gauge("agent_signal_backlog_oldest_seconds", tenant=DEFAULT_TENANT)
        wait_for(  # it grows while nothing drains
            lambda: gauge("agent_signal_backlog_oldest_seconds", tenant=DEFAULT_TENANT) > first,
            what="the age to grow",
        )
        start_worker(settings)
        keys = store.keys.for_tenant(DEFAULT_TENANT).for_scope(SCOPE)
        assert wait_final(redis_client, keys, event_id) == "done"
        assert gauge("agent_signal_backlog_oldest_seconds", tenant=DEFAULT_TENANT) == 0
        assert gauge("agent_signal_workers") == 1
    finally:
        producer.close()
