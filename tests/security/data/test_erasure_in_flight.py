"""Erasure and what is still on its way when it runs, on a real Redis (and a real worker where one runs): an agent run
asked for before the erasure (queued in the broker, or running) and a completion the app posts afterwards, the
idempotency lanes of the user's finished actions in a scope another user shares, and the scope's entry in the
tenant's fair-share ready list."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

import policies.self_iteration.plugin as self_iteration
from policies.self_iteration.agent.runners import AGENT_RUN_OUTBOX, AGENT_RUN_TASK, RunRequest
from policies.self_iteration.records.documents import DocumentStore
from producers import Producer
from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.security.data.test_erasure import _dump, _mentions
from worker.keys.layout import BucketKeys, Keys
from worker.outbox.relay import records_of_event
from worker.runtime.app import build_pipeline, build_relay
from worker.runtime.plugin_model import PluginRuntime
from worker.telemetry.recorder import DISABLED

pytestmark = [pytest.mark.integration]

GONE, KEPT = "u-gone-inflight", "u-kept-inflight"
MARK = {GONE: "okapi-wordmark", KEPT: "heron-basalt"}
DROPPED = "its origin event"  # the worker's log line for a dropped run (policies/self_iteration/plugin.py)


def _message(user: str, source_id: str, text: str, topic: str) -> dict[str, Any]:
    payload = {"agentId": "agt_1", "messageId": source_id, "message": text, "topicId": topic}
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


def _erase(client: TestClient, user: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (r := client.delete(f"/v1/users/{user}").json())["busyScopes"] == 0 and r,
            what="an erasure with no busy scope",
        )
    )


def _memories(client: TestClient, user: str) -> list[Any]:
    return list(client.get("/v1/memories", params={"userId": user}).json()["memories"])


def _completion(user: str, source_id: str, origin: str) -> dict[str, Any]:
    """``agent.execution.completed`` as an app reports a run: the request's marker echoed (with its origin)."""
    marker = {"kind": "memory", "sourceId": f"{source_id}-src", "originEventId": origin}
    mutation = {"apiName": "writeMemory", "kind": "mutation", "data": {"summary": MARK[user]}}
    self_iteration = {"marker": marker, "mutations": [mutation], "artifacts": [], "userId": user}
    return {
        "sourceType": "agent.execution.completed",
        "sourceId": source_id,
        "userId": user,
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "operationId": f"op-{source_id}", "selfIteration": self_iteration},
    }


def test_an_agent_run_queued_before_the_erasure_brings_nothing_of_the_user_back(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The run request was handed to the broker (the outbox delivered it) when the erasure answered
    ``busyScopes: 0``; a worker then ran it: the memory was written again and its completion made a new event,
    receipts and a scope of the erased user. The task now reads its origin event, finds a tombstone, drops the
    run and says so without the user's id."""
    # one delivery at a time: run_once returns with the run request delivered. With the relay's pool it returned
    # with the delivery still to run, the erasure took the record first, and the worker had nothing to take (CI)
    settings = make_settings(outbox_concurrency=1)
    producer = Producer(settings)
    with TestClient(create_web_app(settings)) as client:
        origin = _send(client, _message(GONE, "m1", f"Going forward, I prefer {MARK[GONE]} answers.", "tz"))
        build_pipeline(settings, telemetry=DISABLED, app=producer.app).drain_scope("topic:tz")
        # the run request is in the broker (with scope buckets a journaled effect is delivered beside it)
        assert build_relay(settings, producer.app).run_once() >= 1
        outbox = records_of_event(producer.keys, producer.store, "topic:tz", origin["eventId"])
        assert [r["state"] for r in outbox if r["kind"] == AGENT_RUN_OUTBOX] == ["delivered"]
        _erase(client, GONE)
        assert _memories(client, GONE) == []

        worker = start_worker(settings)
        wait_for(
            lambda: DROPPED in worker.log() or _memories(client, GONE),
            timeout_s=60,
            what="the worker to take the queued run",
            explain=lambda: worker.log()[-6000:],
        )
        assert _memories(client, GONE) == []
        assert client.get("/v1/events", params={"userId": GONE}).json()["events"] == []
        assert client.get("/v1/receipts", params={"userId": GONE}).json()["receipts"] == []
        assert GONE not in worker.log()
    # the broker's copy of the task goes when the worker acknowledges it (after the run returned)
    wait_for(lambda: not _mentions(_dump(redis_client, keys), GONE, MARK[GONE]), what="nothing of the user")
    producer.close()


def test_a_run_whose_origin_is_erased_while_it_runs_writes_nothing(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent-run task (the plugin's own, as a worker runs it) reads its origin before it runs and the
    reference agent asks again right before its write: an erasure between the two (here, as the task opens the
    document store it writes to) drops the run there, and no memory is written nor completion reported. Without
    the task's second ask wired through, the memory came back."""
    settings = make_settings()
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    runtime = PluginRuntime(settings, pipeline.store.client, pipeline.store.keys, pipeline.emitter)
    [agent_run] = [task.run for task in self_iteration.plugin().tasks if task.name == AGENT_RUN_TASK]
    with TestClient(create_web_app(settings)) as client:
        origin = _send(client, _message(GONE, "m2", f"I prefer {MARK[GONE]}.", "tw"))["eventId"]
        request = RunRequest(
            "op-inflight",
            "memory-writer",
            {"kind": "memory", "sourceId": "m2-src"},
            GONE,
            "agt_1",
            f"I prefer {MARK[GONE]}.",
            scope_key="topic:tw",
            origin_event_id=origin,
        )

        class ErasedAsItOpens(DocumentStore):
            """The task's document store: the origin's user is erased as the task opens it, after the task's
            first read of the origin and before the agent writes."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                _erase(client, GONE)

        monkeypatch.setattr(self_iteration, "DocumentStore", ErasedAsItOpens)
        with caplog.at_level(logging.INFO, logger=self_iteration.__name__):
            agent_run(runtime, request.to_json_dict())
        assert _memories(client, GONE) == []
        assert client.get("/v1/events", params={"userId": GONE}).json()["events"] == []
    assert [r.getMessage() for r in caplog.records if DROPPED in r.getMessage()] == [
        f"agent run (memory-writer) stopped before its write: its origin event {origin} was erased"
    ]


def test_the_door_refuses_a_completion_whose_run_began_with_an_erased_event(make_settings: Any) -> None:
    """With the webhook runner the app posts the completion itself, after the erasure: it was stored and made
    receipts of the erased user. A completion whose marker names a tombstone is now answered ``gated`` (the
    admission gates' verdict: not stored); one whose origin stands is accepted."""
    with TestClient(create_web_app(make_settings())) as client:
        gone = _send(client, _message(GONE, "m3", f"I prefer {MARK[GONE]}.", "tg"))["eventId"]
        kept = _send(client, _message(KEPT, "k3", f"I prefer {MARK[KEPT]}.", "tk"))["eventId"]
        _erase(client, GONE)
        assert _send(client, _completion(GONE, "c-gone", gone))["status"] == "gated"
        assert _send(client, _completion(KEPT, "c-kept", kept))["status"] == "accepted"
        assert client.get("/v1/events", params={"userId": GONE}).json()["events"] == []


def test_an_erasure_between_the_gates_look_and_the_write_is_seen_at_the_write(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scale walk: an erasure answered ``busyScopes: 0`` and the user's content came back, a completion admitted
    1 ms after its origin became a tombstone (its receipt, payload and index entry). The gate looked at the origin
    in its own round trip; the erasure landed between that look and the enqueue script. The gate now admits a
    completion only while its origin is no tombstone at the write (UnlessErased, checked by the script): here the
    erasure lands right after the look, and the completion is answered ``gated`` and not stored, the rest of its
    batch stored."""
    look = self_iteration.origins_erased

    def looked_then_erased(redis: Redis, checks: list[tuple[Keys, str, str | None]]) -> list[bool]:
        answers = look(redis, checks)  # the origin stands when the gate looks
        for keys, origin, _ in checks:  # and the erasure makes it a tombstone before the write
            redis.hset(keys.for_bucket(0).event(origin), "erasedAt", "1")
        return answers

    with TestClient(create_web_app(make_settings())) as client:
        origin = _send(client, _message(GONE, "m-race", f"I prefer {MARK[GONE]}.", "tr"))["eventId"]
        monkeypatch.setattr(self_iteration, "origins_erased", looked_then_erased)
        batch = [_completion(GONE, "c-race", origin), _message(KEPT, "k-race", "Thanks.", "tk")]
        answer = client.post("/v1/events", json={"events": batch})
        assert answer.status_code == 202, answer.text
        completion, other = answer.json()["results"]
        assert (completion["status"], other["status"]) == ("gated", "accepted")
        assert client.get(f"/v1/events/{completion['eventId']}").status_code == 404
        assert client.get(f"/v1/events/{other['eventId']}").status_code == 200


def test_a_run_request_of_before_still_reads_and_names_its_origin_once_it_has_one() -> None:
    """A request staged before runs named their origin reads as before (no origin: it runs as it did); one with
    an origin carries it as its own field and in the marker a runner echoes, and reads back the same."""
    old = {
        "operationId": "op",
        "slug": "memory-writer",
        "marker": {"kind": "memory"},
        "userId": "u",
        "prompt": "",
    }
    assert RunRequest.from_json_dict(old).origin_event_id is None
    new = RunRequest("op", "memory-writer", {"kind": "memory"}, "u", None, "", origin_event_id="ev-1")
    body = new.to_json_dict()
    assert body["originEventId"] == "ev-1" and body["marker"] == {"kind": "memory", "originEventId": "ev-1"}
    assert RunRequest.from_json_dict(body) == new


@pytest.mark.buckets
def test_a_shared_scope_keeps_no_lane_of_the_erased_users_actions(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys, tenant_keys: Keys
) -> None:
    """Two users write memories and skills in one topic: the erased user's finished actions kept their
    idempotency lanes (``receipt:<userId>:…``, 7 days) in the scope the other user keeps. ERASE_SCOPE now deletes
    the lanes of the actions the erased events' chains hold; the other user's lanes stay."""
    start_worker(make_settings())
    with TestClient(create_web_app(make_settings())) as client:
        for user in (GONE, KEPT):
            mark = MARK[user]
            for sid, text in (
                (f"{user}-m1", f"Going forward, I prefer {mark} answers."),
                (f"{user}-s1", f'Please create a skill called "{mark} list": run, tag.'),
            ):
                _send(client, _message(user, sid, text, "tpc-shared"))

        def settled() -> bool:
            receipts = [
                client.get("/v1/receipts", params={"userId": u}).json()["receipts"] for u in (GONE, KEPT)
            ]
            idle = all(
                not redis_client.scard(k.scopes) and not redis_client.zcard(k.outbox_due)
                for k in tenant_keys.every_bucket()
            )
            return idle and all(len(r) >= 2 for r in receipts)

        wait_for(settled, timeout_s=90, what="both users' receipts")
        before = _dump(redis_client, keys)
        assert [k for k in _mentions(before, GONE) if ":idem:{" in k], (
            "the test must start with the user's lanes"
        )
        kept_lanes = sorted(k for k in _mentions(before, KEPT) if ":idem:{" in k)
        assert kept_lanes

        _erase(client, GONE)
        after = _dump(redis_client, keys)
        assert _mentions(after, GONE, MARK[GONE]) == []
        assert sorted(k for k in _mentions(after, KEPT) if ":idem:{" in k) == kept_lanes


@pytest.mark.buckets
def test_a_scope_dropped_whole_leaves_the_tenants_ready_list(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, tenant_keys: Keys
) -> None:
    """No worker runs: the user's scope ``agent:agt_1:user:<id>`` waits in the tenant's fair-share ready list,
    and its ref (which names the user) stayed there after the erasure dropped the scope, until a worker popped
    it. The erasure now takes it out."""
    with TestClient(create_web_app(make_settings())) as client:
        event = _message(GONE, "m4", f"hello {MARK[GONE]}", "unused")
        del event["payload"]["topicId"]
        _send(client, event)
        ready = keys.ready(tenant_keys.tenant)
        assert any(GONE in ref for ref in redis_client.lrange(ready, 0, -1)), "the scope must be ready first"
        _erase(client, GONE)
        assert redis_client.lrange(ready, 0, -1) == []
        assert _mentions(_dump(redis_client, keys), GONE, MARK[GONE]) == []


def test_a_cancelled_events_lanes_go_with_its_users_erasure(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A cancel stops the user's event after its first action, in a scope another user's event keeps shared: the
    action's lane gets its TTL back, and a cancelled event stores no chain, where the erasure finds a done
    event's lanes. The event now names its ended lanes for the erasure (an operator race walk found them kept a
    week after the erasure, each key naming the user's source id); the other user's lane stays."""
    settings = make_settings()
    start_worker(settings, concurrency=1)
    scope, sid = "topic:cancelled-lanes", f"{GONE}-cancelled"
    started = f"{keys.bucket_prefix}test:two-step-started:{sid}"
    with TestClient(create_web_app(settings)) as client:
        ids = {}
        for user in (GONE, KEPT):  # the other user's event waits behind: the scope is shared
            event = {"sourceType": "test.two-step", "sourceId": f"{user}-cancelled", "scopeKey": scope}
            ids[user] = _send(client, {**event, "userId": user, "payload": {}})["eventId"]
        wait_for(lambda: redis_client.exists(started), what="the erased user's first action")
        assert client.post(f"/v1/events/{ids[GONE]}/cancel").json()["cancelRequested"] is True
        for user in (GONE, KEPT):
            redis_client.set(f"{keys.bucket_prefix}test:two-step-go:{user}-cancelled", "1")
        for user, status in ((GONE, "cancelled"), (KEPT, "done")):
            wait_for(
                lambda u=user, s=status: client.get(f"/v1/events/{ids[u]}").json()["status"] == s, what=status
            )
        before = _dump(redis_client, keys)
        assert [k for k in _mentions(before, GONE) if ":idem:{" in k], (
            "the test must start with the user's lane"
        )
        # the done event's lanes are named by its chain, not kept on its hash (a review: +40% of its bytes)
        assert redis_client.hexists(keys.for_scope(scope).event(ids[GONE]), "endedLanes")
        assert not redis_client.hexists(keys.for_scope(scope).event(ids[KEPT]), "endedLanes")

        _erase(client, GONE)
        after = _dump(redis_client, keys)
        assert [k for k in _mentions(after, GONE) if ":idem:{" in k] == []
