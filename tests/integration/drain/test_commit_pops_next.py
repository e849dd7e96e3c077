"""A commit that releases its scope pops the next ready scope and takes its lease in the same round trip (issue
29, spread): a drain_next message that drains scopes of one event each pays one round trip per scope (its
COMMIT), not two (POP_ACQUIRE, then COMMIT). Round trips are counted on the client; everything runs on a real
Redis, through the drain_next task's own loop (:func:`worker.runtime.tasks.drain_ready`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.support.tenants import as_tenant
from worker.core.clock import now_ms
from worker.drain.lease import ScopeLease
from worker.ops.scope_control import cancel_event, pause_scope
from worker.runtime import state
from worker.runtime.app import build_pipeline
from worker.runtime.fair import FairQueue
from worker.runtime.plugin_model import PluginRuntime
from worker.runtime.tasks import drain_ready
from worker.settings import Settings
from worker.store.events import EventStore
from worker.store.replies import CancelCode, HeadCode

pytestmark = pytest.mark.integration


class Counting(Redis):
    """A client that counts its round trips, by command (and which script, for EVALSHA)."""

    trips: list[str] = []
    scripts: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips.append(str(args[0]))
        if str(args[0]) == "EVALSHA":
            self.scripts.append(str(args[1]))
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


@dataclasses.dataclass
class Rig:
    client: Counting
    store: EventStore
    process: state.WorkerProcess

    def drain_next(self) -> int:
        """One drain_next message in this process (a Producer's app installs its own factory: ours again)."""
        state.set_factory(lambda: self.process)
        return drain_ready(None, "unused")

    def scripts_run(self) -> list[str]:
        """The scripts this client ran since its counts were cleared, by name."""
        names = {
            self.store.scripts.script(n).sha: n for n in ("pop_acquire", "commit", "ready_pop", "acquire")
        }
        return [names.get(sha, sha) for sha in self.client.scripts]


@pytest.fixture
def rig(make_settings: Any) -> Iterator[Rig]:
    settings: Settings = make_settings(max_events_per_drain=10)
    client = Counting.from_url(settings.require_redis_url(), decode_responses=True)
    client.trips, client.scripts = [], []
    store = EventStore(client, settings)
    pipeline = build_pipeline(settings)
    pipeline.ctx = dataclasses.replace(pipeline.ctx, store=store)
    pipeline.lease = ScopeLease(
        store.scripts,
        ttl_s=30.0,
        renew_interval_s=5.0,
        run=store.durable,
        window_s=store.settings.dedupe_window_s,
    )
    # no app: a hand-on fails to send and gives its ticket back (TICKET_RETURN), which the trip count would show
    fair = FairQueue(client, store.keys, None, "unused")
    for name in ("pop_acquire", "commit"):  # loaded first: a first EVALSHA is three round trips
        client.script_load(store.scripts.script(name).script)
    process = state.WorkerProcess(pipeline, fair, PluginRuntime(settings, client, store.keys))
    try:
        yield Rig(client, store, process)
    finally:
        state.set_factory(None)
        pipeline.lease.stop_renewing()
        client.close()


def _enqueue(settings: Settings, events: list[tuple[str, str]]) -> list[str]:
    """(sourceId, scopeKey) pairs enqueued in order; their event ids."""
    producer = Producer(settings)
    try:
        return [
            producer.enqueue(
                {
                    "sourceType": "bot.message.merged",
                    "sourceId": source_id,
                    "scopeKey": scope,
                    "payload": {"message": "hello", "messageId": source_id},
                }
            ).event_id
            for source_id, scope in events
        ]
    finally:
        producer.close()


def _states(rig: Rig, scopes_ids: list[tuple[str, str]]) -> list[str | None]:
    keys = rig.store.keys.for_tenant("default")
    return [rig.client.hget(keys.for_scope(scope).event(eid), "state") for scope, eid in scopes_ids]


def test_a_message_drains_lone_events_one_round_trip_each(rig: Rig) -> None:
    settings = rig.process.pipeline.settings
    pairs = [(f"chain-{i}", f"topic:chain-{i}") for i in range(4)]
    ids = _enqueue(settings, pairs)
    rig.client.set(rig.store.keys.drain_tickets, 2)  # this message's ticket and one more
    rig.client.trips.clear()
    assert rig.drain_next() == 4
    # POP_ACQUIRE for the first scope, then one COMMIT per scope: each commit popped and took the next, and the
    # last one found nothing ready and retired the message's ticket (no READY_POP of its own, no hand-on). The
    # process reads the deleted tenants (HKEYS) at most every 2 s, not per event (worker/store/deleted_tenants.py)
    assert [trip for trip in rig.client.trips if trip != "HKEYS"] == ["EVALSHA"] * 5
    assert rig.client.trips.count("HKEYS") <= 1
    assert _states(rig, [(scope, eid) for (_, scope), eid in zip(pairs, ids, strict=True)]) == ["done"] * 4
    assert rig.client.get(rig.store.keys.drain_tickets) == "1"
    for _, scope in pairs:  # every lease was released by its commit
        lease = rig.store.keys.for_tenant("default").for_scope(scope).lease(scope)
        assert rig.client.exists(lease) == 0


def test_a_scope_pops_the_next_only_once_its_inbox_is_empty(rig: Rig) -> None:
    """Two events in one scope, one in another: the first scope's commits take its own next head first."""
    settings = rig.process.pipeline.settings
    pairs = [("a-1", "topic:a"), ("b-1", "topic:b"), ("a-2", "topic:a")]
    ids = _enqueue(settings, pairs)
    rig.client.set(rig.store.keys.drain_tickets, 1)
    rig.client.scripts.clear()
    assert rig.drain_next() == 2
    assert _states(rig, [(scope, eid) for (_, scope), eid in zip(pairs, ids, strict=True)]) == ["done"] * 3
    assert rig.client.exists(rig.store.keys.drain_tickets) == 0  # retired by the last commit
    # one pop of its own; topic:a's events commit (the last one releasing it and popping topic:b), then
    # topic:b's commit finds nothing ready
    scripts = rig.scripts_run()
    assert scripts[0] == "pop_acquire" and scripts.count("pop_acquire") == 1
    assert "ready_pop" not in scripts and scripts[-1] == "commit"


def test_another_tenants_paused_scope_of_the_same_key_is_not_taken(rig: Rig) -> None:
    """The commit of acme's topic:x finds it not paused (behind its event waits a cancelled one, a head to look at:
    an empty inbox asks nothing); globex's topic:x, popped next by the same script, is paused: it is parked, not
    taken (the pause check is per tenant, not per scope key)."""
    settings = rig.process.pipeline.settings
    producer = Producer(settings)
    try:
        globex = as_tenant(producer, "globex").enqueue(
            {"sourceType": "bot.message.merged", "sourceId": "g-1", "scopeKey": "topic:x", "payload": {}}
        )
        acme = as_tenant(producer, "acme")
        acme.enqueue(
            {"sourceType": "bot.message.merged", "sourceId": "a-1", "scopeKey": "topic:x", "payload": {}}
        )
        behind = acme.enqueue(
            {"sourceType": "bot.message.merged", "sourceId": "a-2", "scopeKey": "topic:x", "payload": {}}
        )
    finally:
        producer.close()
    cancelled = cancel_event(rig.store, rig.store.keys.for_tenant("acme"), behind.event_id)
    assert cancelled.code is CancelCode.CANCELLED  # still in acme's inbox, behind a-1
    globex_keys = rig.store.keys.for_tenant("globex")
    assert pause_scope(rig.store, globex_keys, "topic:x")
    pipeline, fair = rig.process.pipeline, rig.process.fair
    rig.client.lrem(rig.store.keys.ready("globex"), 0, "globex/topic:x")  # acme's is popped first
    popped = pipeline.lease.acquire_ready(rig.store.keys, fair.pop_call(), now_ms=now_ms())
    assert popped is not None and popped[0] == "acme/topic:x"
    rig.client.rpush(rig.store.keys.ready("globex"), "globex/topic:x")
    rig.client.rpush(rig.store.keys.ready_tenants, "globex")
    then_pop = pipeline.lease.pop_next(rig.store.keys, fair.pop_call())
    outcome = pipeline.drain(popped[0], acquired=popped[1], then_pop=then_pop)
    assert outcome.processed == 1 and outcome.popped is not None and outcome.popped[0] == "globex/topic:x"
    acquired = outcome.popped[1]
    assert acquired is not None and acquired[2] is not None and acquired[2].code is HeadCode.EMPTY  # parked
    event = globex_keys.for_scope("topic:x").event(globex.event_id)
    assert rig.client.hget(event, "state") == "queued"
    assert rig.client.hget(event, "attempts") in (None, "0")


def test_a_drain_that_raises_after_its_commit_gives_the_popped_scope_back(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit popped and took topic:r-2, then the drain raised: the lease is released and the scope's drain
    published again, so it is not left leased and off the ready list until its lease runs out."""
    settings = rig.process.pipeline.settings
    _enqueue(settings, [("r-1", "topic:r-1"), ("r-2", "topic:r-2")])
    pipeline, fair = rig.process.pipeline, rig.process.fair
    published: list[str] = []
    pipeline.ctx = dataclasses.replace(pipeline.ctx, publish=published.append)

    def broken(ctx: Any, work: Any) -> None:
        raise RuntimeError("an after-commit step failed")

    monkeypatch.setattr("worker.drain.commit.after_commit", broken)
    popped = pipeline.lease.acquire_ready(rig.store.keys, fair.pop_call(), now_ms=now_ms())
    assert popped is not None and popped[0] == "default/topic:r-1"
    then_pop = pipeline.lease.pop_next(rig.store.keys, fair.pop_call())
    with pytest.raises(RuntimeError):
        pipeline.drain(popped[0], acquired=popped[1], then_pop=then_pop)
    lease = rig.store.keys.for_tenant("default").for_scope("topic:r-2").lease("topic:r-2")
    assert rig.client.exists(lease) == 0
    assert published == ["default/topic:r-2"]
    assert then_pop.reply is None  # given back: not drained by this message


def test_the_popped_scope_is_leased_to_the_drain_that_popped_it(rig: Rig) -> None:
    """Pipeline.drain with then_pop: the outcome carries the next scope's grant and head, its renewal kept."""
    settings = rig.process.pipeline.settings
    pairs = [("p-1", "topic:p-1"), ("p-2", "topic:p-2")]
    ids = _enqueue(settings, pairs)
    pipeline, fair = rig.process.pipeline, rig.process.fair
    popped = pipeline.lease.acquire_ready(rig.store.keys, fair.pop_call(), now_ms=now_ms(), holder="w")
    assert popped is not None and popped[0] == "default/topic:p-1"
    then_pop = pipeline.lease.pop_next(rig.store.keys, fair.pop_call(), holder="w")
    outcome = pipeline.drain(popped[0], holder="w", acquired=popped[1], then_pop=then_pop)
    assert (outcome.processed, outcome.next, outcome.retired) == (1, "idle", False)
    assert outcome.popped is not None and outcome.popped[0] == "default/topic:p-2"
    acquired = outcome.popped[1]
    assert acquired is not None
    grant, _, head = acquired
    assert grant is not None and head is not None and head.code is HeadCode.TAKEN
    assert head.begun is not None and head.begun.event_id == ids[1]
    assert grant.token.startswith("w|")
    lease = rig.store.keys.for_tenant("default").for_scope("topic:p-2").lease("topic:p-2")
    assert rig.client.get(lease) == grant.token
    assert pipeline.lease._current is grant  # the renewer keeps the popped scope's lease
    last = pipeline.drain(outcome.popped[0], holder="w", acquired=acquired)  # no then_pop: nothing popped
    assert (last.processed, last.next, last.popped, last.retired) == (1, "idle", None, False)
    assert rig.client.exists(lease) == 0


def test_a_scope_left_with_work_pops_nothing(rig: Rig) -> None:
    """A drain that hands its scope off (max_events_per_drain) does not pop: the scope was not released."""
    settings = rig.process.pipeline.settings
    pairs = [(f"h-{i}", "topic:h") for i in range(12)] + [("other", "topic:other")]
    _enqueue(settings, pairs)
    pipeline, fair = rig.process.pipeline, rig.process.fair
    popped = pipeline.lease.acquire_ready(rig.store.keys, fair.pop_call(), now_ms=now_ms())
    assert popped is not None and popped[0] == "default/topic:h"
    then_pop = pipeline.lease.pop_next(rig.store.keys, fair.pop_call())
    outcome = pipeline.drain(popped[0], acquired=popped[1], then_pop=then_pop)
    assert (outcome.processed, outcome.next, outcome.popped, outcome.retired) == (10, "again", None, False)
    ready = rig.client.lrange(rig.store.keys.ready("default"), 0, -1)
    assert ready == ["default/topic:other"]  # still waiting for its pop
