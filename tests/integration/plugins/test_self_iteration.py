"""Self-iteration end to end through POST /v1/events and real worker processes: LobeHub's worked examples
A-E (reference §1.5), receipts, rollback, the feature gate and the receipts stream."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.core.dedupe import dedupe_key, event_id_for
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

OWNER = {"userId": "u1", "agentId": "agt_1", "topicId": "tpc_1"}


@pytest.fixture
def stack(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings()
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        yield client


def _user_message(source_id: str, text: str, **payload: Any) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_1",
            "messageId": source_id,
            "message": text,
            **payload,
        },
    }


def _send(client: TestClient, event: dict[str, Any]) -> str:
    response = client.post("/v1/events", json=event)
    assert response.status_code == 202, response.text
    return str(response.json()["results"][0]["eventId"])


def _done(client: TestClient, event_id: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (
                (r := client.get(f"/v1/events/{event_id}").json()).get("status") in ("done", "dead") and r
            ),
            what="the chain",
        )
    )


def _chain(client: TestClient, chain_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/chains/{chain_id}").json())


def _receipts(client: TestClient, **owner: str) -> list[dict[str, Any]]:
    return list(client.get("/v1/receipts", params=owner or OWNER).json()["receipts"])


class TestWorkedExamples:
    def test_a_memory_preference(self, stack: TestClient) -> None:
        """A: "Going forward, I prefer concise answers." → memory action → run → receipt under the trigger."""
        _done(
            stack,
            _send(
                stack,
                _user_message("msg_u1", "Going forward, I prefer concise answers.", trigger="execAgent"),
            ),
        )
        chain = _chain(stack, "chain:msg_u1")
        record, envelope = chain["record"], chain["envelope"]
        assert record["conclusionChain"]["dominantPath"] == [
            "agent.user.message",
            "signal.feedback.satisfaction",
            "signal.feedback.domain.memory",
            "signal.action.applied",
            "action.user-memory.handle",
        ]
        assert record["conclusionChain"]["compressedSignals"] == {
            "feedback": {"outcomes": {"satisfaction": 1}, "total": 1},
            "feedback.domain": {"outcomes": {"memory": 1}, "total": 1},
            "action": {"outcomes": {"applied": 1}, "total": 1},
        }
        assert record["summary"]["statusBreakdown"] == {"applied": 1, "failed": 0, "skipped": 0}
        assert (
            record["finalStatus"] == "applied"
            and record["conclusionChain"]["finalReason"] == "Memory write enqueued."
        )
        (action,) = envelope["actions"]
        assert action["actionId"] == "msg_u1:signal:feedback-satisfaction:domain:memory:action:memory"
        assert action["payload"]["idempotencyKey"] == "msg_u1:memory:msg_u1"
        assert (
            action["payload"]["triggerMessageId"] == "msg_u1"
            and "assistantMessageId" not in action["payload"]
        )
        (receipt,) = wait_for(lambda: _receipts(stack), what="the memory receipt")
        assert receipt["id"] == "msg_u1:memory:msg_u1:writeMemory:0:memory"
        assert (receipt["kind"], receipt["status"], receipt["title"]) == (
            "memory",
            "applied",
            "I prefer concise answers.",
        )
        assert receipt["triggerMessageId"] == "msg_u1" and "anchorMessageId" not in receipt
        assert receipt["target"]["memoryLayer"] == "preference"
        memories = stack.get("/v1/memories", params={"userId": "u1"}).json()["memories"]
        assert [m["id"] for m in memories] == [receipt["target"]["id"]]

    def test_b_unsafe_memory_fails(self, stack: TestClient) -> None:
        """B: "maybe" → failed USER_MEMORY_EXECUTION_FAILED, no lane, no run, no receipt."""
        _done(stack, _send(stack, _user_message("msg_b1", "Going forward maybe keep answers short.")))
        record = _chain(stack, "chain:msg_b1")["record"]
        assert record["finalStatus"] == "failed"
        assert record["conclusionChain"]["finalReason"] == "Memory candidate is not safe for automatic write"
        result = _chain(stack, "chain:msg_b1")["envelope"]["results"][0]
        assert result["error"]["code"] == "USER_MEMORY_EXECUTION_FAILED"
        assert "signal.action.failed" in record["conclusionChain"]["dominantPath"]
        # A receipt comes from a run that ends in a completion event on the topic's scope. A marker message
        # sent after msg_b1 on the same topic goes the same way, in order (the scope drains in order; one
        # worker with one process runs the runs in publish order): once the marker's receipt is there, a
        # receipt for msg_b1 would be there too.
        _done(stack, _send(stack, _user_message("msg_b2", "Going forward, I prefer short bullet lists.")))
        marker = "msg_b2:memory:msg_b2:writeMemory:0:memory"
        receipts = wait_for(lambda: _receipts(stack), what="the marker's receipt")
        assert [r["id"] for r in receipts] == [marker]

    def test_c_no_op(self, stack: TestClient) -> None:
        """C: "Thanks." → neutral → one signal, no action, final status none."""
        _done(stack, _send(stack, _user_message("msg_c1", "Thanks.")))
        record = _chain(stack, "chain:msg_c1")["record"]
        assert record["conclusionChain"]["dominantPath"] == [
            "agent.user.message",
            "signal.feedback.satisfaction",
        ]
        assert "finalStatus" not in record and record["summary"]["totalActions"] == 0
        assert _chain(stack, "chain:msg_c1")["envelope"]["signals"][0]["payload"]["result"] == "neutral"

    def test_d_duplicate_and_no_drop_on_contention(self, stack: TestClient) -> None:
        """D: the same event again is a duplicate (even with another timestamp); a second event of the busy scope runs too."""
        first = _user_message("msg_d1", "Thanks.")
        assert stack.post("/v1/events", json=first).json()["results"][0]["status"] == "accepted"
        assert (
            stack.post("/v1/events", json={**first, "timestamp": 5}).json()["results"][0]["status"]
            == "duplicate"
        )
        other = _send(stack, _user_message("msg_d2", "Thanks."))
        assert _done(stack, other)["status"] == "done"  # LobeHub would drop it as scope_locked

    def test_e_nightly_review(self, stack: TestClient) -> None:
        """E: the nightly review dispatches a run and concludes; its completion yields the summary receipt."""
        source_id = "nightly-review:u1:agt_1:2026-07-31"
        event = {
            "sourceType": "agent.nightly_review.requested",
            "sourceId": source_id,
            "userId": "u1",
            "agentId": "agt_1",
            "payload": {
                "agentId": "agt_1",
                "userId": "u1",
                "localDate": "2026-07-31",
                "requestedAt": 1,
                "reviewWindowStart": "2026-07-31T00:00:00Z",
                "reviewWindowEnd": "2026-08-01T00:00:00Z",
                "timezone": "UTC",
            },
        }
        _done(stack, _send(stack, event))
        chain = _chain(stack, f"chain:{source_id}")
        assert chain["envelope"]["metadata"]["terminal"]["concluded"]["status"] == "dispatched"
        owner = {"userId": "u1", "agentId": "agt_1", "topicId": source_id}
        receipts = wait_for(lambda: _receipts(stack, **owner), what="the summary receipt")
        summary = receipts[0]
        assert summary["id"] == f"{source_id}:self-iteration-summary"
        assert (summary["kind"], summary["status"], summary["title"]) == (
            "review",
            "completed",
            "Nightly self-review completed",
        )
        assert summary["detail"] == "Captured 1 idea(s) and applied 0 write(s)."
        assert summary["metadata"]["localDate"] == "2026-07-31"
        # The guard: the same window again is deduped (a new source id for the same window is refused too).
        again = {**event, "sourceId": source_id + ":retry"}
        _done(stack, _send(stack, again))
        concluded = _chain(stack, f"chain:{source_id}:retry")["envelope"]["metadata"]["terminal"]["concluded"]
        assert concluded["status"] == "skipped" and concluded["reason"] == "invalid_payload"


class TestSkillsAndRollback:
    def test_skill_receipts_and_undo(self, stack: TestClient) -> None:
        """An explicit skill request creates a document; an update replaces it (Undo available); rollback and its conflicts."""
        _done(
            stack,
            _send(
                stack,
                _user_message(
                    "msg_s1", 'Please create a skill called "Release checklist": run the tests, tag, publish.'
                ),
            ),
        )
        created = wait_for(
            lambda: [r for r in _receipts(stack) if r["kind"] == "skill"], what="the skill receipt"
        )
        assert created[0]["title"] == "Release checklist" and "rollbackStatus" not in created[0]["metadata"]
        _done(
            stack,
            _send(
                stack,
                _user_message("msg_s2", 'Update the skill "Release checklist": also bump the changelog.'),
            ),
        )
        updated = wait_for(
            lambda: [
                r for r in _receipts(stack) if r["kind"] == "skill" and r["metadata"].get("rollbackStatus")
            ],
            what="the update receipt",
        )
        receipt = updated[0]
        assert receipt["metadata"]["rollbackStatus"] == "available" and receipt["target"]["type"] == "skill"
        doc_id = receipt["metadata"]["documentId"]
        skill = stack.get(f"/v1/skills/{doc_id}", params={"userId": "u1", "agentId": "agt_1"}).json()
        assert "bump the changelog" in skill["content"] and skill["version"] == 2
        result = stack.post(f"/v1/receipts/{receipt['id']}/rollback").json()
        assert (
            result["status"] == "rolled_back"
            and result["receipt"]["metadata"]["rollbackStatus"] == "rolled_back"
        )
        restored = stack.get(f"/v1/skills/{doc_id}", params={"userId": "u1", "agentId": "agt_1"}).json()
        assert "bump the changelog" not in restored["content"]
        # A retried undo answers rolled_back again and changes nothing (it answered conflict: the document had
        # moved on, by this very undo).
        assert stack.post(f"/v1/receipts/{receipt['id']}/rollback").json()["status"] == "rolled_back"
        assert (
            stack.get(f"/v1/skills/{doc_id}", params={"userId": "u1", "agentId": "agt_1"}).json() == restored
        )
        assert stack.post(f"/v1/receipts/{created[0]['id']}/rollback").json()["status"] == "unsupported"
        assert stack.post("/v1/receipts/nope/rollback").json()["status"] == "not_found"


class TestReplayAndGate:
    def test_replayed_completion_adds_no_receipt(self, stack: TestClient) -> None:
        """The same completion with another source id (a replay) adds no receipt: ids are deterministic."""
        _done(stack, _send(stack, _user_message("msg_r1", "From now on, I prefer metric units.")))
        (receipt,) = wait_for(lambda: _receipts(stack), what="the receipt")
        chain = next(iter([receipt["operationId"]]))
        completion = {
            "sourceType": "agent.execution.completed",
            "sourceId": f"{chain}:complete:done:replay",
            "userId": "u1",
            "agentId": "agt_1",
            "payload": {
                "agentId": "agt_1",
                "operationId": chain,
                "topicId": "tpc_1",
                "selfIteration": {
                    "marker": {
                        "kind": "memory",
                        "sourceId": "msg_r1:memory:msg_r1",
                        "triggerMessageId": "msg_r1",
                    },
                    "mutations": [
                        {
                            "apiName": "writeMemory",
                            "kind": "mutation",
                            "data": {"status": "applied", "summary": "x"},
                        }
                    ],
                    "artifacts": [],
                    "userId": "u1",
                },
            },
        }
        _done(stack, _send(stack, completion))
        assert [r["id"] for r in _receipts(stack)] == [receipt["id"]]

    def test_feature_gate(self, stack: TestClient) -> None:
        """A user with self-iteration off: feedback events are gated at the door and not enqueued."""
        assert stack.put("/v1/features/self-iteration/u1", json={"enabled": False}).json() == {
            "userId": "u1",
            "enabled": False,
        }
        result = stack.post(
            "/v1/events", json=_user_message("msg_g1", "Going forward, I prefer tables.")
        ).json()["results"][0]
        assert result["status"] == "gated"
        assert stack.get(f"/v1/events/{result['eventId']}").status_code == 404
        assert stack.put("/v1/features/self-iteration/u1", json={"enabled": None}).json()["enabled"] is True

    def test_receipts_stream(
        self, make_settings: Any, start_worker: Any, serve_web: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """GET /v1/receipts/stream pushes a new receipt once, without polling."""
        settings = make_settings()
        start_worker(settings)
        _, url = serve_web(settings)
        received: list[dict[str, Any]] = []
        subscribed = threading.Event()

        def listen() -> None:
            with httpx.stream("GET", f"{url}/v1/receipts/stream", params=OWNER, timeout=30) as response:
                for line in response.iter_lines():
                    if line == ": connected":  # sent once the server has subscribed to the feed
                        subscribed.set()
                    elif line.startswith("data: "):
                        received.append(json.loads(line[6:]))
                        return

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        assert subscribed.wait(timeout=30), "the receipts stream never said it was connected"
        channel = keys.receipts_feed(OWNER["userId"])
        wait_for(
            lambda: dict(redis_client.pubsub_numsub(channel)).get(channel, 0) >= 1,
            what="the stream's subscription to the receipts feed",
        )
        httpx.post(
            f"{url}/v1/events",
            json=_user_message("msg_sse", "Going forward, I prefer short bullet lists."),
            timeout=10,
        )
        thread.join(timeout=30)
        assert [r["id"] for r in received] == ["msg_sse:memory:msg_sse:writeMemory:0:memory"]


def test_a_failed_hand_over_is_retried_by_the_outbox_and_the_action_applies_once(make_settings: Any) -> None:
    """The memory action stages its run request in the outbox and applies once; the relay's first hand-over
    fails, its retry succeeds with the same operation id, and the record ends delivered."""
    from dataclasses import replace

    from policies.self_iteration.agent.runners import RunnerError
    from policies.self_iteration.deps import SelfIterationDeps
    from producers import Producer
    from tests.support.waiting import relay_for
    from worker.runtime.app import build_pipeline
    from worker.telemetry.recorder import DISABLED

    class FlakyRunner:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def dispatch(self, request: Any) -> str:
            self.calls.append(request.operation_id)
            if len(self.calls) == 1:
                raise RunnerError("the agent runtime is unavailable")
            return str(request.operation_id)

    settings = make_settings(outbox_retry_base_ms=1, outbox_retry_cap_ms=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    runner = FlakyRunner()
    pipeline.deps.add(replace(pipeline.deps.get(SelfIterationDeps), runner=runner))
    event_id = producer.enqueue(_user_message("msg_f1", "Going forward, I prefer tables.")).event_id
    pipeline.drain_scope("topic:tpc_1")
    record = producer.status(event_id)
    assert record is not None and record["status"] == "done"
    chain = producer.store.get_chain(producer.keys, "chain:msg_f1")
    assert chain is not None and chain["envelope"]["results"][-1]["status"] == "applied"
    lane = producer.keys.for_bucket(0).idempotency(
        "topic:tpc_1", "u=u1:msg_f1:memory:msg_f1"
    )  # the user's (LANE_FORM 2)
    assert producer.store.client.exists(lane) == 1
    relay = relay_for(pipeline, settings)
    wait_for(lambda: relay.run_once() or len(runner.calls) >= 2, what="the relay's retry")
    assert len(runner.calls) == 2 and runner.calls[0] == runner.calls[1]  # the same deterministic operation
    from worker.outbox.relay import records_of_event

    outbox = records_of_event(producer.keys, producer.store, "topic:tpc_1", event_id)
    assert [(r["state"], r["attempts"]) for r in outbox] == [("delivered", 2)]
    producer.close()


def test_one_source_id_in_two_scopes_asks_for_two_runs(make_settings: Any) -> None:
    """One user's messages with one ``sourceId`` in two topics (two scopes): each memory action applies in its
    own scope, and its run's operation id (the ``Idempotency-Key`` the hand-over carries) hashed the tenant, the
    user and the source id only, so both asked for one run and a receiver that dedupes ran one. Two runs now."""
    from dataclasses import replace

    from policies.self_iteration.deps import SelfIterationDeps
    from producers import Producer
    from tests.support.waiting import relay_for
    from worker.runtime.app import build_pipeline
    from worker.telemetry.recorder import DISABLED

    class Runner:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def dispatch(self, request: Any) -> str:
            self.calls.append(request.operation_id)
            return str(request.operation_id)

    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    runner = Runner()
    pipeline.deps.add(replace(pipeline.deps.get(SelfIterationDeps), runner=runner))
    for topic in ("tpc_1", "tpc_2"):
        event = _user_message("msg_same", "Going forward, I prefer tables.", topicId=topic)
        producer.enqueue({**event, "scopeKey": f"topic:{topic}"})
        pipeline.drain_scope(f"topic:{topic}")
    relay = relay_for(pipeline, settings)
    wait_for(lambda: relay.run_once() or len(runner.calls) >= 2, what="both hand-overs")
    assert len(set(runner.calls)) == 2, runner.calls
    producer.close()


def _tool_outcome(source_id: str, status: str, **payload: Any) -> dict[str, Any]:
    return {
        "sourceType": "tool.outcome.failed" if status == "failed" else "tool.outcome.completed",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_1",
            "tool": {"identifier": "lobe-user-memory", "apiName": "addPreferenceMemory"},
            "outcome": {"status": status},
            **payload,
        },
    }


class TestToolOutcomeProcedure:
    def test_handled_marker_suppresses_the_memory_action_for_that_message(self, stack: TestClient) -> None:
        """A memory tool already ran for msg_p1 with explicit_persistence → feedback on msg_p1 plans no action."""
        outcome = _tool_outcome(
            "tool_p1",
            "succeeded",
            domainKey="memory:user-preference",
            intentClass="explicit_persistence",
            messageId="msg_p1",
        )
        assert _done(stack, _send(stack, outcome))["status"] == "done"
        _done(stack, _send(stack, _user_message("msg_p1", "Going forward, I prefer concise answers.")))
        envelope = _chain(stack, "chain:msg_p1")["envelope"]
        assert envelope["actions"] == []
        scored = [s for s in envelope["signals"] if s["signalType"] == "signal.procedure.bucket.scored"]
        assert [s["payload"]["suggestedActions"] for s in scored] == [["suppressed"]]
        # The same sentence for another message is not covered by the marker and writes memory.
        _done(stack, _send(stack, _user_message("msg_p2", "Going forward, I prefer concise answers.")))
        (action,) = _chain(stack, "chain:msg_p2")["envelope"]["actions"]
        assert action["actionType"] == "action.user-memory.handle"

    def test_failed_outcome_marks_nothing_and_repeated_failures_request_self_reflection(
        self, stack: TestClient
    ) -> None:
        for n in (1, 2):
            failed = _tool_outcome(
                f"tool_f{n}",
                "failed",
                domainKey="memory:user-preference",
                intentClass="explicit_persistence",
                messageId="msg_f1",
            )
            assert _done(stack, _send(stack, {**failed, "timestamp": n * 1000}))["status"] == "done"
        # Two failures of one tool cross failedToolCount and sameToolFailureCount (threshold 2), so the
        # second outcome enqueues one request per reason, with the window from the first to the second.
        for reason in ("failedToolCount", "sameToolFailureCount"):
            source_id = f"self-reflection:u1:agt_1:topic:tpc_1:{reason}:1000:2000"
            event_id = event_id_for(dedupe_key("topic:tpc_1", "agent.self_reflection.requested", source_id))
            assert _done(stack, event_id)["status"] == "done"
        chain = _chain(stack, "chain:self-reflection:u1:agt_1:topic:tpc_1:failedToolCount:1000:2000")
        assert chain["envelope"]["source"]["payload"]["reason"] == "failedToolCount"
        # A third failure raises nothing new: each reason is requested once per scope.
        third = _tool_outcome("tool_f3", "failed", domainKey="memory:user-preference", messageId="msg_f1")
        _done(stack, _send(stack, {**third, "timestamp": 3000}))
        stray = "self-reflection:u1:agt_1:topic:tpc_1:failedToolCount:1000:3000"
        stray_id = event_id_for(dedupe_key("topic:tpc_1", "agent.self_reflection.requested", stray))
        assert stack.get(f"/v1/events/{stray_id}").status_code == 404
        # Failed outcomes write no handled marker, so feedback on msg_f1 still plans the memory write.
        _done(stack, _send(stack, _user_message("msg_f1", "Going forward, I prefer concise answers.")))
        (action,) = _chain(stack, "chain:msg_f1")["envelope"]["actions"]
        assert action["actionType"] == "action.user-memory.handle"
