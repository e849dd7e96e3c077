"""The reconcile sweep and fair share's ready lists (worker/runtime/reconcile.py): a scope waiting its turn on its
tenant's ready list is not stranded, however old its drain marker. The sweep leaves it there, once, instead of
pushing another ref of it once per stale period, and makes sure a ticket is out for it as a push would (at most
the cap; at least one message sent), so a list whose messages the broker lost is popped as widely as before. The scope listing calls
such a scope ``waiting``, not ``stuck``; a list whose tenant is off the ring waits for nothing. A real Redis,
the real Celery app's publish and, where a scope must drain, a real worker process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import Proc, SettingsFactory, wait_for
from worker.keys.layout import Keys
from worker.ops.scope_control import list_scopes
from worker.runtime.app import build_pipeline, create_app, fair_queue
from worker.runtime.fair import FairQueue
from worker.runtime.reconcile import reconcile
from worker.settings import Settings
from worker.store.reads import READY_READ_BATCH
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

STALE_AFTER_MS = 4_000  # the worker's own: twice the tests' lease TTL of 2 s
SCOPES = [f"topic:backlog-{i}" for i in range(3)]


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    # drains published by send_task: no lease taken at enqueue, so every scope waits on the ready list
    return make_settings(push_drain_messages=False)


@pytest.fixture
def producer(settings: Settings) -> Iterator[Producer]:
    made = Producer(settings)
    yield made
    made.close()


@pytest.fixture
def fair(settings: Settings, producer: Producer) -> FairQueue:
    return fair_queue(settings, producer.store, create_app(settings))


def _backlog(producer: Producer, redis_client: Redis) -> list[str]:
    """One event in each of SCOPES, their drain messages lost with the broker (the ticket count left as it was),
    their markers older than the sweep's staleness: as under a backlog no worker reached. Their event ids."""
    ids = [
        producer.enqueue(
            {
                "sourceType": "test.counter",
                "sourceId": scope,
                "scopeKey": scope,
                "payload": {"counterKey": f"{producer.keys.home_prefix}test:c"},
            }
        ).event_id
        for scope in SCOPES
    ]
    queue = Keys(producer.settings.key_prefix).broker_queue(producer.settings.queue_name)
    assert redis_client.llen(queue) > 0
    redis_client.delete(queue)
    _age(producer, redis_client)
    return ids


def _ready(redis_client: Redis, producer: Producer) -> list[str]:
    return [str(ref) for ref in redis_client.lrange(producer.keys.ready(producer.keys.tenant), 0, -1)]


def _messages(redis_client: Redis, settings: Settings) -> int:
    return int(redis_client.llen(Keys(settings.key_prefix).broker_queue(settings.queue_name)))


def _sweep(producer: Producer, fair: FairQueue) -> list[str]:
    return reconcile(producer.store, fair.publish_stranded, stale_after_ms=STALE_AFTER_MS)


def _age(producer: Producer, redis_client: Redis) -> None:
    for scope in SCOPES:
        assert redis_client.pexpire(
            producer.keys.scheduled(scope), producer.store.schedule_ttl_ms - STALE_AFTER_MS - 1
        )


def test_waiting_scopes_stay_once_on_their_list_and_get_a_pushs_messages(
    producer: Producer, fair: FairQueue, redis_client: Redis, settings: Settings
) -> None:
    """Three stale scopes on the ready list, their messages lost and the ticket count gone with them: the sweep
    pushes none of them again (before, it pushed all three: six refs) and sends three messages, as pushing them
    would have. They keep their stale markers, so the next sweep looks again: three are counted out now, so it
    sends the one message a sweep always sends; with the count at its cap (messages counted that the broker
    lost) that one goes past the cap."""
    _backlog(producer, redis_client)
    redis_client.delete(producer.keys.drain_tickets)
    refs = sorted(producer.keys.scope_ref(scope) for scope in SCOPES)
    assert sorted(_ready(redis_client, producer)) == refs
    assert _sweep(producer, fair) == []
    assert sorted(_ready(redis_client, producer)) == refs
    assert _messages(redis_client, settings) == len(SCOPES)
    assert _sweep(producer, fair) == []
    assert _messages(redis_client, settings) == len(SCOPES) + 1

    redis_client.set(producer.keys.drain_tickets, settings.drain_messages_max, px=60_000)
    redis_client.delete(Keys(settings.key_prefix).broker_queue(settings.queue_name))
    assert _sweep(producer, fair) == []
    assert sorted(_ready(redis_client, producer)) == refs
    assert _messages(redis_client, settings) == 1
    assert int(redis_client.get(producer.keys.drain_tickets) or 0) == settings.drain_messages_max + 1


def test_a_scope_off_its_list_is_pushed_and_one_waiting_on_it_is_not(
    producer: Producer, fair: FairQueue, redis_client: Redis, settings: Settings
) -> None:
    """A scope whose ref left the list with no drain to show for it (a producer that died before pushing it) is
    stranded: the sweep pushes it, once, and leaves the two still waiting where they are; each of the three gets
    a message (no ticket was out)."""
    _backlog(producer, redis_client)
    redis_client.delete(producer.keys.drain_tickets)
    lost = producer.keys.scope_ref(SCOPES[0])
    assert redis_client.lrem(producer.keys.ready(producer.keys.tenant), 0, lost) == 1
    assert _sweep(producer, fair) == [lost]
    assert sorted(_ready(redis_client, producer)) == sorted(producer.keys.scope_ref(s) for s in SCOPES)
    assert _messages(redis_client, settings) == len(SCOPES)
    assert _sweep(producer, fair) == []  # its fresh marker; the two still wait
    assert len(_ready(redis_client, producer)) == len(SCOPES)


def test_a_waiting_scope_whose_ref_is_lost_after_the_sweep_is_pushed_at_the_next(
    producer: Producer, fair: FairQueue, redis_client: Redis
) -> None:
    """A sweep leaves the three waiting; then a pop takes the first one's ref and loses it (a popper killed before
    its lease, a pop whose reply was lost): no drain, no lease, no release. The waiting kept their stale markers,
    so the next sweep finds that scope on no list and pushes it (a fresh marker on it would have hidden it from
    every sweep for the staleness, and from its own next event's enqueue)."""
    _backlog(producer, redis_client)
    assert _sweep(producer, fair) == []
    lost = fair.pop()
    assert lost in {producer.keys.scope_ref(scope) for scope in SCOPES}
    assert _sweep(producer, fair) == [lost]
    assert sorted(_ready(redis_client, producer)) == sorted(producer.keys.scope_ref(s) for s in SCOPES)


def test_a_list_whose_tenant_left_the_ring_is_not_waiting(
    producer: Producer, fair: FairQueue, redis_client: Redis
) -> None:
    """A list no pop reaches (its tenant off the ring of tenants with ready scopes: an operator's DEL, a lost key)
    waits for nothing: the listing calls its scopes stuck, and the sweep pushes them, which puts the tenant back
    on the ring, where a pop finds them."""
    _backlog(producer, redis_client)
    ring = producer.keys.ready_tenants
    assert redis_client.lrem(ring, 0, producer.keys.tenant) == 1
    assert {row["state"] for row in list_scopes(producer.store, producer.keys)} == {"stuck"}
    assert sorted(_sweep(producer, fair)) == sorted(producer.keys.scope_ref(s) for s in SCOPES)
    assert redis_client.lpos(ring, producer.keys.tenant) is not None
    assert fair.pop() is not None


def test_the_listing_calls_a_scope_on_its_list_waiting_and_one_off_it_stuck(
    producer: Producer, redis_client: Redis
) -> None:
    """``GET /v1/scopes?state=stuck`` and the ``agent_signal_stuck_scopes`` gauge (both list_scopes): an old marker
    on a scope that waits its turn on the ready list is a backlog, not a scope nothing will drain."""
    _backlog(producer, redis_client)
    assert {row["state"] for row in list_scopes(producer.store, producer.keys)} == {"waiting"}
    redis_client.lrem(producer.keys.ready(producer.keys.tenant), 0, producer.keys.scope_ref(SCOPES[0]))
    states = {row["scopeKey"]: row["state"] for row in list_scopes(producer.store, producer.keys)}
    assert states == {SCOPES[0]: "stuck", SCOPES[1]: "waiting", SCOPES[2]: "waiting"}


def test_a_long_list_is_read_whole_in_batches(producer: Producer, redis_client: Redis) -> None:
    """StoreReads.ready_refs reads READY_READ_BATCH refs at a time: a list of two and a half batches is read
    whole, and a tenant off the ring has none waiting."""
    keys = producer.keys
    count = READY_READ_BATCH * 5 // 2
    refs = [keys.scope_ref(f"topic:long-{i}") for i in range(count)]
    for start in range(0, count, 1_000):
        redis_client.rpush(keys.ready(keys.tenant), *refs[start : start + 1_000])
    redis_client.lpush(keys.ready_tenants, keys.tenant)
    assert producer.store.ready_refs(keys) == set(refs)
    redis_client.lrem(keys.ready_tenants, 0, keys.tenant)
    assert producer.store.ready_refs(keys) == set()


def test_a_waiting_scope_drained_during_the_sweep_keeps_no_marker(
    producer: Producer,
    fair: FairQueue,
    redis_client: Redis,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Right as the sweep reads the list, a drain pops the first waiting scope, runs its one event and releases it,
    deleting its marker: the sweep must not write that marker back after (its next event's ENQUEUE would find it
    and schedule no drain, so the scope would wait for the marker to go stale). A waiting scope gets no marker
    from the sweep; the drain is the real pipeline's, in process."""
    _backlog(producer, redis_client)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    first = producer.keys.scope_ref(SCOPES[0])
    read = producer.store.ready_refs

    def read_while_a_drain_releases_the_first(k: Keys) -> set[str]:
        found = read(k)
        assert fair.pop() == first
        assert pipeline.drain(first).next == "idle"
        return found

    monkeypatch.setattr(producer.store, "ready_refs", read_while_a_drain_releases_the_first)
    try:
        assert _sweep(producer, fair) == []
    finally:
        monkeypatch.undo()
        pipeline.store.client.close()
    assert not redis_client.exists(producer.keys.scheduled(SCOPES[0]))
    producer.enqueue(
        {
            "sourceType": "test.counter",
            "sourceId": f"{SCOPES[0]}-next",
            "scopeKey": SCOPES[0],
            "payload": {"counterKey": f"{producer.keys.home_prefix}test:c"},
        }
    )
    assert first in _ready(redis_client, producer)  # its next event made it ready


def test_a_worker_drains_a_list_whose_messages_were_lost(
    producer: Producer,
    redis_client: Redis,
    settings: Settings,
    start_worker: Callable[..., Proc],
) -> None:
    """No message is left for the waiting scopes and the ticket count still says some are out: a worker's own
    sweep sends the message that pops them, and every event is done."""
    ids = _backlog(producer, redis_client)
    start_worker(settings)
    for event_id in ids:
        wait_for(
            lambda event_id=event_id: (producer.status(event_id) or {}).get("status") == "done",
            timeout_s=60,
            what=f"{event_id} to be done",
        )
    assert _ready(redis_client, producer) == []
