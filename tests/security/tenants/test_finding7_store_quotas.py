"""Finding 7 (issue 26), the quota half: one end user filled the shared Redis for everyone (tenant B then got
503 on 59 of 60 writes). There was no per-tenant or per-user quota. Now a tenant's retained events
(``AGENT_SIGNAL_TENANT_MAX_EVENTS``) and one user's stored bytes (``AGENT_SIGNAL_USER_MAX_BYTES``: memories,
skills, receipts, conversations, session context) are bounded; past one, the door answers 429
``quota_exceeded`` before anything is stored, and another tenant, or another user, is unaffected."""

from __future__ import annotations

import json
import secrets
import time
from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from policies.self_iteration.keys import SelfIterationKeys
from sessions.function_store import STATE_COUNTED_DAY
from sessions.store import (
    SESSION_BYTES,
    SessionLimits,
    SessionStore,
    TooManySessions,
    UserQuotaExceeded,
    session_keys,
    session_scope,
)
from tests.conftest import SettingsFactory, wait_for
from tests.security.conftest import ClientFactory
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore
from worker.store.quotas import DAY_MS
from worker.store.receipts import ReceiptStore

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-tests-0123456789"
SECRET = "token-secret-for-the-finding-7-tests-0123456789"


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _event(source_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "sourceType": "test.timeline",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": {},
        **extra,
    }


def _is_done(producer: Any, event_id: str) -> bool:
    return (producer.status(event_id) or {}).get("status") == "done"


def _stored_bytes(redis_client: Redis, keys: BucketKeys, tenant: str, user: str) -> int:
    raw = redis_client.hgetall(keys.for_tenant(tenant).user_bytes(user))
    return sum(int(n) for n in raw.values())


def _quota_door(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> tuple[TestClient, dict[str, str], dict[str, str], dict[str, str]]:
    """An app with a 2,000-byte user quota, and the headers of tenant acme's operate key and of its users
    alice and bob (user tokens)."""
    client: TestClient = app_client(
        bootstrap_key=BOOT, token_secret=SECRET, auth_cache_s=0, user_max_bytes=2000, rate_limit_per_s=0
    )
    store = CredentialStore(redis_client, keys, token_secret=SECRET)
    record, secret = store.create("acme", "operate")
    users = [bearer(store.mint_user_token("acme", u, issuer_key_id=record.id)[0]) for u in ("alice", "bob")]
    return client, bearer(secret), users[0], users[1]


class TestTenantEvents:
    @pytest.mark.parametrize("buckets", [1, 4])
    def test_a_tenant_past_its_retained_events_is_refused_and_another_is_not(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, buckets: int
    ) -> None:
        """With AGENT_SIGNAL_TENANT_MAX_EVENTS=5 tenant A stores 5 events; a 6th, and a batch that would pass
        the quota, are 429 quota_exceeded with Retry-After and nothing of them is stored; a duplicate of a
        stored event is still answered; tenant B stores its own. With scope buckets the same."""
        client: TestClient = app_client(
            bootstrap_key=BOOT,
            auth_cache_s=0,
            tenant_max_events=5,
            scope_buckets=buckets,
        )
        store = CredentialStore(redis_client, keys)
        tenant_a, tenant_b = store.create("tenant-a", "ingest")[1], store.create("tenant-b", "ingest")[1]
        accepted = client.post(
            "/v1/events", json={"events": [_event(f"a{i}") for i in range(5)]}, headers=bearer(tenant_a)
        )
        assert accepted.status_code == 202, accepted.text
        over = client.post("/v1/events", json=_event("a5"), headers=bearer(tenant_a))
        assert over.status_code == 429, over.text
        error = over.json()["error"]
        assert error["code"] == "quota_exceeded" and "AGENT_SIGNAL_TENANT_MAX_EVENTS" in error["message"]
        assert int(over.headers["retry-after"]) >= 1
        again = client.post(
            "/v1/events", json=_event("a4"), headers=bearer(tenant_a)
        )  # a retry stores nothing
        assert again.status_code == 202 and again.json()["results"][0]["status"] == "duplicate"
        batch = client.post(
            "/v1/events", json={"events": [_event("a6"), _event("a7")]}, headers=bearer(tenant_a)
        )
        assert batch.status_code == 429
        listed = client.get(
            "/v1/events", params={"limit": 50}, headers=bearer(store.create("tenant-a", "read")[1])
        )
        assert sorted(e["sourceId"] for e in listed.json()["events"]) == [f"a{i}" for i in range(5)]
        other = client.post(
            "/v1/events", json={"events": [_event(f"b{i}") for i in range(5)]}, headers=bearer(tenant_b)
        )
        assert other.status_code == 202, other.text

    @pytest.mark.parametrize("buckets", [1, 4])
    def test_a_large_event_counts_its_size_against_the_retained_events(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, buckets: int
    ) -> None:
        """An audit filled a 40 MB Redis through a 500,000-event quota with 180 events of 250 KiB, and the other
        tenant's small events got 503: each counted once. Now an event counts once per started share of its
        stored size (682 B at the default retentions): with a quota of 30 and ten ordinary events stored, one
        event of 16 KB (24 shares) is refused whole, while twenty more ordinary ones fit."""
        client: TestClient = app_client(
            bootstrap_key=BOOT, auth_cache_s=0, tenant_max_events=30, scope_buckets=buckets
        )
        store = CredentialStore(redis_client, keys)
        tenant_a = store.create("tenant-a", "ingest")[1]

        def send(*events: dict[str, Any]) -> Any:
            return client.post("/v1/events", json={"events": list(events)}, headers=bearer(tenant_a))

        assert send(*[_event(f"s{i}") for i in range(10)]).status_code == 202
        over = send(_event("big", payload={"blob": secrets.token_hex(8000)}))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["code"] == "quota_exceeded"
        more = send(*[_event(f"t{i}") for i in range(20)])
        assert more.status_code == 202, more.text
        assert send(_event("one-too-many")).status_code == 429


class TestUserBytes:
    def test_a_user_at_the_quota_is_refused_events_and_context_writes_and_others_are_not(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """With AGENT_SIGNAL_USER_MAX_BYTES=2000, alice's session context grows until her stored bytes reach the
        quota; then her next context write and her next event are 429 quota_exceeded (nothing stored), while bob
        of the same tenant writes and sends. Erasing alice resets her count."""
        client, operator, alice, bob = _quota_door(app_client, redis_client, keys)
        message = {"messages": [{"role": "user", "content": "x" * 450}]}
        for who in (alice, bob):
            assert (
                client.put(
                    "/v1/sessions/s-" + ("a" if who is alice else "b"), json={}, headers=who
                ).status_code
                == 200
            )
        answers = [
            client.post("/v1/sessions/s-a/context/messages", json=message, headers=alice) for _ in range(6)
        ]
        assert [a.status_code for a in answers[:4]] == [200] * 4
        refused = answers[5]
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "quota_exceeded"
        assert refused.json()["error"]["field"] == "userId", refused.text
        assert refused.json()["error"]["message"].startswith("user 'alice' already stores "), refused.text
        assert int(refused.headers["retry-after"]) >= 1  # session context expires with the session
        used = _stored_bytes(redis_client, keys, "acme", "alice")
        assert used >= 2000
        length = client.get("/v1/sessions/s-a/context", headers=alice).json()["messages"]
        assert len(length) == sum(a.status_code == 200 for a in answers)  # the refused writes stored nothing
        event = client.post("/v1/events", json=_event("alice-1"), headers=alice)
        assert event.status_code == 429 and event.json()["error"]["field"] == "userId"
        assert event.json()["error"]["code"] == "quota_exceeded"
        assert client.post("/v1/sessions/s-b/context/messages", json=message, headers=bob).status_code == 200
        assert client.post("/v1/events", json=_event("bob-1"), headers=bob).status_code == 202
        erased = client.delete("/v1/users/alice", headers=operator)
        assert erased.status_code == 200, erased.text
        assert _stored_bytes(redis_client, keys, "acme", "alice") == 0
        # her token issued before the erasure is refused: a new one sends
        minted = client.post("/v1/tokens", json={"userId": "alice"}, headers=operator)
        alice = {"Authorization": f"Bearer {minted.json()['token']}"}
        assert client.post("/v1/events", json=_event("alice-2"), headers=alice).status_code == 202

    def test_a_user_at_the_quota_or_the_session_cap_makes_no_new_session(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """An audit: a user token over its quota still made any number of sessions (200 PUTs, none counted). Now
        a new session counts SESSION_BYTES toward its user's quota, and is refused (429 quota_exceeded naming
        userId, nothing claimed) when the user is at the quota or has AGENT_SIGNAL_MAX_SESSIONS_PER_USER
        sessions; ended sessions leave the index when it is full; an operator cannot add a fourth either."""
        client: TestClient = app_client(
            bootstrap_key=BOOT,
            token_secret=SECRET,
            auth_cache_s=0,
            user_max_bytes=2000,
            rate_limit_per_s=0,
            max_sessions_per_user=3,
        )
        store = CredentialStore(redis_client, keys, token_secret=SECRET)
        record, secret = store.create("acme", "operate")
        operator = bearer(secret)
        alice, bob = (
            bearer(store.mint_user_token("acme", u, issuer_key_id=record.id)[0]) for u in ("alice", "bob")
        )
        assert [client.put(f"/v1/sessions/a-{i}", json={}, headers=alice).status_code for i in range(3)] == [
            200
        ] * 3
        assert _stored_bytes(redis_client, keys, "acme", "alice") == 3 * SESSION_BYTES
        refused = client.put("/v1/sessions/a-3", json={}, headers=alice)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded", (
            refused.text
        )
        assert refused.json()["error"]["field"] == "userId"
        assert "AGENT_SIGNAL_MAX_SESSIONS_PER_USER" in refused.json()["error"]["message"]
        assert client.get("/v1/sessions/a-3", headers=alice).status_code == 404  # not claimed
        by_operator = client.put("/v1/sessions/op-1", json={"userId": "alice"}, headers=operator)
        assert by_operator.status_code == 429 and "alice" in by_operator.text, by_operator.text
        # a session that ended (its keys expired) leaves the full index: alice may make a new one
        tenant = keys.for_tenant("acme")
        for key in session_keys(tenant, "a-0", None):
            redis_client.delete(key)
        redis_client.delete(
            tenant.user_sessions_cleaned("alice")
        )  # a minute after the refusals cleaned the index
        assert client.put("/v1/sessions/a-3", json={}, headers=alice).status_code == 200
        assert redis_client.smembers(tenant.user_sessions("alice")) == {"a-1", "a-2", "a-3"}
        # bob at his bytes quota: no new session, and nothing counted for the refused one
        assert client.put("/v1/sessions/b-0", json={}, headers=bob).status_code == 200
        message = {"messages": [{"role": "user", "content": "x" * 450}]}
        while client.post("/v1/sessions/b-0/context/messages", json=message, headers=bob).status_code == 200:
            pass
        used = _stored_bytes(redis_client, keys, "acme", "bob")
        refused = client.put("/v1/sessions/b-1", json={}, headers=bob)
        assert refused.status_code == 429 and refused.json()["error"]["message"].startswith(
            "user 'bob' already stores"
        )
        assert _stored_bytes(redis_client, keys, "acme", "bob") == used
        assert client.get("/v1/sessions/b-1", headers=bob).status_code == 404

    def test_a_full_index_is_cleaned_whole_at_most_once_a_minute(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Two reviews: a refused new session read the whole index every time (10,000 commands at the cap), and
        then a 256-entry sample refused users under the cap. A full index is cleaned whole, at most once a
        minute per user: within the minute a full index refuses without reading it."""
        tenant = keys.for_tenant("acme")
        store = SessionStore(redis_client, tenant, SessionLimits(max_sessions_per_user=300))
        index = tenant.user_sessions("ubig")
        redis_client.sadd(index, *(f"gone-{n}" for n in range(299)))  # ended: no settings
        store.claim("live-0", "ubig")  # 300 in the index, one live
        assert store.claim("s-new", "ubig") is True  # the cleanup made room: every ended entry went
        assert redis_client.smembers(index) == {"live-0", "s-new"}
        redis_client.sadd(index, *(f"gone-again-{n}" for n in range(298)))
        with pytest.raises(TooManySessions):  # cleaned within the minute: not read again
            store.claim("s-newer", "ubig")
        redis_client.delete(tenant.user_sessions_cleaned("ubig"))  # a minute later
        assert store.claim("s-newer", "ubig") is True

    def test_a_session_write_over_the_users_bytes_names_the_user(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """An event over the user's bytes is refused naming ``userId`` and the user; a session write refused for
        the same quota named neither (``field`` None, "this session's user"). Every session script's refusal
        (append, checkpoint, compaction) now carries both; the tenant's quota names no field."""
        store = SessionStore(redis_client, keys.for_tenant("acme"), SessionLimits(max_user_bytes=2000))
        store.update_settings("s-ubs", {"userId": "ubs"})
        message = [{"role": "user", "content": "x" * 450}]
        with pytest.raises(UserQuotaExceeded) as appended:
            for _ in range(8):
                store.append("s-ubs", message)
        with pytest.raises(UserQuotaExceeded) as checkpointed:
            store.checkpoint("s-ubs", add_user_message=True)
        with pytest.raises(UserQuotaExceeded) as compacted:
            store.compact("s-ubs", message, add_user_message=False)
        for refused in (appended.value, checkpointed.value, compacted.value):
            assert refused.field == "userId", refused
            assert str(refused).startswith("user 'ubs' already stores "), refused
        assert UserQuotaExceeded(5, 4, 0, tenant=True).field is None

    def test_a_change_made_before_its_record_is_refused_is_answered_with_the_refusal_named(
        self,
        app_client: ClientFactory,
        redis_client: Redis,
        keys: BucketKeys,
        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A session signal changes the function state, then records a source event; a user whom the change took
        over the quota had it made and was answered 429 (told to retry what was already applied). The change's
        own answer comes back now, with ``Agent-Signal-Record-Error: quota_exceeded``; the record is not stored."""
        client, operator, alice, _ = _quota_door(app_client, redis_client, keys)
        assert client.put("/v1/sessions/s-sig", json={}, headers=alice).status_code == 200
        # a byte under her quota: the signal's state change is let in, and it takes her over it for its record
        used = _stored_bytes(redis_client, keys, "acme", "alice")
        redis_client.hincrby(keys.for_tenant("acme").user_bytes("alice"), "keep", 1999 - used)
        signal = {"type": "need_approval", "payload": {"plan": "p"}}
        answered = client.post("/v1/sessions/s-sig/signal", json=signal, headers=alice)
        assert answered.status_code == 200, answered.text
        assert answered.headers["agent-signal-record-error"] == "quota_exceeded"
        ledger = client.get("/v1/sessions/s-sig/state", headers=alice).json()["sessionLedger"]
        assert "need_approval" in ledger
        recorded = client.get("/v1/events", params={"sourceType": "agent.signal.emitted"}, headers=operator)
        assert recorded.status_code == 200 and recorded.json()["events"] == []

        # the log names the route and the code, never the refusal's message (it names alice)
        logged = [r.getMessage() for r in caplog.records if "record was refused" in r.getMessage()]
        assert logged == [
            "POST /v1/sessions/{session_id}/signal: answered, but its agent.signal.emitted record was refused: quota_exceeded"
        ], logged
        assert "alice" not in " ".join(logged)
        # a store that fails after the change: the same answer, store_unavailable
        from worker.intake.source_event import StoreUnavailable

        producer = client.app.state.producer  # type: ignore[attr-defined]

        def unavailable(*_: Any, **__: Any) -> Any:
            raise StoreUnavailable("the store is unavailable (test)", retry_after_s=1)

        monkeypatch.setattr(producer, "enqueue", unavailable)
        again = client.post(
            "/v1/sessions/s-sig/signal",
            json={"type": "need_approval", "payload": {"plan": "q"}},
            headers=alice,
        )
        assert (
            again.status_code == 200 and again.headers["agent-signal-record-error"] == "store_unavailable"
        ), again.text

    def test_a_sessions_function_state_counts_toward_the_quota(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Artifacts and ledgers (the function state) were stored past the quota in any number of sessions: they
        count toward the user's bytes now, and growing them at the quota is 429 ``quota_exceeded`` with nothing
        stored; another user of the tenant is unaffected."""
        client, _, alice, bob = _quota_door(app_client, redis_client, keys)
        for who, session in ((alice, "s-fa"), (alice, "s-fa2"), (bob, "s-fb")):
            assert client.put(f"/v1/sessions/{session}", json={}, headers=who).status_code == 200
        first = client.put("/v1/sessions/s-fa/artifacts/a1", json={"content": "x" * 500}, headers=alice)
        assert first.status_code == 200, first.text
        counted = _stored_bytes(redis_client, keys, "acme", "alice")
        assert 500 <= counted < 2000, counted
        for content in ("w" * 500, "v" * 10, "u" * 500):  # rewritten, shrunk, grown back: counted once
            rewritten = client.put("/v1/sessions/s-fa/artifacts/a1", json={"content": content}, headers=alice)
            assert rewritten.status_code == 200, rewritten.text
        assert _stored_bytes(redis_client, keys, "acme", "alice") == counted
        second = client.put("/v1/sessions/s-fa/artifacts/a2", json={"content": "y" * 1500}, headers=alice)
        assert second.status_code == 200, second.text  # under the quota when it was written: it ends over
        assert _stored_bytes(redis_client, keys, "acme", "alice") >= counted + 1500
        for session in ("s-fa", "s-fa2"):
            refused = client.put(
                f"/v1/sessions/{session}/artifacts/a3", json={"content": "z" * 100}, headers=alice
            )
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded", (
                refused.text
            )
        artifacts = client.get("/v1/sessions/s-fa/artifacts", headers=alice).json()
        assert "a3" not in json.dumps(artifacts)
        assert (
            client.put("/v1/sessions/s-fb/artifacts/b1", json={"content": "b" * 100}, headers=bob).status_code
            == 200
        )

    def test_a_session_kept_alive_past_its_first_count_is_counted_again(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The high-water mark outlived the count it stood for: once the day of a session's first count ended,
        rewriting its artifacts within the mark stored them uncounted. Now the next write counts the whole
        document again."""
        client, _, alice, _ = _quota_door(app_client, redis_client, keys)
        assert client.put("/v1/sessions/s-old", json={}, headers=alice).status_code == 200
        artifact = {"content": "x" * 500}
        assert client.put("/v1/sessions/s-old/artifacts/a1", json=artifact, headers=alice).status_code == 200
        document = len(
            redis_client.get(keys.for_tenant("acme").functions_state(session_scope("s-old"))) or b""
        )
        # the day of the first count has ended: its bytes no longer count, and the mark says so
        counts = keys.for_tenant("acme").user_bytes("alice")
        redis_client.delete(counts)
        session_hash = keys.for_tenant("acme").session(session_scope("s-old"))
        yesterday = int(time.time() * 1000) // DAY_MS - 1
        redis_client.hset(session_hash, STATE_COUNTED_DAY, yesterday)
        assert client.put("/v1/sessions/s-old/artifacts/a1", json=artifact, headers=alice).status_code == 200
        assert _stored_bytes(redis_client, keys, "acme", "alice") == document
        assert int(redis_client.hget(session_hash, STATE_COUNTED_DAY) or 0) > yesterday  # a new first count
        # and within the new mark a rewrite is not counted again
        assert client.put("/v1/sessions/s-old/artifacts/a1", json=artifact, headers=alice).status_code == 200
        assert _stored_bytes(redis_client, keys, "acme", "alice") == document
        # a mark kept before its day was (the code before it) is taken as lapsed; at the quota a write that
        # does not grow the document is still taken (the recount frees nothing when refused), and counted
        redis_client.hdel(session_hash, STATE_COUNTED_DAY)
        redis_client.hincrby(counts, "keep", 2000)
        assert client.put("/v1/sessions/s-old/artifacts/a1", json=artifact, headers=alice).status_code == 200
        assert _stored_bytes(redis_client, keys, "acme", "alice") == 2000 + 2 * document
        grown = client.put("/v1/sessions/s-old/artifacts/a2", json=artifact, headers=alice)
        assert grown.status_code == 429, grown.text  # growing it at the quota is refused

    def test_a_pending_dmail_counts_toward_the_quota_until_its_step_ends(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The D-Mail slot was stored past the quota in any number of sessions and counted nowhere. A send is
        counted while the mail is pending (taken back at step end) and refused at the quota, nothing stored."""
        client, _, alice, _ = _quota_door(app_client, redis_client, keys)
        for session in ("s-d1", "s-d2"):
            assert (
                client.put(f"/v1/sessions/{session}", json={"dmailEnabled": True}, headers=alice).status_code
                == 200
            )
            assert (
                client.post(f"/v1/sessions/{session}/context/checkpoint", json={}, headers=alice).status_code
                == 200
            )
        before = _stored_bytes(redis_client, keys, "acme", "alice")
        mail = {"message": "m" * 900, "checkpoint_id": 0}
        sent = client.post("/v1/sessions/s-d1/dmail", json=mail, headers=alice)
        assert sent.status_code == 200 and sent.json()["isError"] is False, sent.text
        assert _stored_bytes(redis_client, keys, "acme", "alice") >= before + 900
        ended = client.post(
            "/v1/sessions/s-d1/steps/end", json={"rejectedWithoutFeedback": True}, headers=alice
        )
        assert ended.json() == {"outcome": "discarded"}
        assert (
            _stored_bytes(redis_client, keys, "acme", "alice") == before
        )  # the discarded mail is not counted
        redis_client.hincrby(keys.for_tenant("acme").user_bytes("alice"), "keep", 2000 - before)
        refused = client.post("/v1/sessions/s-d2/dmail", json=mail, headers=alice)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded", (
            refused.text
        )
        mailbox = keys.for_tenant("acme").dmail(session_scope("s-d2"))
        assert redis_client.exists(mailbox) == 0

    def test_a_pending_dmails_count_is_taken_back_only_from_the_user_it_was_counted_for(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A key moved the session from alice to bob while alice's D-Mail was pending: its step end took the
        mail's bytes off bob's count, which never held them."""
        client, operator, alice, bob = _quota_door(app_client, redis_client, keys)
        # bob's own session context, counted in the same day as the mail will be
        assert client.put("/v1/sessions/s-bob", json={}, headers=bob).status_code == 200
        body = {"messages": [{"role": "user", "content": "b" * 1200}]}
        assert client.post("/v1/sessions/s-bob/context/messages", json=body, headers=bob).status_code == 200
        assert client.put("/v1/sessions/s-mv", json={"dmailEnabled": True}, headers=alice).status_code == 200
        assert client.post("/v1/sessions/s-mv/context/checkpoint", json={}, headers=alice).status_code == 200
        mail = {"message": "m" * 900, "checkpoint_id": 0}
        assert client.post("/v1/sessions/s-mv/dmail", json=mail, headers=alice).json()["isError"] is False
        assert client.put("/v1/sessions/s-mv", json={"userId": "bob"}, headers=operator).status_code == 200
        bob_before = _stored_bytes(redis_client, keys, "acme", "bob")
        ended = client.post(
            "/v1/sessions/s-mv/steps/end", json={"rejectedWithoutFeedback": True}, headers=operator
        )
        assert ended.json() == {"outcome": "discarded"}
        assert _stored_bytes(redis_client, keys, "acme", "bob") == bob_before

    def test_what_the_worker_writes_for_a_user_counts_toward_the_quota(
        self, make_settings: SettingsFactory, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A real worker logs alice's messages into her conversation; once her stored bytes reach the quota her
        next event is refused at the door, while bob's is accepted."""
        from producers import Producer
        from worker.core.errors import OverLimit

        settings = make_settings(user_max_bytes=1500)
        start_worker(settings)
        producer = Producer(settings)
        text = "y" * 400
        sent = 0
        with pytest.raises(OverLimit) as refused:
            for i in range(20):
                event = {
                    "sourceType": "agent.user.message",
                    "sourceId": f"m{i}",
                    "userId": "alice",
                    "agentId": "agt_1",
                    "payload": {
                        "agentId": "agt_1",
                        "topicId": "tpc_1",
                        "messageId": f"m{i}",
                        "message": text,
                    },
                }
                result = producer.enqueue(event)
                sent += 1
                done = partial(_is_done, producer, result.event_id)
                wait_for(done, what="the event done")
        assert refused.value.what == "user_bytes" and 3 <= sent <= 5
        assert _stored_bytes(redis_client, keys, "default", "alice") >= 1500
        bob = {
            "sourceType": "agent.user.message",
            "sourceId": "b1",
            "userId": "bob",
            "payload": {"message": "hi"},
        }
        assert producer.enqueue(bob).status == "accepted"
        producer.close()


def test_receipts_memories_and_skills_are_counted_for_their_user(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A receipt counts its body until it expires; a memory and a skill count their JSON (kept)."""
    from policies.self_iteration.records.documents import DocumentStore
    from worker.store.quotas import user_bytes_field

    receipts = ReceiptStore(redis_client, keys, ttl_s=3600)
    receipt = {
        "id": "r1",
        "userId": "carol",
        "agentId": "a",
        "topicId": "t",
        "createdAt": 1,
        "kind": "memory",
    }
    assert receipts.append(receipt)
    counted = redis_client.hgetall(keys.user_bytes("carol"))
    assert list(counted) == [user_bytes_field(3600)] and int(next(iter(counted.values()))) > 50
    docs = DocumentStore(redis_client, keys)
    docs.write_memory("carol", source_id="s1", layer="context", title="t", summary="remember this")
    docs.upsert_skill("carol", "a", title="Checklist", content="one", source_id="s2")
    docs.upsert_skill("carol", "a", title="Checklist", content="two", source_id="s3")
    kept = int(redis_client.hget(keys.user_bytes("carol"), "keep") or 0)
    stored = [
        redis_client.hvals(k)
        for k in (
            SelfIterationKeys(keys).memories("carol"),
            SelfIterationKeys(keys).skills("carol", "a"),
            SelfIterationKeys(keys).skill_runs("carol", "a"),
        )
    ]
    history = sum(
        len(v.encode())
        for k in redis_client.scan_iter(f"{keys.home_prefix}skill-history:*")
        for v in redis_client.hvals(k)
    )
    assert kept == sum(len(v.encode()) for values in stored for v in values) + history


def test_counts_of_ended_windows_and_days_are_not_counted_and_are_forgotten(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A retained-events slot older than the dedupe window and a user's byte count of a day that has ended
    neither count toward a quota nor stay: the next admission deletes them."""
    import time

    from producers import Producer
    from worker.store.quotas import retained_slot_ms

    settings = make_settings(tenant_max_events=3, user_max_bytes=100)
    slot = int(time.time() * 1000) // retained_slot_ms(settings.dedupe_window_s)
    redis_client.hset(keys.retained_events, mapping={str(slot - 30): 1000, str(slot - 1): 1})
    redis_client.hset(keys.user_bytes("dave"), mapping={"d1": 5000, "keep": 10})
    producer = Producer(settings)
    done = producer.enqueue_many([_event("old-1", userId="dave"), _event("old-2", userId="dave")])
    assert [r.status for r in done] == ["accepted", "accepted"]
    # the enqueue took its own clock: when an hour's slot ended meanwhile, its events count in the next one
    slot_after = int(time.time() * 1000) // retained_slot_ms(settings.dedupe_window_s)
    assert redis_client.hgetall(keys.retained_events) in [
        {str(slot - 1): "1", str(now): "2"} for now in sorted({slot, slot_after})
    ]
    assert redis_client.hgetall(keys.user_bytes("dave")) == {"keep": "10"}
    producer.close()
