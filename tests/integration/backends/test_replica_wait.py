"""Durability across a failover (``AGENT_SIGNAL_WAIT_REPLICAS``): a primary and its replica, the primary killed
with SIGKILL and the replica promoted. Without the setting, writes the replica had not received are lost although
they were acknowledged (the test reports how many); with ``WAIT 1`` on every admission, lease grant and commit,
every acknowledged event survives, no effect is applied twice when the promoted replica finishes the work, and a
write no replica confirms is refused instead of acknowledged."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import free_port, wait_for
from tests.support.private_redis import private_redis
from worker.core.clock import now_ms
from worker.core.replication import NotReplicated
from worker.intake.emitter import StoreUnavailable
from worker.intake.refusals import InvalidEvent
from worker.keys.layout import Keys
from worker.ops.scope_control import cancel_event
from worker.plugin import UnlessErased
from worker.runtime.app import build_pipeline
from worker.runtime.fair import FairQueue
from worker.settings import Settings

pytestmark = pytest.mark.integration

SCOPES = ["topic:wait-a", "topic:wait-b", "topic:wait-c"]


def _event(i: int) -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": f"w{i}",
        "scopeKey": SCOPES[i % len(SCOPES)],
        "payload": {"message": f"hello {i}"},
    }


@contextmanager
def _primary_and_replica(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with private_redis(tmp_path) as primary:
        port = primary.rsplit(":", 1)[1].split("/")[0]
        replica_dir = tmp_path / "replica"
        replica_dir.mkdir()
        with private_redis(replica_dir, "--replicaof", "127.0.0.1", port) as replica:
            client = Redis.from_url(replica, decode_responses=True)
            wait_for(
                lambda: client.info("replication").get("master_link_status") == "up",
                what="the replica's link to its primary",
            )
            yield primary, replica


def _pid(url: str) -> int:
    return int(Redis.from_url(url).info("server")["process_id"])


def _fail_over(primary: str, replica: str) -> Redis:
    """SIGKILL the primary, promote the replica; return a client of the new primary."""
    os.kill(_pid(primary), signal.SIGKILL)
    promoted = Redis.from_url(replica, decode_responses=True)
    promoted.execute_command("REPLICAOF", "NO", "ONE")  # type: ignore[no-untyped-call]
    return promoted


def _settings(make_settings: Any, url: str, wait: int, *, timeout_ms: int = 5_000, **more: Any) -> Settings:
    """WAIT's timeout is long where a replica must confirm (a loaded machine's replica may take longer than a
    second; WAIT returns as soon as it confirms), yet under the store client's 10 s socket timeout (a read that
    times out is retried, so a WAIT as long would race it), and short only where the replica is stopped."""
    settings: Settings = make_settings(
        redis_url=url,
        telemetry_enabled=False,
        wait_replicas=wait,
        wait_replicas_timeout_ms=timeout_ms,
        **more,
    )
    return settings


def test_without_wait_acknowledged_events_can_be_lost(tmp_path: Path, make_settings: Any) -> None:
    """The replica loses its link (pointed at a port nobody serves) while events are acknowledged: after the
    failover they are gone."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        producer = Producer(_settings(make_settings, primary, wait=0))
        lagging = Redis.from_url(replica, decode_responses=True)
        lagging.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))  # type: ignore[no-untyped-call]
        results = producer.enqueue_many([_event(i) for i in range(9)])
        assert [r.status for r in results] == ["accepted"] * 9
        promoted = _fail_over(primary, replica)
        keys = producer.keys.for_bucket(0)
        lost = [r.event_id for r in results if not promoted.exists(keys.event(r.event_id))]
        print(f"without WAIT: {len(lost)} of {len(results)} acknowledged events lost in the failover")
        assert lost, "the replica was stopped: it cannot have received these writes"
        producer.close()


def test_with_wait_nothing_acknowledged_is_lost_and_nothing_runs_twice(
    tmp_path: Path, make_settings: Any
) -> None:
    with _primary_and_replica(tmp_path) as (primary, replica):
        settings = _settings(make_settings, primary, wait=1)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        results = producer.enqueue_many([_event(i) for i in range(12)])
        assert [r.status for r in results] == ["accepted"] * 12
        pipeline.drain_scope(SCOPES[0])  # its four events done (commits waited for the replica)
        keys = producer.keys.for_bucket(0)
        before = {
            s: producer.store.client.hgetall(keys.activity(s)) for s in SCOPES
        }  # the activity plugin's per-scope effect counters
        promoted = _fail_over(primary, replica)

        missing = [r.event_id for r in results if not promoted.exists(keys.event(r.event_id))]
        assert missing == [], f"acknowledged events lost in the failover: {missing}"
        states = [promoted.hget(keys.event(r.event_id), "state") for r in results]
        assert states.count("done") == 4
        assert promoted.hgetall(keys.activity(SCOPES[0])) == before[SCOPES[0]]

        # The promoted replica finishes the rest: every effect exactly once.
        after_settings = _settings(make_settings, replica, wait=0)
        survivor = build_pipeline(after_settings)
        for scope in SCOPES:
            survivor.drain_scope(scope)
        states = [promoted.hget(keys.event(r.event_id), "state") for r in results]
        assert states == ["done"] * 12
        counts = [promoted.hgetall(keys.activity(s)) for s in SCOPES]
        assert counts[0] == before[SCOPES[0]]
        assert all(c == counts[0] for c in counts), counts  # four events per scope, each counted once
        producer.close()


def test_a_write_no_replica_confirms_is_not_acknowledged(tmp_path: Path, make_settings: Any) -> None:
    """With the replica stopped, WAIT 1 times out: the door answers an error (503) instead of accepting."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        producer = Producer(_settings(make_settings, primary, wait=1, timeout_ms=500))
        replica_pid = _pid(replica)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable, match="not enough replicas confirmed it"):
                producer.enqueue(_event(0))
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        producer.close()


def test_a_grant_no_replica_confirms_is_given_back_and_counts_no_delivery(
    tmp_path: Path, make_settings: Any
) -> None:
    """A failover walk: while a promoted primary had no replica, WAIT 1 refused every grant, yet each refused
    grant kept its lease until it ran out and counted a delivery of its scope's head, so a healthy event went
    dead ("worker lost while processing") after MAX_ATTEMPTS drains. The grant is given back now, by both ways
    a drain asks for a lease (ACQUIRE; POP_ACQUIRE, one Redis's default, which a review found left out; a
    commit that pops the next scope never runs under WAIT, ``commit_pops_next``): its lease released at once,
    its attempt uncounted and the history entry it began dropped; once a replica confirms again the event runs
    as its first delivery."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        settings = _settings(make_settings, primary, wait=1, timeout_ms=200)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        event_id = producer.enqueue(_event(0)).event_id
        engine, keys = producer.keys, producer.keys.for_bucket(0)
        client = Redis.from_url(primary, decode_responses=True)
        fair = FairQueue(client, engine, None, "unused")

        def drain(path: str) -> None:
            if path == "acquire":
                pipeline.drain_scope(SCOPES[0])
                return
            client.rpush(engine.ready("default"), f"default/{SCOPES[0]}")  # what the sweep would do
            client.rpush(engine.ready_tenants, "default")
            pipeline.lease.acquire_ready(engine, fair.pop_call(), now_ms=now_ms())

        replica_pid = _pid(replica)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            for path in ["acquire", "pop_acquire"] * (settings.max_attempts // 2 + 1):  # past MAX_ATTEMPTS
                with pytest.raises(NotReplicated):
                    drain(path)
                assert client.get(keys.lease(SCOPES[0])) is None, f"the refused grant ({path}) kept its lease"
                record = client.hmget(keys.event(event_id), "state", "attempts", "history")
                assert record == ["queued", "0", None], f"the refused grant ({path}) counted an attempt"
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        pipeline.drain_scope(SCOPES[0])
        assert client.hmget(keys.event(event_id), "state", "attempts") == ["done", "1"]
        assert str(client.hget(keys.event(event_id), "history")).isdigit()  # one first attempt that succeeded
        client.close()
        producer.close()


def test_a_commit_no_replica_confirms_gives_its_grant_and_next_head_back(
    tmp_path: Path, make_settings: Any
) -> None:
    """A commit the replicas did not confirm stops its drain; when it went on to its scope's next head, the drain's
    lease was kept until it ran out and that head's attempt counted, a delivery no chain made. The grant is given
    back now: lease released, the next head's attempt uncounted."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        # one event per commit: the first commit goes on to the second event
        settings = _settings(make_settings, primary, wait=1, timeout_ms=200, commit_batch_max=1)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        first, second = (producer.enqueue(_event(i)).event_id for i in (0, len(SCOPES)))  # both topic:wait-a
        keys = producer.keys.for_bucket(0)
        client = Redis.from_url(primary, decode_responses=True)
        acquired = pipeline.lease.acquire(producer.keys, SCOPES[0], now_ms=now_ms())  # confirmed: replica up
        assert acquired[0] is not None
        replica_pid = _pid(replica)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            assert pipeline.drain(f"default/{SCOPES[0]}", acquired=acquired).next == "lost"
            assert client.get(keys.lease(SCOPES[0])) is None, "the unconfirmed commit's grant kept its lease"
            assert client.hget(keys.event(first), "state") == "done"  # applied on the primary, and kept
            record = client.hmget(keys.event(second), "state", "attempts", "history")
            assert record == ["queued", "0", None], (
                "the head the unconfirmed commit went on to counted an attempt"
            )
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        pipeline.drain_scope(SCOPES[0])
        assert client.hmget(keys.event(second), "state", "attempts") == ["done", "1"]
        client.close()
        producer.close()


def test_an_unconfirmed_commit_that_took_no_next_head_releases_its_lease(
    tmp_path: Path, make_settings: Any
) -> None:
    """A commit that does not go on (the drain's last event: ``max_events_per_drain``) keeps its lease for the
    hand-off; refused by WAIT, the drain stopped there and the lease ran out. It is released now, and the event
    behind stays queued, never begun."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        settings = _settings(make_settings, primary, wait=1, timeout_ms=200, max_events_per_drain=1)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        first, second = (producer.enqueue(_event(i)).event_id for i in (0, len(SCOPES)))  # both topic:wait-a
        keys = producer.keys.for_bucket(0)
        client = Redis.from_url(primary, decode_responses=True)
        acquired = pipeline.lease.acquire(producer.keys, SCOPES[0], now_ms=now_ms())  # confirmed: replica up
        replica_pid = _pid(replica)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            assert pipeline.drain(f"default/{SCOPES[0]}", acquired=acquired).next == "lost"
            assert client.get(keys.lease(SCOPES[0])) is None, "the unconfirmed commit's grant kept its lease"
            assert client.hget(keys.event(first), "state") == "done"
            assert client.hmget(keys.event(second), "state", "attempts") == ["queued", "0"]
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        client.close()
        producer.close()


def test_an_unconfirmed_run_that_ended_early_uncounts_the_head_it_went_on_to(
    tmp_path: Path, make_settings: Any
) -> None:
    """A run [e1, e2] whose e2 was cancelled while its chain ran: e1's commit skips e2 and begins e3, a head no
    chain of this run ran, and the run ends early (ENDED). Refused by WAIT, e3's attempt is uncounted as after
    a run that committed all it tried (a review found ENDED left out: e3 then read attempt 2 after its first
    real run). e3's chain did not run here (a run of two); with three, it would have run as a speculation,
    which commits nothing on its own."""
    with _primary_and_replica(tmp_path) as (primary, replica):
        settings = _settings(make_settings, primary, wait=1, timeout_ms=200, commit_batch_max=2)
        producer = Producer(settings)
        pipeline = build_pipeline(settings)
        ids = [producer.enqueue(_event(i)).event_id for i in (0, 3, 6)]  # all topic:wait-a
        keys = producer.keys.for_bucket(0)
        client = Redis.from_url(primary, decode_responses=True)
        acquired = pipeline.lease.acquire(producer.keys, SCOPES[0], now_ms=now_ms())  # confirmed: replica up
        replica_pid = _pid(replica)
        speculate, ran = pipeline._speculate, []

        def cancel_the_second_then_stop_the_replica(grant: Any, events: Any) -> Any:
            works = speculate(grant, events)
            ran.append([w.begun.event_id for w in works or []])
            assert cancel_event(producer.store, producer.keys, ids[1]).now
            os.kill(replica_pid, signal.SIGSTOP)
            return works

        pipeline._speculate = cancel_the_second_then_stop_the_replica  # type: ignore[method-assign]
        try:
            assert pipeline.drain(f"default/{SCOPES[0]}", acquired=acquired).next == "lost"
            assert ran == [ids[:2]], "one run of the first two events"
            assert client.get(keys.lease(SCOPES[0])) is None
            assert client.hmget(keys.event(ids[2]), "state", "attempts", "history") == ["queued", "0", None]
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        pipeline._speculate = speculate  # type: ignore[method-assign]
        pipeline.drain_scope(SCOPES[0])
        assert client.hmget(keys.event(ids[2]), "state", "attempts") == ["done", "1"]
        client.close()
        producer.close()


def test_a_scripts_refusal_reads_the_same_under_wait(tmp_path: Path, make_settings: Any) -> None:
    """With WAIT 1 the enqueue script runs in a pipeline, and redis-py words its refusals "Command # 1 (EVALSHA …)
    of pipeline caused error: USERCONFLICT …": a user conflict (422 user_mismatch) and a guard an erasure reached
    (the event answered as its hook asked) were read as store failures, a 503 (a review). They read as without WAIT."""
    with _primary_and_replica(tmp_path) as (primary, _):
        producer = Producer(_settings(make_settings, primary, wait=1))
        mine = {**_event(0), "sourceId": "shared", "userId": "u-one"}
        assert producer.enqueue(mine).status == "accepted"
        with pytest.raises(InvalidEvent) as refused:
            producer.enqueue({**mine, "userId": "u-two"})
        assert refused.value.error.code == "user_mismatch"
        origin = producer.enqueue({**_event(1), "sourceId": "origin"}).event_id
        keys = Keys(producer.settings.key_prefix).for_scope(SCOPES[1])
        client = Redis.from_url(primary, decode_responses=True)

        def hook(events: Any) -> dict[int, str | UnlessErased]:
            client.hset(keys.event(origin), "erasedAt", "1")  # after the look, before the write
            return {0: UnlessErased(origin, "gone")}

        producer.emitter.admission = (hook,)
        assert producer.enqueue({**_event(1), "sourceId": "guarded"}).status == "gone"
        client.close()
        producer.close()
