"""Deleting a tenant (``DELETE /v1/tenants/{tenant}``, worker/ops/tenant_deletion.py) on a real Redis with a real
worker: after two tenants' users have memories, skills, receipts, sessions and events, deleting one leaves no key of
it under the deployment's prefix and no trace of its users' content anywhere, its keys and their user tokens stop
working, no key of it can be made while the deletion runs (and can once it is done), and the other tenant's keys
and values are as they were."""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.security.data.test_erasure import _dump as dump_keyspace
from tests.support.policies import REFUSE_TASK
from worker.core.errors import TenantDeleted
from worker.core.tenancy import working_for
from worker.keys.layout import BucketKeys, Keys
from worker.ops.credentials import CredentialError, CredentialStore
from worker.ops.tenant_deletion import (
    DONE_ANSWERED_S,
    DeletionProgress,
    DeletionRunning,
    Settle,
    delete_tenant,
)
from worker.runtime.tasks import publish_task

# the store-path tests run with 1 and with 4 scope buckets (marked); the CLI's and the call rules' once
pytestmark = [pytest.mark.integration]

BOOT = "bootstrap-key-for-tenant-deletion-0123456789"
GONE, KEPT = "acme", "beta"
MARK = {GONE: "zebra-quartz", KEPT: "otter-basalt"}  # the content each tenant's user sends
HOUR = Settle(after_revoke_ms=3_600_000)  # requests let in before the revoke may write for an hour


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
def stack(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        yield client


def until_done(client: Redis, keys: Keys, tenant: str, *, settle: Settle | None = None) -> DeletionProgress:
    """Calls of the deletion until it is done (at least 3 s after its first: every process has read its
    tombstone), waiting what each says; the last answer with ``removed`` and ``keys_revoked`` summed."""
    store, revoked, removed = CredentialStore(client, keys), 0, 0
    while True:
        step = delete_tenant(client, keys, store, tenant, actor="test", settle=settle or Settle())
        revoked, removed = revoked + step.keys_revoked, removed + step.removed
        if step.state == "done":
            return dataclasses.replace(step, keys_revoked=revoked, removed=removed)
        time.sleep(step.retry_after_s)


def _admin(client: TestClient, tenant: str) -> dict[str, str]:
    made = client.post("/v1/keys", json={"tenant": tenant, "role": "admin"}, headers=_bearer(BOOT))
    assert made.status_code == 201, made.text
    return _bearer(made.json()["key"])


def _populate(client: TestClient, tenant: str, auth: dict[str, str]) -> None:
    """A memory, a skill, their receipts, a session with context, and events in two scopes."""
    mark, user = MARK[tenant], f"{tenant}-user"
    for source_id, text in (
        ("m1", f"Going forward, I prefer {mark} answers."),
        ("s1", f'Please create a skill called "{mark} list": run, tag.'),
    ):
        event = {
            "sourceType": "agent.user.message",
            "sourceId": source_id,
            "userId": user,
            "agentId": "agt_1",
            "payload": {"agentId": "agt_1", "messageId": source_id, "message": text, "topicId": "tpc-1"},
        }
        sent = client.post("/v1/events", json=event, headers=auth)
        assert sent.status_code == 202, sent.text
    session = client.put(f"/v1/sessions/sess-{tenant}", json={"userId": user}, headers=auth)
    assert session.status_code == 200, session.text
    body = {"messages": [{"role": "user", "content": f"my {mark} secret"}], "tokenCount": 7}
    assert (
        client.post(f"/v1/sessions/sess-{tenant}/context/messages", json=body, headers=auth).status_code
        == 200
    )


def _settled(client: TestClient, redis_client: Redis, tenant: Keys, auth: dict[str, str]) -> bool:
    user = f"{tenant.tenant}-user"
    receipts = client.get("/v1/receipts", params={"userId": user}, headers=auth).json()["receipts"]
    kinds = [r["kind"] for r in receipts]
    idle = all(
        not redis_client.scard(k.scopes) and not redis_client.zcard(k.outbox_due)
        for k in tenant.every_bucket()
    )
    return "memory" in kinds and "skill" in kinds and idle


def _dump(redis_client: Redis, prefix: str, pattern: str) -> dict[str, str]:
    """Every key under ``prefix`` matching ``pattern`` (a SCAN pattern: ``[}.]`` reads the same in fnmatch) with its
    whole value as text, as the erasure test reads the keyspace (chains and lanes decoded)."""
    every = dump_keyspace(redis_client, BucketKeys(prefix))
    return {k: v for k, v in every if fnmatch.fnmatchcase(k, pattern)}


@pytest.mark.buckets
def test_deleting_a_tenant_leaves_nothing_of_it_and_everything_of_another(
    stack: TestClient, redis_client: Redis, prefix: str, scope_buckets: int
) -> None:
    keys = Keys(prefix, buckets=scope_buckets)
    gone, kept = keys.for_tenant(GONE), keys.for_tenant(KEPT)
    auth = {GONE: _admin(stack, GONE), KEPT: _admin(stack, KEPT)}
    minted = stack.post("/v1/tokens", json={"userId": f"{GONE}-user"}, headers=auth[GONE])
    token = _bearer(minted.json()["token"])
    for tenant in (GONE, KEPT):
        _populate(stack, tenant, auth[tenant])
    for tenant in (gone, kept):
        wait_for(
            lambda t=tenant: _settled(stack, redis_client, t, auth[t.tenant]),
            timeout_s=90,
            what=f"{tenant.tenant}'s memories, skills and receipts",
        )
    everything = _dump(redis_client, prefix, BucketKeys(prefix).all_pattern)
    assert any(MARK[GONE] in value for value in everything.values()), (
        "the test must start with its content stored"
    )
    assert _dump(redis_client, prefix, gone.tenant_pattern), (
        "the test must start with the tenant's keys stored"
    )
    kept_before = _dump(redis_client, prefix, kept.tenant_pattern)

    # only the operator's root credentials delete a tenant; default is the bootstrap key's own
    refused = stack.delete(f"/v1/tenants/{GONE}", headers=auth[GONE])
    assert refused.status_code == 403, refused.text
    default = stack.delete("/v1/tenants/default", headers=_bearer(BOOT))
    assert (default.status_code, default.json()["error"]["field"]) == (422, "tenant"), default.text
    bad = stack.delete("/v1/tenants/Acme!", headers=_bearer(BOOT))
    assert (bad.status_code, bad.json()["error"]["field"]) == (422, "tenant"), bad.text

    first = stack.delete(f"/v1/tenants/{GONE}", headers=_bearer(BOOT))
    assert first.status_code == 200, first.text
    answer = first.json()
    # its key was revoked just now: requests it let in may still write for the settle window
    assert (answer["state"], answer["keysRevoked"]) == ("running", 1), answer
    assert answer["removed"] > 0 and int(first.headers["retry-after"]) == answer["retryAfterS"] >= 1
    assert _dump(redis_client, prefix, gone.tenant_pattern) == {}
    for credential in (auth[GONE], token):
        assert stack.get("/v1/events", headers=credential).status_code == 401
    creating = stack.post("/v1/keys", json={"tenant": GONE, "role": "ingest"}, headers=_bearer(BOOT))
    assert creating.status_code == 409, creating.text
    assert (creating.json()["error"]["code"], creating.json()["error"]["field"]) == (
        "tenant_being_deleted",
        "tenant",
    )

    # the settle window waited out (as a later call would): a pass that finds nothing ends it
    done = until_done(redis_client, keys, GONE)
    assert (done.state, done.keys_revoked, done.removed) == ("done", 0, 0), done
    assert done.removed_total == answer["removedTotal"]
    assert not redis_client.exists(keys.tenant_deletion(GONE))
    assert not redis_client.exists(keys.api_keys_of(GONE), keys.active_api_keys_of(GONE))
    after = _dump(redis_client, prefix, BucketKeys(prefix).all_pattern)
    assert [k for k, v in after.items() if MARK[GONE] in v or f"{GONE}-user" in v] == []
    assert [k for k in after if f"{{{GONE}" in k] == []  # the tenant's slots, its rate buckets
    assert _dump(redis_client, prefix, kept.tenant_pattern) == kept_before
    [(_, entry)] = redis_client.xrange(keys.tenant_deletions)
    assert (entry["action"], entry["tenant"], entry["actor"], entry["endedBy"]) == (
        "tenant.delete",
        GONE,
        "bootstrap",
        "test",
    )
    assert entry["removed"] == str(done.removed_total) and entry["keys"] == "1"

    # the state metrics no longer report it (a walk: at zero, for good), the other tenant's they do
    state = stack.get("/metrics/state", headers=_bearer(BOOT))
    assert state.status_code == 200 and f'tenant="{KEPT}"' in state.text, state.text
    assert f'tenant="{GONE}"' not in state.text
    # the other tenant works on; the deleted name starts again from nothing
    assert stack.get("/v1/receipts", params={"userId": f"{KEPT}-user"}, headers=auth[KEPT]).json()["receipts"]
    again = _admin(stack, GONE)
    assert stack.get("/v1/events", headers=again).json()["events"] == []
    assert not redis_client.hexists(keys.tenants_deleted, GONE)  # the key made for it took it out
    _populate(stack, GONE, again)  # its events are taken again
    assert f'tenant="{GONE}"' in stack.get("/metrics/state", headers=_bearer(BOOT)).text


def test_the_deletion_waits_out_the_settle_window_and_runs_one_call_at_a_time(
    redis_client: Redis, prefix: str
) -> None:
    """A tenant whose key was revoked just before has requests in flight that may still write: the deletion is not
    done until a pass that finds nothing begins after the settle window; a second call meanwhile is refused."""
    keys = Keys(prefix)
    store = CredentialStore(redis_client, keys)
    store.create("gamma", "ingest")
    redis_client.set(keys.for_tenant("gamma").plugin_home("note"), "x")
    early = delete_tenant(redis_client, keys, store, "gamma", actor="test", settle=HOUR)
    assert (early.state, early.keys_revoked, early.removed) == ("running", 1, 2)  # the note, the key's audit
    assert early.retry_after_s > 3_500
    redis_client.set(keys.for_tenant("gamma").plugin_home("late"), "y")  # a request let in before the revoke
    later = delete_tenant(redis_client, keys, store, "gamma", actor="test", settle=HOUR)
    assert (later.state, later.removed, later.removed_total) == ("running", 1, 3)
    redis_client.set(keys.tenant_deletion_lock("gamma"), "another call", px=5_000)
    with pytest.raises(DeletionRunning) as running:
        delete_tenant(redis_client, keys, store, "gamma", actor="test", settle=Settle())
    assert 1 <= running.value.retry_after_s <= 5
    redis_client.delete(keys.tenant_deletion_lock("gamma"))
    with pytest.raises(CredentialError) as default:
        delete_tenant(redis_client, keys, store, "default", actor="test", settle=Settle())
    assert default.value.field == "tenant"
    done = until_done(redis_client, keys, "gamma")
    assert (done.state, done.removed_total) == ("done", 3)
    never = until_done(redis_client, keys, "never-was", settle=HOUR)
    assert (never.state, never.removed_total) == ("done", 0)  # nothing was ever revoked: no settle to wait


@pytest.mark.buckets
def test_drains_under_way_in_a_deleted_tenant_write_nothing_after_it(
    make_settings: Any, start_worker: Any, redis_client: Redis, prefix: str, scope_buckets: int
) -> None:
    """A real worker is inside a tenant's handler (held at a gate) with 300 more of its events queued behind, each
    staging writes in its scope and its tenant's home slot (journaled with scope buckets), when the tenant is
    deleted. Let go, the handler's drain finds its lease and fence gone: its commit is refused and counts nothing
    into the gone counters; the queued events' messages find no scope. Once the worker (one child) has run another
    tenant's event after that, nothing of the deleted tenant is back."""
    from producers.sdk.producer import Producer
    from tests.support.tenants import as_tenant

    settings = make_settings(plugins=["tests.support.policies:bundle"])
    start_worker(settings, concurrency=1)
    keys = Keys(prefix, buckets=scope_buckets)
    gone = keys.for_tenant("delta")
    held, go = gone.home_prefix + "test:inbatch:held", gone.home_prefix + "test:batch-go:held"
    producer = Producer(settings)
    try:
        delta, other = as_tenant(producer, "delta"), as_tenant(producer, "omega")
        gated = {"counterKey": gone.home_prefix + "test:count", "waitGo": True}
        delta.enqueue(
            {"sourceType": "test.batch", "sourceId": "held", "scopeKey": "topic:held", "payload": gated}
        )
        wait_for(lambda: redis_client.exists(held), what="the worker inside the tenant's handler")
        delta.enqueue_many(
            {"sourceType": "test.fanout", "sourceId": f"c{i}", "scopeKey": f"topic:s{i % 30}", "payload": {}}
            for i in range(300)
        )
        # a short settle window: a journal record a relay claimed before the deletion lands within it
        step = until_done(redis_client, keys, "delta", settle=Settle(after_start_ms=2_000))
        assert step.removed_total > 300  # the queued events, their inboxes and indexes, the held one's
        redis_client.set(go, "1")  # the gate opens: the handler returns, its drain commits
        # work queued for it before: a retry's delayed drain, a plugin task naming it (an agent run's kind), and
        # an admission of its own (a plugin's, a producer's), each dropped or refused
        queue = settings.queue_name
        producer.app.send_task("agent_signal.drain", args=["delta/topic:s1"], queue=queue)
        with working_for("delta"):  # published by a deliverer of delta's record: its payload need not name it
            publish_task(producer.app, REFUSE_TASK, {"text": "delta's, unnamed"}, queue=queue)
        for tenant in ("delta", "omega"):
            producer.app.send_task(REFUSE_TASK, args=[{"tenant": tenant, "text": tenant}], queue=queue)
        producer.store.deleted_tenants._until = 0.0  # its cache refreshed, as it is every 2 s
        with pytest.raises(TenantDeleted):
            delta.enqueue(
                {"sourceType": "test.fanout", "sourceId": "late", "scopeKey": "topic:late", "payload": {}}
            )
        last = other.enqueue(
            {"sourceType": "test.fanout", "sourceId": "after", "scopeKey": "topic:after", "payload": {}}
        )
        wait_for(
            lambda: (status := other.status(last.event_id)) is not None and status["status"] == "done",
            what="another tenant's event",
        )
        refused = Keys(prefix).for_tenant("default").home_prefix + "test:refused"
        wait_for(lambda: redis_client.get(refused) == "1", what="omega's task, sent after delta's")
    finally:
        producer.close()
    redis_client.delete(go)  # the test's own gate
    assert _dump(redis_client, prefix, gone.tenant_pattern) == {}
    assert redis_client.get(refused) == "1"  # delta's tasks, one child before omega's, never ran


def test_the_cli_asks_for_yes_then_deletes_straight_in_redis(
    make_settings: Any, redis_client: Redis, prefix: str
) -> None:
    """``agent-signal tenants delete T`` without ``--yes`` changes nothing (exit 2, saying why); with it, straight in
    Redis, it calls until done, a progress line per call on stderr, and prints the answer as JSON."""
    import json
    import subprocess
    import sys

    from tests.conftest import settings_env

    note = Keys(prefix).for_tenant("epsilon").plugin_home("note")
    redis_client.set(note, "x")
    # the engine's waits short: a drain's lease, a relay's claim, a plugin task's time limit (the deletion waits them out)
    quick = {
        "task_soft_time_limit_s": 1,
        "task_time_limit_s": 2,
        "outbox_delivery_timeout_s": 1,
        "outbox_lease_ms": 2000,
    }
    env = settings_env(make_settings(**quick))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "producers.cli", "tenants", "delete", *args]
        return subprocess.run(argv, cwd="/", env=env, capture_output=True, text=True, timeout=120)

    asked = cli("epsilon", "--redis")
    assert asked.returncode == 2 and "add --yes" in asked.stderr, asked.stderr
    assert redis_client.exists(note)
    default = cli("default", "--yes", "--redis")
    assert default.returncode == 2 and "TENANT: tenant 'default'" in default.stderr, default.stderr
    done = cli("epsilon", "--yes", "--redis")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) | {"startedAt": 0} == {
        "tenant": "epsilon",
        "state": "done",
        "startedAt": 0,
        "keysRevoked": 0,
        "removed": 1,
        "removedTotal": 1,
        "retryAfterS": 0,
    }
    assert "agent-signal tenants delete epsilon: done: 1 Redis key removed" in done.stderr
    assert not redis_client.exists(note)


def test_an_erasure_let_in_before_keeps_its_lock_and_holds_the_end_and_the_name_rests(
    redis_client: Redis, prefix: str
) -> None:
    """A review: an erasure that took its tenant's lock during a deletion call lost it to the walk, and its last
    write came after done. The walk leaves the lock (it expires on its own), the deletion is not done while it is
    held, and a call meanwhile answers DeletionRunning. Once done, the name rests: a key made for it is refused
    until ``reuse_after_ms`` has passed (a message of before could still run in the new tenant)."""
    from worker.ops.key_index import TenantBeingDeleted

    keys = Keys(prefix)
    store, lock = CredentialStore(redis_client, keys), keys.for_tenant("zeta").erasure_lock
    redis_client.set(keys.for_tenant("zeta").plugin_home("note"), "x")

    reads = []

    def erasure_starts() -> float:
        """The call's clock: its first read sets the deadline, the next is in the walk, when an erasure takes
        the lock (after the call looked for it)."""
        reads.append(1)
        if len(reads) == 2:
            redis_client.set(lock, "erasure|1", px=60_000, nx=True)
        return time.monotonic()

    first = delete_tenant(redis_client, keys, store, "zeta", actor="t", settle=Settle(), clock=erasure_starts)
    assert first.state == "running" and redis_client.pttl(lock) > 0, first  # not done, the lock not walked
    with pytest.raises(DeletionRunning, match="an erasure of one of its users is running"):
        delete_tenant(redis_client, keys, store, "zeta", actor="t", settle=Settle())
    redis_client.delete(lock)  # the erasure ends
    done = until_done(redis_client, keys, "zeta", settle=Settle(reuse_after_ms=3_600_000))
    assert done.state == "done"
    with pytest.raises(TenantBeingDeleted, match="its name can be used again from"):
        store.create("zeta", "admin")


def test_a_call_after_done_answers_that_deletion_and_a_busy_call_waits_at_most_a_budget(
    redis_client: Redis, prefix: str
) -> None:
    """A walk: two CLIs deleting one tenant; the first ended it, the second's next call began another deletion,
    which revoked nothing, waited the settle window again with key creation refused, and was audited twice. A call
    after done now answers that deletion again (its start, its count) and changes nothing, for ten minutes or until
    a key is made for the name: then a deletion starts over. And a call refused while another runs waits at most that call's
    budget, not the lock's crash margin (the walk's second CLI waited 39 s for a call that had ended)."""
    keys = Keys(prefix)
    store = CredentialStore(redis_client, keys)
    store.create("eta", "ingest")
    redis_client.set(keys.for_tenant("eta").plugin_home("note"), "x")
    redis_client.set(keys.tenant_deletion_lock("eta"), "another call", px=40_000)  # a 10 s budget's lock
    with pytest.raises(DeletionRunning) as running:
        delete_tenant(redis_client, keys, store, "eta", actor="t", settle=Settle(), budget_s=2.0)
    assert running.value.retry_after_s == 10  # what that call has left of its budget, not its crash margin
    redis_client.delete(keys.tenant_deletion_lock("eta"))
    done = until_done(redis_client, keys, "eta")
    again = delete_tenant(
        redis_client, keys, store, "eta", actor="second", settle=Settle(after_start_ms=3_600_000)
    )
    assert again == dataclasses.replace(done, keys_revoked=0, removed=0)
    assert not redis_client.exists(keys.tenant_deletion("eta"))  # no deletion began
    assert len(redis_client.xrange(keys.tenant_deletions)) == 1  # and none was audited again
    assert 0 < redis_client.ttl(keys.tenant_deleted("eta")) <= DONE_ANSWERED_S  # later, a call sweeps again
    store.create("eta", "ingest")  # the name used again (no rest asked): its own from now
    assert not redis_client.exists(keys.tenant_deleted("eta"))
    anew = delete_tenant(redis_client, keys, store, "eta", actor="t", settle=Settle())
    assert (anew.state, anew.keys_revoked) == ("running", 1) and anew.started_at_ms > done.started_at_ms
