"""Erasure (``DELETE /v1/users/{userId}``) on a real Redis and real workers: after a user's events, memories,
skills, receipts and sessions exist, no key or value anywhere under the deployment's prefix holds the user's
id or content, another user's data is untouched, and a replay of an erased event is still a duplicate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.documents.chain_codec import DEFLATE_V1, DEFLATE_V2, ZSTD_V3, decode_chain
from worker.documents.lane_codec import ZSTD_V2 as LANE_ZSTD_V2
from worker.documents.lane_codec import decode_lane
from worker.keys.layout import BucketKeys, Keys

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

GONE, KEPT = "u-erase-7f3q", "u-keep-91cz"
MARK = {GONE: "zebra-quartz", KEPT: "otter-basalt"}


@pytest.fixture
def stack(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings()
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        yield client


def _message(user: str, source_id: str, text: str, *, topic: bool = True) -> dict[str, Any]:
    payload: dict[str, Any] = {"agentId": "agt_1", "messageId": source_id, "message": text}
    if topic:
        payload["topicId"] = f"tpc-{user}"
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": user,
        "agentId": "agt_1",
        "payload": payload,
    }


def _send(client: TestClient, event: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/events", json=event)
    assert response.status_code == 202, response.text
    return dict(response.json()["results"][0])


def _populate(client: TestClient, user: str) -> list[dict[str, Any]]:
    """Memories, a skill (and a second version), receipts, a session with context, events in a topic scope
    and in the user-derived scope ``agent:agt_1:user:<user>``."""
    mark = MARK[user]
    sent = [
        _send(client, _message(user, f"{user}-m1", f"Going forward, I prefer {mark} answers.")),
        _send(client, _message(user, f"{user}-s1", f'Please create a skill called "{mark} list": run, tag.')),
        _send(client, _message(user, f"{user}-s2", f'Update the skill "{mark} list": also bump.')),
        _send(client, _message(user, f"{user}-m2", f"Going forward, I prefer {mark} tables.", topic=False)),
    ]
    session = f"sess-{user}"
    assert (
        client.put(f"/v1/sessions/{session}", json={"userId": user, "dmailEnabled": True}).status_code == 200
    )
    body = {"messages": [{"role": "user", "content": f"my {mark} secret"}], "tokenCount": 7}
    assert client.post(f"/v1/sessions/{session}/context/messages", json=body).status_code == 200
    assert client.post(f"/v1/sessions/{session}/context/checkpoint", json={}).status_code == 200
    return sent


def _settled(client: TestClient, redis_client: Redis, tenant: Keys, user: str) -> bool:
    """Both memories and both skill versions written, and every run's receipts too (a memory is written before
    its run's completion is enqueued: the receipts, of every topic, are the run's last write)."""
    memories = client.get("/v1/memories", params={"userId": user}).json()["memories"]
    receipts = client.get("/v1/receipts", params={"userId": user}).json()["receipts"]
    kinds = [r["kind"] for r in receipts]
    buckets = tenant.every_bucket()
    idle = all(not redis_client.scard(k.scopes) and not redis_client.zcard(k.outbox_due) for k in buckets)
    return len(memories) >= 2 and kinds.count("skill") >= 2 and kinds.count("memory") >= 2 and idle


def _dump(redis_client: Redis, keys: BucketKeys) -> list[tuple[str, str]]:
    """Every key under the deployment's prefix (the broker's too) with its whole value as text."""
    out = []
    for key in redis_client.scan_iter(match=keys.all_pattern, count=1000):
        kind = redis_client.type(key)
        if kind == "string":  # chains and lanes are stored compressed: their text is what they decode to
            raw = redis_client.execute_command("GET", key, NEVER_DECODE=[])
            value: Any = (
                raw.decode("utf-8")
                # every format byte of a chain or a lane (a lane's zstd 0x02 is the byte of a chain's deflate)
                if raw[:1] not in (bytes([b]) for b in (DEFLATE_V1, DEFLATE_V2, ZSTD_V3, LANE_ZSTD_V2))
                else None
            )
            if value is None:
                value = decode_lane(raw) if ":idem:{" in key else decode_chain(raw)
        elif kind == "hash":
            value = redis_client.hgetall(key)
        elif kind == "list":
            value = redis_client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(redis_client.smembers(key))
        elif kind == "zset":
            value = redis_client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = redis_client.xrange(key)
        else:
            value = ""
        out.append((str(key), repr(value)))
    return out


def _mentions(dump: list[tuple[str, str]], *needles: str) -> list[str]:
    return [key for key, value in dump if any(n in key or n in value for n in needles)]


def test_erasure_leaves_nothing_of_the_user_and_everything_of_others(
    stack: TestClient, redis_client: Redis, keys: BucketKeys, tenant_keys: Keys
) -> None:
    gone_events = _populate(stack, GONE)
    _populate(stack, KEPT)
    for user in (GONE, KEPT):
        wait_for(
            lambda u=user: _settled(stack, redis_client, tenant_keys, u), timeout_s=90, what=f"{user}'s data"
        )
    before = _dump(redis_client, keys)
    assert _mentions(before, GONE, MARK[GONE]), "the test must start with the user's data present"
    kept_before = sorted(_mentions(before, KEPT, MARK[KEPT]))

    answer = wait_for(
        lambda: (r := stack.delete(f"/v1/users/{GONE}").json())["busyScopes"] == 0 and r,
        what="an erasure with no busy scope",
    )
    assert answer["userId"] == GONE
    assert answer["removed"]["memories"] >= 2 and answer["removed"]["receipts"] >= 2
    assert answer["removed"]["skills"] >= 1 and answer["removed"]["eventPayloads"] >= len(gone_events)

    after = _dump(redis_client, keys)
    assert _mentions(after, GONE, MARK[GONE]) == []
    assert sorted(_mentions(after, KEPT, MARK[KEPT])) == kept_before  # the other user's keys all remain
    assert len(stack.get("/v1/memories", params={"userId": KEPT}).json()["memories"]) >= 2
    assert stack.get("/v1/sessions/sess-" + KEPT + "/context").json()["messages"]

    # Tombstones: ids and statuses stay, so a replay is still recognised; nothing comes back.
    status = stack.get(f"/v1/events/{gone_events[0]['eventId']}").json()
    assert status["status"] == "done" and "erasedAt" in status
    replay = _send(stack, _message(GONE, f"{GONE}-m1", f"Going forward, I prefer {MARK[GONE]} answers."))
    assert replay["status"] == "duplicate"
    assert stack.delete(f"/v1/users/{GONE}").json()["removed"].get("memories", 0) == 0  # idempotent
    assert _mentions(_dump(redis_client, keys), MARK[GONE]) == []


def test_erasure_keeps_a_scope_that_also_holds_events_of_nobody_in_particular(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A scope with the user's event and a userless one is shared: only the user's event becomes a tombstone
    and leaves the inbox; the other stays queued, and the scope's keys stay."""
    from producers import Producer
    from sessions.store import session_scope
    from worker.ops.erasure import erase_user

    producer = Producer(make_settings(extra_source_types=["test.noop"]))
    mine = producer.enqueue(
        {
            "sourceType": "test.noop",
            "sourceId": "m1",
            "scopeKey": "topic:mixed",
            "userId": GONE,
            "payload": {},
        }
    )
    theirs = producer.enqueue(
        {"sourceType": "test.noop", "sourceId": "n1", "scopeKey": "topic:mixed", "payload": {}}
    )
    report = erase_user(
        producer.store, producer.keys, GONE, session_scope=session_scope, erasers=producer.erasers
    )
    assert report.removed["eventPayloads"] == 1 and report.removed.get("scopes", 0) == 0
    inbox = redis_client.lrange(producer.keys.for_scope("topic:mixed").inbox("topic:mixed"), 0, -1)
    assert inbox == [theirs.event_id]
    assert producer.status(theirs.event_id)["status"] == "queued"  # type: ignore[index]
    assert producer.status(mine.event_id)["status"] == "erased"  # type: ignore[index]
    assert int(producer.store.stats(producer.keys)["queued"]) == 1


def test_a_plugin_s_eraser_runs_with_the_user_s_scopes_and_its_counts_join_the_report(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The engine walks what the plugins declare: each eraser gets the tenant's keys, the user and the user's
    scopes, and what it removed is in the report (the shipped self-iteration eraser's kinds, and this one's)."""
    from producers import Producer
    from sessions.store import session_scope
    from worker.ops.erasure import erase_user

    producer = Producer(make_settings(extra_source_types=["test.noop"]))
    producer.enqueue(
        {"sourceType": "test.noop", "sourceId": "p1", "scopeKey": "topic:own", "userId": GONE, "payload": {}}
    )
    calls: list[tuple[str, str, frozenset[str]]] = []

    def mine(client: Any, tenant: Keys, user_id: str, scopes: frozenset[str]) -> dict[str, int]:
        calls.append((tenant.tenant, user_id, scopes))
        return {"widgets": int(client.delete(tenant.plugin_home("widgets", user_id)))}

    redis_client.set(keys.plugin_home("widgets", GONE), "w")
    erasers = [*producer.erasers, mine]
    report = erase_user(producer.store, producer.keys, GONE, session_scope=session_scope, erasers=erasers)
    assert calls == [("default", GONE, frozenset({"topic:own"}))]
    assert report.removed["widgets"] == 1 and not redis_client.exists(keys.plugin_home("widgets", GONE))
    assert "memories" in report.removed  # the shipped plugin's part ran too
    producer.close()


def test_a_session_is_erased_by_whom_it_names_not_by_who_sent_its_events(make_settings: Any) -> None:
    """Erasure decided a session scope by who had sent events there: a session a key moved from alice to bob was
    dropped whole (bob's context gone), and one moved from bob to alice kept her context. The session's
    settings decide now."""
    with TestClient(create_web_app(make_settings())) as client:
        for session, first, now in (("s-to-bob", "alice", "bob"), ("s-to-alice", "bob", "alice")):
            assert client.put(f"/v1/sessions/{session}", json={"userId": first}).status_code == 200
            event = _message(first, f"{session}-e1", f"{first} was here")
            event["scopeKey"] = f"session:{session}"
            _send(client, event)
            assert client.put(f"/v1/sessions/{session}", json={"userId": now}).status_code == 200
            body = {"messages": [{"role": "user", "content": f"{now}'s own words"}]}
            assert client.post(f"/v1/sessions/{session}/context/messages", json=body).status_code == 200
        erased = client.delete("/v1/users/alice")
        assert erased.status_code == 200 and erased.json()["busyScopes"] == 0, erased.text
        bobs = client.get("/v1/sessions/s-to-bob/context").json()["messages"]
        assert [m["content"] for m in bobs] == ["bob's own words"]
        assert client.get("/v1/sessions/s-to-bob").json()["userId"] == "bob"
        alices = client.get("/v1/sessions/s-to-alice/context").json()["messages"]
        assert alices == []
        assert client.get("/v1/sessions/s-to-alice").json().get("userId") is None


def test_a_session_made_again_after_an_erasure_records_its_tool_calls(make_settings: Any) -> None:
    """A session's records were numbered by counters the erasure deleted, so the session made again under the
    same id recorded ``signal:<id>:1`` again: a duplicate of the erased user's tombstone, silently dropped for
    the dedupe window, for whichever user came next. Source ids now carry the session's incarnation."""
    with TestClient(create_web_app(make_settings())) as client:

        def signal_record() -> dict[str, Any]:
            assert client.put("/v1/sessions/s-again", json={"userId": "alice"}).status_code == 200
            answered = client.post(
                "/v1/sessions/s-again/signal", json={"type": "progress", "payload": {"n": 1}}
            )
            assert answered.status_code == 200 and "agent-signal-record-error" not in answered.headers
            listed = client.get("/v1/events", params={"sourceType": "agent.signal.emitted"}).json()["events"]
            return {e["eventId"]: e for e in listed}

        first = signal_record()
        assert client.delete("/v1/users/alice").status_code == 200
        second = signal_record()
        assert len(first) == 1 and len(second) == 2, (first, second)
        (new,) = set(second) - set(first)
        assert second[new]["userId"] == "alice" and second[new]["sourceId"] != ""


def test_an_event_and_a_session_of_the_user_arriving_meanwhile_stay_findable(make_settings: Any) -> None:
    """The erasure ended by deleting the user's event and session indexes whole: an event an API key sent for the
    user while it ran (in a scope the erasure had not taken) lost its index entry, so no later erasure found its
    record or its chain, and a session claimed meanwhile the same (an audit). Only what was erased leaves the
    indexes now, and erasing again reaches the rest. The interleaving is forced by a plugin eraser, which runs
    inside the erasure."""
    from producers import Producer
    from sessions.store import session_scope
    from worker.ops.erasure import erase_user

    producer = Producer(make_settings(extra_source_types=["test.noop"]))

    def event(source_id: str, scope: str) -> dict[str, Any]:
        return {
            "sourceType": "test.noop",
            "sourceId": source_id,
            "scopeKey": scope,
            "userId": GONE,
            "payload": {},
        }

    before = producer.enqueue(event("before", "topic:before")).event_id
    during: list[str] = []

    def meanwhile(client: Any, tenant: Keys, user_id: str, scopes: frozenset[str]) -> dict[str, int]:
        during.append(producer.enqueue(event("during", "topic:during")).event_id)
        client.sadd(tenant.user_sessions(user_id), "s-during")
        return {}

    def erase(*more: Any) -> None:
        report = erase_user(
            producer.store,
            producer.keys,
            GONE,
            session_scope=session_scope,
            erasers=[*producer.erasers, *more],
        )
        assert not report.busy_scopes

    try:
        erase(meanwhile)
        client, tenant = producer.store.client, producer.keys
        assert client.zscore(tenant.for_scope("topic:before").user_events(GONE), before) is None
        assert client.zscore(tenant.for_scope("topic:during").user_events(GONE), during[0]) is not None
        assert client.sismember(tenant.user_sessions(GONE), "s-during")
        assert producer.status(during[0])["status"] == "queued"  # type: ignore[index]
        erase()
        assert producer.status(during[0])["status"] == "erased"  # type: ignore[index]
        assert not client.exists(tenant.user_sessions(GONE))
        assert not any(client.exists(k.user_events(GONE)) for k in tenant.every_bucket())
    finally:
        producer.close()


def test_an_erasure_that_met_a_busy_scope_and_is_called_again_leaves_no_index(make_settings: Any) -> None:
    """An erasure that met a busy scope tombstones the rest and keeps the user's index; called again once the
    scope is free, it finished the busy scope's events but took out only the events it found the user's, and a
    tombstone names nobody: the index (its key naming the user) stayed a day with the first run's ids (a
    review). Every entry the erasure read leaves the index now; and the session index's cleaning mark, which lives
    a minute with the user's id in its name, goes too (an audit)."""
    from producers import Producer
    from sessions.store import session_scope
    from worker.ops.erasure import erase_user

    producer = Producer(make_settings(extra_source_types=["test.noop"]))
    tenant, client = producer.keys, producer.store.client
    for scope in ("topic:free", "topic:busy"):
        event = {
            "sourceType": "test.noop",
            "sourceId": scope,
            "scopeKey": scope,
            "userId": GONE,
            "payload": {},
        }
        producer.enqueue(event)
    busy = tenant.for_scope("topic:busy").lease("topic:busy")
    client.set(busy, "a-drain|holds-it", px=600_000)
    client.set(
        tenant.user_sessions_cleaned(GONE), "1", ex=60
    )  # the session index's cleaning mark names the user

    def erase() -> list[str]:
        report = erase_user(
            producer.store, tenant, GONE, session_scope=session_scope, erasers=producer.erasers
        )
        return list(report.busy_scopes)

    try:
        assert erase() == ["topic:busy"]
        client.delete(busy)
        assert erase() == []
        assert not any(client.exists(k.user_events(GONE)) for k in tenant.every_bucket())
        assert not client.exists(tenant.user_sessions_cleaned(GONE))
    finally:
        producer.close()
