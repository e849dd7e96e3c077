"""Dead outbox records (worker/outbox/dead.py), on a real Redis. A dead journal record redriven (``POST
/v1/outbox/redrive``) goes back on its bucket's journal behind every record journaled before it, whichever of the
two journal kinds it is: an ``engine.enqueue`` record (a follow-up event for another bucket) went to the unordered
due set with a millisecond score instead, and could overtake older journal records (4 scope buckets). A listing's
``cursor`` that no page gave is a 422 naming it: one whose tail is not base64 at all (``123:%%%%``) was read as an
empty member and answered a page."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from worker.chain.outbox_records import SEPARATOR, OutboxRecord, outbox_commands
from worker.core.clock import now_ms
from worker.keys.layout import Keys
from worker.outbox.dead import fail_delivered, redrive_dead
from worker.outbox.relay import OutboxRelay
from worker.settings import Settings
from worker.store.calls import OutboxSettle
from worker.store.events import EventStore
from worker.store.journal import JOURNAL_APPLY, JOURNAL_ENQUEUE, journaled
from worker.store.scripts import Scripts

pytestmark = pytest.mark.integration

SCOPE = "topic:journal-redrive"


def _dead(redis_client: Redis, keys: Keys, kind: str, record_id: str) -> str:
    """A dead journal record of ``kind`` in SCOPE's bucket, listed in its dead index; its member."""
    record = OutboxRecord(record_id, kind, record_id, {}, SCOPE, "evt_dead", 1, state="dead", attempts=10)
    redis_client.set(keys.outbox_record(SCOPE, record_id), record.to_json(), ex=3600)
    member = f"{keys.scope_ref(SCOPE)}{SEPARATOR}{record_id}"
    redis_client.zadd(keys.for_scope(SCOPE).outbox_dead, {member: 1})
    return member


def test_both_journal_kinds_are_redriven_behind_the_journal(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    """A dead ``engine.apply`` and a dead ``engine.enqueue`` record, redriven after a write was journaled: both
    wait on the journal (none on the unordered due set), after that older record."""
    store = EventStore(redis_client, make_settings(scope_buckets=4))
    keys = Keys(prefix, buckets=4)
    bucket = keys.for_scope(SCOPE)
    dead = [
        _dead(redis_client, keys, JOURNAL_APPLY, "journal:x:1"),
        _dead(redis_client, keys, JOURNAL_ENQUEUE, "follow-up:x:2"),
    ]
    home = keys.plugin_home("memories", "alice")
    for command in journaled(keys, SCOPE, "evt_1", "lane:7", [["SET", home, "older"]], 3600):
        redis_client.execute_command(*command)
    (older,) = redis_client.zrange(bucket.journal_due, 0, -1)

    answer = redrive_dead(store, keys, [(SCOPE, "journal:x:1"), (SCOPE, "follow-up:x:2")])

    assert len(answer["redriven"]) == 2 and answer["notDead"] == []
    assert redis_client.zcard(bucket.outbox_due) == 0
    assert redis_client.zrange(bucket.journal_due, 0, 0) == [older]
    assert sorted(redis_client.zrange(bucket.journal_due, 1, -1)) == sorted(dead)


@pytest.mark.parametrize("cursor", ["123:%%%%", "123:YQ%", "abc", "123:"])
def test_a_cursor_no_page_gave_is_refused(make_settings: Any, cursor: str) -> None:
    """``GET /v1/outbox/dead?cursor=…`` with a cursor that is not ``<ms>:<base64url member>``: 422 naming it."""
    with TestClient(create_web_app(make_settings())) as client:
        answer = client.get("/v1/outbox/dead", params={"cursor": cursor})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "cursor"


def test_an_empty_cursor_is_no_cursor(make_settings: Any) -> None:
    """A walk: ``?cursor=`` was a 422 here while every other list (``GET /v1/events``, ``dlq list``) reads it as
    no cursor: the first page, here too."""
    with TestClient(create_web_app(make_settings())) as client:
        answer = client.get("/v1/outbox/dead", params={"cursor": ""})
    assert answer.status_code == 200, answer.text
    assert answer.json()["records"] == []


def _record(redis_client: Redis, keys: Keys, state: str, due_ms: int | None) -> tuple[str, str]:
    """An ``agent-run`` record of SCOPE in ``state``, in the due set at ``due_ms`` (None: not there); its key and
    member."""
    record = OutboxRecord("agent-run:op1", "agent-run", "op1", {}, SCOPE, "evt_1", 1, state=state, attempts=1)  # type: ignore[arg-type]
    key = keys.outbox_record(SCOPE, record.id)
    redis_client.set(key, record.to_json(), ex=3600)
    member = f"{keys.scope_ref(SCOPE)}{SEPARATOR}{record.id}"
    if due_ms is not None:
        redis_client.zadd(keys.for_scope(SCOPE).outbox_due, {member: due_ms})
    return key, member


@pytest.mark.parametrize(
    ("state", "due_in_ms", "settled"),
    [
        ("delivered", None, True),
        ("pending", 60_000, True),  # claimed: the relay handed the work on and has not written delivered yet
        ("pending", -1, False),  # waiting for a retry or a redrive's delivery: it will be delivered again
        ("dead", None, False),
    ],
    ids=["delivered", "claimed", "unclaimed", "dead"],
)
def test_a_record_whose_work_failed_after_its_delivery(
    redis_client: Redis, prefix: str, state: str, due_in_ms: int | None, settled: bool
) -> None:
    """``fail_delivered``: a delivered record, or one still claimed by the relay that handed its work on (a run that
    failed at once could come back before the relay wrote ``delivered``, and was lost), is settled dead and listed,
    and the claim is gone, so that relay's settle writes nothing; any other writes nothing."""
    keys = Keys(prefix)
    bucket = keys.for_scope(SCOPE)
    deadline = None if due_in_ms is None else now_ms() + due_in_ms
    key, member = _record(redis_client, keys, state, deadline)
    before = redis_client.get(key)

    assert (
        fail_delivered(Scripts.register(redis_client), keys, SCOPE, "agent-run:op1", "the run failed")
        is settled
    )

    if not settled:
        assert redis_client.get(key) == before and redis_client.zscore(bucket.outbox_dead, member) is None
        return
    record = OutboxRecord.from_json(redis_client.get(key) or "")
    assert (record.state, record.last_error) == ("dead", "the run failed")
    assert redis_client.zscore(bucket.outbox_dead, member) is not None
    assert redis_client.zscore(bucket.outbox_due, member) is None
    if deadline is not None:  # the relay's settle as delivered, under its claim: refused
        delivered = OutboxRecord.from_json(before or "")
        delivered.state = "delivered"
        call = OutboxSettle(
            bucket.outbox_due, key, bucket.outbox_dead, member, deadline, delivered.to_json(), "", ""
        )
        assert EventStore(redis_client, Settings(key_prefix=prefix)).scripts.run(call) == 0
        assert OutboxRecord.from_json(redis_client.get(key) or "").state == "dead"


def test_a_record_gone_is_not_settled(redis_client: Redis, prefix: str) -> None:
    """An expired or erased record: nothing to list (the caller logs it)."""
    assert (
        fail_delivered(
            Scripts.register(redis_client), Keys(prefix), SCOPE, "agent-run:gone", "the run failed"
        )
        is False
    )


@pytest.mark.parametrize("buckets", [1, 4])
def test_a_redrive_between_the_relays_read_and_its_zrem_is_kept(
    redis_client: Redis, prefix: str, make_settings: Any, buckets: int
) -> None:
    """A dead record's key staged again puts its member back on the due set (SET NX keeps the dead record, ZADD NX
    adds the member); the relay that claims it reads it dead and drops the entry. A redrive landing between that
    read and the ZREM made the record pending and added its own entry, which the ZREM took: the record was
    pending in no set (not due, not dead) until it expired, though the redrive answered "redriven" (an audit).
    The interleaving is forced: the redrive runs inside the relay's read. With 4 buckets the journal's head takes
    the same path (an ``engine.apply`` record)."""
    store = EventStore(redis_client, make_settings(scope_buckets=buckets))
    keys = Keys(prefix, buckets=buckets)
    bucket = keys.for_scope(SCOPE)
    journal = buckets > 1
    kind, record_id = (JOURNAL_APPLY, "journal:r:1") if journal else ("probe", "probe:k")
    member = _dead(redis_client, keys, kind, record_id)
    due = bucket.journal_due if journal else bucket.outbox_due
    redis_client.zadd(due, {member: 1})  # staged again: the dead record's member is due once more
    record_key = keys.outbox_record(SCOPE, record_id)
    client, redriven = store.client, []

    class RedriveDuringTheRead:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def get(self, key: str) -> Any:
            raw = client.get(key)
            if key == record_key and not redriven:
                redriven.append(redrive_dead(store, keys, [(SCOPE, record_id)]))
            return raw

    delivered: list[str] = []
    relay = OutboxRelay(store, {kind: lambda record: delivered.append(record.id)})
    store.client = RedriveDuringTheRead()  # type: ignore[assignment]
    try:
        relay.run_once()
    finally:
        store.client = client  # type: ignore[assignment]
    assert redriven and redriven[0]["redriven"], redriven
    relay.run_once()  # the entry put back may already have been claimed by the pass that put it back
    assert delivered == [record_id], "redriven, yet in no set"
    assert OutboxRecord.from_json(redis_client.get(record_key) or "").state == "delivered"
    assert redis_client.zscore(due, member) is None


def test_a_tenant_the_store_refuses_is_skipped_and_the_others_are_delivered(
    redis_client: Redis, prefix: str, make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard walk: one tenant's slot moving failed every relay pass (TRYAGAIN on its claim), so no tenant's
    calls went out until the move ended. The refused bucket is skipped and logged; the other tenant's call goes."""
    from redis.exceptions import TryAgainError

    from worker.store.calls import OutboxClaim as Claim

    store = EventStore(redis_client, make_settings())
    for tenant in ("moving", "steady"):
        redis_client.sadd(store.keys.tenants, tenant)
        keys = Keys(prefix).for_tenant(tenant)
        record = OutboxRecord(f"{tenant}:1", "probe", f"{tenant}:1", {}, SCOPE, "evt_1", now_ms())
        for command in outbox_commands(keys, record, 3600):
            redis_client.execute_command(*command)
    moving_due = Keys(prefix).for_tenant("moving").for_scope(SCOPE).outbox_due
    run = store.scripts.run

    def refusing(call: Any) -> Any:
        if isinstance(call, Claim) and call.due == moving_due:
            raise TryAgainError("Multiple keys request during rehashing of slot")
        return run(call)

    delivered: list[str] = []
    store.scripts.run = refusing  # type: ignore[method-assign]
    OutboxRelay(store, {"probe": lambda record: delivered.append(record.id)}).run_once()
    assert delivered == ["steady:1"]
    assert (
        "outbox relay: tenant moving skipped: the tenant's slot is moving between Redis nodes" in caplog.text
    )
