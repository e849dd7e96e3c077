"""The tenant's audit stream names who did each operator action, once per change (worker/ops/audit.py): pause,
resume, cancel, redrive, discard and erasure, besides the key changes. An operator race walk found discards and
erasures audited with no actor, and pauses, resumes, cancels and redrives not audited at all. A scope key is kept
as its pseudonym: it may name a user."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.support.drains import dead_by_drain, producer_and_pipeline
from worker.keys.layout import BucketKeys

pytestmark = [pytest.mark.integration]

BOOT = "bootstrap-key-for-audit-tests-0123456789"


def test_each_operator_action_is_audited_once_with_its_actor(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, caplog: pytest.LogCaptureFixture
) -> None:
    """Each entry is logged too: a store restored from a backup takes back its stream (a restore walk)."""
    caplog.set_level(logging.INFO, logger="worker.ops.audit")
    settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0, max_attempts=1)
    boot = {"Authorization": f"Bearer {BOOT}"}
    scope = "user:audited-bob/inbox"
    with (
        producer_and_pipeline(settings) as (producer, pipeline),
        TestClient(create_web_app(settings)) as client,
    ):
        made = client.post("/v1/keys", json={"tenant": "default", "role": "operate"}, headers=boot).json()
        operator = {"Authorization": f"Bearer {made['key']}"}
        redriven, discarded = dead_by_drain(producer, pipeline, "audited", 2)
        for verb in ("pause", "pause", "resume", "resume"):  # the second finds the change made: no entry
            assert client.post(f"/v1/scopes/{scope}/{verb}", headers=operator).status_code == 200
        queued = client.post(
            "/v1/events",
            json={
                "sourceType": "test.counter",
                "sourceId": "q",
                "scopeKey": "topic:audited-q",
                "payload": {},
            },
            headers=boot,
        ).json()["results"][0]["eventId"]
        assert client.post(f"/v1/events/{queued}/cancel", headers=operator).json()["status"] == "cancelled"
        assert (
            client.post("/v1/dlq/redrive", json={"eventIds": [redriven]}, headers=operator).status_code == 200
        )
        answer = client.post(
            "/v1/dlq/discard", json={"eventIds": [discarded], "reason": "r"}, headers=operator
        )
        assert answer.json()["discarded"] == [discarded]
        assert client.delete("/v1/users/audited-bob", headers=operator).status_code == 200

    tenant = keys.for_tenant("default")
    security = [fields for _, fields in redis_client.xrange(tenant.audit) or []]
    assert [(e["action"], e["actor"]) for e in security] == [
        ("key.create", "bootstrap"),
        ("erase-user", made["id"]),
    ]
    operations = [fields for _, fields in redis_client.xrange(tenant.ops_audit) or []]
    assert [(e["action"], e["actor"]) for e in operations] == [
        (action, made["id"])
        for action in ("scope.pause", "scope.resume", "event.cancel", "redrive", "discard")
    ]
    entries = security + operations
    by_action = {e["action"]: e for e in entries}
    assert by_action["event.cancel"]["eventId"] == queued
    assert (by_action["redrive"]["eventId"], by_action["redrive"]["edited"]) == (redriven, "0")
    assert by_action["discard"]["eventId"] == discarded
    assert by_action["scope.pause"]["scope"].startswith("pn_")
    assert "audited-bob" not in json.dumps(entries)  # the scope key and the user, as pseudonyms only
    logged = [r.audit for r in caplog.records if r.name == "worker.ops.audit"]  # type: ignore[attr-defined]
    in_order = sorted(entries, key=lambda e: int(e["at"]))  # both streams, as the log lines came
    assert sorted(map(str, logged)) == sorted(
        str({k: v for k, v in e.items() if k != "at"}) for e in in_order
    )


def test_a_users_own_erasure_is_audited_without_their_id(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A user token may erase its own user; its credential id is ``<issuer>:<userId>``, which the entry's actor
    kept in the append-only stream after the erasure (a review). The actor is ``user-token:<issuer>``."""
    settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0)
    boot = {"Authorization": f"Bearer {BOOT}"}
    with TestClient(create_web_app(settings)) as client:
        made = client.post("/v1/keys", json={"tenant": "default", "role": "operate"}, headers=boot).json()
        minted = client.post(
            "/v1/tokens", json={"userId": "alice-own-id"}, headers={"Authorization": f"Bearer {made['key']}"}
        )
        token = {"Authorization": f"Bearer {minted.json()['token']}"}
        assert client.delete("/v1/users/alice-own-id", headers=token).status_code == 200
    entries = [fields for _, fields in redis_client.xrange(keys.for_tenant("default").audit) or []]
    assert [(e["action"], e["actor"]) for e in entries][-1] == ("erase-user", f"user-token:{made['id']}")
    assert "alice-own-id" not in json.dumps(entries)


def test_a_running_events_cancel_is_audited_once(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Two cancels of a running event: the first asks it to stop, the second finds it asked already and writes no
    entry (CANCEL answers whether this call set the flag; a review found both audited)."""
    from producers import Producer
    from worker.ops.scope_control import cancel_event

    producer = Producer(make_settings())
    event = {
        "sourceType": "test.counter",
        "sourceId": "running",
        "scopeKey": "topic:audited-run",
        "payload": {},
    }
    event_id = producer.enqueue(event).event_id
    redis_client.hset(producer.keys.for_scope("topic:audited-run").event(event_id), "state", "processing")
    answers = [cancel_event(producer.store, producer.keys, event_id, actor=who) for who in ("key_a", "key_b")]
    assert [(a.state, a.changed, a.now) for a in answers] == [
        ("processing", True, False),
        ("processing", False, False),
    ]
    entries = [fields for _, fields in redis_client.xrange(keys.for_tenant("default").ops_audit) or []]
    assert [(e["action"], e["actor"]) for e in entries] == [("event.cancel", "key_a")]
    producer.close()
