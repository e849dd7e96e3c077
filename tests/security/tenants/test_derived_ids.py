"""Ids the service derives from a ``sourceId`` are distinct per tenant and user (issue 26, findings 2-5), on a
real Redis, real ``celery worker`` processes and real HTTP (an app with a bootstrap key). Two tenants, ``acme``
and ``globex``; user tokens for ``alice`` and ``bob`` of ``acme``. Each test is named after its finding."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.security.conftest import ClientFactory
from worker.keys.buckets import bucket_of
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-derived-ids-0123456789"
ALICE, BOB = "alice", "bob"


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@dataclass
class Door:
    client: TestClient
    creds: dict[str, dict[str, str]]  # "acme", "globex" (operate keys), "alice", "bob" (acme's user tokens)

    def send(self, who: str, event: dict[str, Any]) -> str:
        answer = self.client.post("/v1/events", json=event, headers=self.creds[who])
        assert answer.status_code == 202, answer.text
        return str(answer.json()["results"][0]["eventId"])

    def done(self, who: str, event_id: str) -> dict[str, Any]:
        """The event's record once done or dead, read with its tenant's key (user tokens read no runs)."""
        reader = self.creds["globex" if who == "globex" else "acme"]

        def finished() -> dict[str, Any] | None:
            record = self.client.get(f"/v1/events/{event_id}", headers=reader).json()
            return record if record.get("status") in ("done", "dead") else None

        return dict(wait_for(finished, what=f"event {event_id}"))

    def receipts(self, who: str, user: str, **narrow: str) -> list[dict[str, Any]]:
        answer = self.client.get("/v1/receipts", params={"userId": user, **narrow}, headers=self.creds[who])
        assert answer.status_code == 200, answer.text
        return list(answer.json()["receipts"])


@pytest.fixture
def door(make_settings: Any, start_worker: Any) -> Iterator[Door]:
    settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0)
    start_worker(settings, concurrency=2)
    with TestClient(create_web_app(settings)) as client:
        creds: dict[str, dict[str, str]] = {}
        for tenant in ("acme", "globex"):
            made = client.post("/v1/keys", json={"tenant": tenant, "role": "operate"}, headers=_bearer(BOOT))
            assert made.status_code == 201, made.text
            creds[tenant] = _bearer(made.json()["key"])
        for user in (ALICE, BOB):
            minted = client.post("/v1/tokens", json={"userId": user}, headers=creds["acme"])
            assert minted.status_code == 200, minted.text
            creds[user] = _bearer(minted.json()["token"])
        yield Door(client, creds)


def _completion(operation_id: str, user: str | None, summary: str) -> dict[str, Any]:
    """A finished memory run reported as the app reports it (``agent.execution.completed``)."""
    mutation = {
        "apiName": "writeMemory",
        "kind": "mutation",
        "data": {"kind": "mutation", "status": "applied", "summary": summary, "resourceId": "mem_1"},
    }
    self_iteration: dict[str, Any] = {
        "marker": {"kind": "memory", "sourceId": "msg_1:memory:msg_1", "triggerMessageId": "msg_1"},
        "mutations": [mutation],
        "artifacts": [],
    }
    if user is not None:
        self_iteration["userId"] = user
    return {
        "sourceType": "agent.execution.completed",
        "sourceId": f"{operation_id}:complete:done",
        "payload": {
            "agentId": "agt_1",
            "operationId": operation_id,
            "topicId": "tpc_1",
            "selfIteration": self_iteration,
        },
    }


def _feedback(source_id: str, text: str) -> dict[str, Any]:
    """A user message whose feedback plans a memory run (worked example A)."""
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": "tpc_1", "messageId": source_id, "message": text},
    }


def test_finding_2_a_user_reads_only_their_own_receipts(door: Door) -> None:
    """Alice and Bob each report a run of one source id (LobeHub's receipt ids come from it alone): each reads
    exactly their own receipt, by LobeHub's index and by ``userId`` alone, and never the other's text."""
    door.done(ALICE, door.send(ALICE, _completion("op_1", None, "alice likes tea")))
    door.done(BOB, door.send(BOB, _completion("op_1", None, "bob likes coffee")))
    owners = ((ALICE, "alice likes tea", "bob"), (BOB, "bob likes coffee", "alice"))
    # LobeHub's index first (where one shared receipt id leaked the other user's text), then userId alone
    lists = [(u, t, o, door.receipts(u, u, agentId="agt_1", topicId="tpc_1")) for u, t, o in owners]
    lists += [(u, t, o, door.receipts(w, u)) for u, t, o in owners for w in (u, "acme")]
    for user, text, other, listed in lists:
        assert [r["id"] for r in listed] == ["msg_1:memory:msg_1:writeMemory:0:memory"], (user, listed)
        assert listed[0]["userId"] == user and listed[0]["detail"] == text, (user, listed)
        assert other not in str(listed)
    assert (
        door.client.get("/v1/receipts", params={"userId": BOB}, headers=door.creds[ALICE]).status_code == 404
    )


def test_finding_3_a_payload_naming_another_user_plants_no_receipt(
    door: Door, redis_client: Redis, keys: BucketKeys
) -> None:
    """Alice's completion that names Bob in ``payload.selfIteration.userId`` is refused (422 naming the field):
    nothing lands in Bob's receipts. A service key's event that names two users is refused the same way."""
    planted = door.client.post(
        "/v1/events", json=_completion("op_p", BOB, "planted"), headers=door.creds[ALICE]
    )
    assert planted.status_code == 422, planted.text
    assert planted.json()["error"]["field"] == "payload.selfIteration.userId"
    mixed = {**_completion("op_m", BOB, "mixed"), "userId": ALICE}
    refused = door.client.post("/v1/events", json=mixed, headers=door.creds["acme"])
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "payload.selfIteration.userId"
    own = door.send(ALICE, _completion("op_a", ALICE, "alice's own"))
    door.done(ALICE, own)
    assert door.receipts("acme", BOB) == []
    assert [r["userId"] for r in door.receipts("acme", ALICE)] == [ALICE]
    assert not list(redis_client.scan_iter(match=keys.for_tenant("acme").receipt(BOB, "*")))


def _operation_ids(door: Door, who: str, event_id: str) -> list[str]:
    record = door.done(who, event_id)
    assert record["status"] == "done", record
    keys = [str(call["key"]) for call in record.get("outbox") or [] if call["kind"] == "agent-run"]
    assert len(keys) == 1, record
    return keys


def test_finding_4_operation_ids_differ_per_tenant_and_user(door: Door) -> None:
    """One sourceId's memory run in two tenants, and for two users of one tenant: four operation ids (the
    ``webhook-id``/``Idempotency-Key`` a receiver dedupes on), four completions, four receipts, and each
    completion runs in its own user's scope (none becomes shared)."""
    text = "Going forward, I prefer concise answers."
    sent = {
        who: door.send(
            who, {**_feedback("msg_same", text), **({"userId": "carol"} if who in ("acme", "globex") else {})}
        )
        for who in ("acme", "globex", ALICE, BOB)
    }
    operations = {who: _operation_ids(door, who, event_id) for who, event_id in sent.items()}
    assert len({op for ops in operations.values() for op in ops}) == 4, operations
    for who, user in ((ALICE, ALICE), (BOB, BOB)):
        (receipt,) = wait_for(lambda u=user, w=who: door.receipts(w, u), what=f"{user}'s receipt")
        assert receipt["operationId"] == operations[who][0] and receipt["userId"] == user
        runs = door.client.get(
            "/v1/events",
            params={"sourceType": "agent.execution.completed", "userId": user},
            headers=door.creds["acme"],
        ).json()["events"]
        assert [r["scopeKey"] for r in runs] == [f"user:{user}/topic:tpc_1"]
        detail = door.client.get(f"/v1/events/{sent[who]}", headers=door.creds["acme"]).json()
        assert [r["id"] for r in detail["receipts"]] == [receipt["id"]]  # the run's detail lists its receipts
    carol = wait_for(lambda: door.receipts("acme", "carol"), what="carol's receipt in acme")
    assert wait_for(lambda: door.receipts("globex", "carol"), what="carol's receipt in globex")
    assert carol[0]["operationId"] == operations["acme"][0]


def test_finding_5_one_users_event_never_overwrites_another_users_run_trace(door: Door) -> None:
    """Alice's and Bob's events of one source id keep two run traces: each event's chain is its own, LobeHub's
    chain id with ``userId`` picks one user's, and without it the answer lists both (409)."""
    mine = door.send(ALICE, _feedback("msg_trace", "Going forward, I prefer tea."))
    theirs = door.send(BOB, _feedback("msg_trace", "Going forward, I prefer coffee."))
    for who, event_id, text in ((ALICE, mine, "tea"), (BOB, theirs, "coffee")):
        record = door.done(who, event_id)
        assert record["chainId"] == "chain:msg_trace"  # LobeHub's chain id, as LobeHub makes it
        chain = door.client.get(f"/v1/chains/{event_id}", headers=door.creds["acme"])
        assert chain.status_code == 200, chain.text
        source = chain.json()["envelope"]["source"]
        assert source["userId"] == who and text in source["payload"]["message"]
        by_user = door.client.get(
            "/v1/chains/chain:msg_trace", params={"userId": who}, headers=door.creds["acme"]
        )
        assert by_user.json()["envelope"]["source"]["userId"] == who
    both = door.client.get("/v1/chains/chain:msg_trace", headers=door.creds["acme"])
    assert both.status_code == 409 and both.json()["error"]["code"] == "ambiguous_chain_id"
    assert {c["eventId"] for c in both.json()["candidates"]} == {mine, theirs}
    message = both.json()["error"]["message"]  # what the CLI prints: the runs, and how to pick one
    assert mine in message and theirs in message and "--user" in message
    bare = door.client.get("/v1/chains/msg_trace", headers=door.creds["acme"])  # the source id alone
    assert bare.status_code == 404 and "did you mean chain:msg_trace?" in bare.json()["error"]["message"]


def test_a_user_read_from_a_plugins_payload_field_follows_the_user_id_rule(door: Door) -> None:
    """``payload.selfIteration.userId`` is where the event's user comes from when nothing else names one; it was
    checked only for being a string, so ``u1:agent:a1:topic:t1`` wrote into u1's per-topic receipt index and
    ``u1/x`` passed the rule every other user field follows. Both are a 422 naming the field now."""
    for user in ("alice:agent:agt_1:topic:tpc_1", "alice/x", "a b"):
        sent = door.client.post("/v1/events", json=_completion("op_r", user, "x"), headers=door.creds["acme"])
        assert sent.status_code == 422, (user, sent.text)
        assert sent.json()["error"]["field"] == "payload.selfIteration.userId", sent.text
        assert "allowed: letters, digits and _ . @ + = - #" in sent.json()["error"]["message"], sent.text


@pytest.mark.parametrize("buckets", [1, 4])
def test_one_dedupe_key_of_two_users_refuses_the_second_not_answers_it_duplicate(
    app_client: ClientFactory, buckets: int
) -> None:
    """A contract audit: a key's event naming ``u2`` with the same scope, type and sourceId as ``u1``'s was
    answered ``duplicate`` with u1's event id, and u2's event never ran. It is now a 422 naming ``userId``; the
    same user's repeat is still a duplicate; with scope buckets the buckets are read first, so nothing of the
    batch is stored either (a review: a later bucket's refusal followed an earlier bucket's store)."""
    client = app_client(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0, scope_buckets=buckets)
    made = client.post("/v1/keys", json={"tenant": "acme", "role": "operate"}, headers=_bearer(BOOT))
    key = _bearer(made.json()["key"])

    def event(user: str, source_id: str = "same-1", topic: str = "shared") -> dict[str, Any]:
        return {
            "sourceType": "agent.user.message",
            "sourceId": source_id,
            "userId": user,
            "payload": {"message": "hi", "topicId": topic},
        }

    first = client.post("/v1/events", json=event("u1"), headers=key)
    assert first.status_code == 202 and first.json()["results"][0]["status"] == "accepted"
    again = client.post("/v1/events", json=event("u1"), headers=key)
    assert again.json()["results"][0] == first.json()["results"][0] | {"status": "duplicate"}
    other = client.post("/v1/events", json=event("u2"), headers=key)
    assert other.status_code == 422, other.text
    error = other.json()["error"]
    assert (error["code"], error["field"]) == ("user_mismatch", "userId")
    assert "'same-1'" in error["message"] and first.json()["results"][0]["eventId"] not in other.text
    # in one batch: the second user's event is refused, named by its place, and nothing of the batch is kept
    fresh = next(
        t
        for t in (f"t{i}" for i in range(64))
        if bucket_of(f"topic:{t}", buckets) != bucket_of("topic:b", buckets) or buckets == 1
    )
    batch = [event("u3", "new-1", fresh), event("u3", "pair-1", "b"), event("u4", "pair-1", "b")]
    refused = client.post("/v1/events", json={"events": batch}, headers=key)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "events[2].userId"
    kept = client.get("/v1/events/new-1", headers=key)
    assert kept.status_code == 404 and "bucket by bucket" not in refused.text
    # a batch of one is a batch: named by its place, as the CLI reads it
    alone = client.post("/v1/events", json={"events": [event("u5")]}, headers=key)
    assert alone.status_code == 422 and alone.json()["error"]["field"] == "events[0].userId", alone.text


@pytest.mark.parametrize("buckets", [1, 4])
@pytest.mark.parametrize("first_user", [None, "u1"])
def test_an_event_of_no_user_and_one_of_a_user_never_share_a_dedupe_key(
    app_client: ClientFactory, buckets: int, first_user: str | None
) -> None:
    """A walk: an event naming no user, then one naming u1 with the same scope, type and sourceId, was answered
    ``duplicate`` (the check compared two users only), and u1's event never ran; the other way round too. The
    second is a 422 naming ``userId`` now, each side's repeat still a duplicate, and an erased user's tombstone
    (it names nobody) still answers a replay ``duplicate``."""
    client = app_client(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0, scope_buckets=buckets)
    made = client.post("/v1/keys", json={"tenant": "acme", "role": "operate"}, headers=_bearer(BOOT))
    key = _bearer(made.json()["key"])

    def event(user: str | None) -> dict[str, Any]:
        named = {"userId": user} if user else {}
        return (
            {"sourceType": "agent.user.message", "sourceId": "same-2", "scopeKey": "topic:shared"}
            | named
            | {"payload": {"message": "hi"}}
        )

    second_user = None if first_user else "u1"
    first = client.post("/v1/events", json=event(first_user), headers=key)
    assert first.status_code == 202 and first.json()["results"][0]["status"] == "accepted", first.text
    again = client.post("/v1/events", json=event(first_user), headers=key)
    assert again.json()["results"][0]["status"] == "duplicate", again.text
    other = client.post("/v1/events", json=event(second_user), headers=key)
    assert other.status_code == 422, other.text
    error = other.json()["error"]
    assert (error["code"], error["field"]) == ("user_mismatch", "userId"), other.text
    owner = "a user's event" if first_user else "another user's event, or one that names no user"
    assert owner in error["message"], error["message"]
    if first_user:  # erased: the tombstone names nobody, and a replay of either kind is its duplicate
        erased = client.delete(f"/v1/users/{first_user}", headers=key)
        assert erased.status_code == 200, erased.text
        for user in (first_user, None):
            replay = client.post("/v1/events", json=event(user), headers=key)
            assert replay.json()["results"][0]["status"] == "duplicate", replay.text
