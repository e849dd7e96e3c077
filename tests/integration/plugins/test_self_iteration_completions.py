"""The reference agent's completion of a run whose origin event the door accepted, on a real Redis: a fuzzing audit
saw ``agent.execution.completed`` refused by the emitter after the run had written its memory (its receipts lost,
a log line the only trace). The origin goes in through the engine's emitter (the door's validation), its chain
is drained, and the run request it staged is run by the plugin's own ``agent_signal.agent_run`` task."""

from __future__ import annotations

import json
from typing import Any

import pytest

import policies.self_iteration.plugin as self_iteration
from policies.self_iteration.agent.reference_agent import (
    REPORTED_SUMMARY_MAX,
    completion_event,
    completion_probe,
)
from policies.self_iteration.agent.runners import AGENT_RUN_OUTBOX, AGENT_RUN_TASK, RunRequest
from policies.self_iteration.deps import SelfIterationDeps
from worker.chain.outbox_records import OutboxRecord
from worker.core.errors import PermanentFailure
from worker.drain.pipeline import Pipeline
from worker.keys.layout import Keys
from worker.runtime.app import build_pipeline
from worker.runtime.plugin_model import PluginRuntime
from worker.telemetry.recorder import DISABLED

pytestmark = [pytest.mark.integration]

PREFER = "Going forward, I prefer concise answers."
SKILL = 'Please create a skill called "Release list": run, tag.'


def _message(source_id: str, text: str = PREFER, user: str = "u1", **payload: Any) -> dict[str, Any]:
    body = {"agentId": "agt_1", "topicId": "tpc_1", "messageId": source_id, "message": text, **payload}
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": user,
        "agentId": "agt_1",
        "payload": {k: v for k, v in body.items() if v is not None},
    }


def _reflection(source_id: str, user: str, agent: str) -> dict[str, Any]:
    payload = {
        "agentId": agent,
        "userId": user,
        "reason": "failedToolCount",
        "scopeId": "s1",
        "scopeType": "topic",
        "windowStart": 1,
        "windowEnd": 2,
    }
    return {
        "sourceType": "agent.self_reflection.requested",
        "sourceId": source_id,
        "userId": user,
        "agentId": agent,
        "payload": payload,
    }


def _near_the_size_limit(limit: int) -> dict[str, Any]:
    """A preference whose payload is 200 bytes short of the event limit (the completion repeated it whole)."""
    event = _message("m-big")
    event["payload"]["message"] = PREFER + " " + "x" * (limit - 200 - len(PREFER) - 80)
    return event


def _run_requests(pipeline: Pipeline, tenant_keys: Keys, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Enqueue ``event`` as the door does, drain its scope, and return the run requests its chain staged, as the
    plugin's deliverer hands them to the task."""
    [prepared] = pipeline.emitter.validate_many([event])
    pipeline.emitter.enqueue([prepared])
    pipeline.drain_scope(prepared.scope_key)
    keys, client = tenant_keys.for_scope(prepared.scope_key), pipeline.store.client
    ids = client.smembers(keys.outbox_of_event(prepared.scope_key, prepared.event_id))
    records = [OutboxRecord.from_json(client.get(keys.outbox_record(prepared.scope_key, i))) for i in ids]
    return [
        {**r.payload, "tenant": r.tenant, "originEventId": r.event_id}
        for r in records
        if r.kind == AGENT_RUN_OUTBOX
    ]


def _runtime(pipeline: Pipeline) -> PluginRuntime:
    return PluginRuntime(pipeline.settings, pipeline.store.client, pipeline.store.keys, pipeline.emitter)


class TestTheCompletionOfAnAcceptedOrigin:
    @pytest.mark.parametrize(
        "event",
        [
            _message("m-topic-256", topicId="T" * 256),
            _message("m-skill-topic-256", SKILL, topicId="T" * 256),
            _message("m-empty-topic", topicId=""),
            _message("m-skill-empty-topic", SKILL, topicId=""),
            _message("m-long-agent-scope", user="U" * 200, topicId=None, agentId="A" * 200),
            _reflection("r-long-agent-scope", "U" * 200, "A" * 200),
        ],
        ids=[
            "memory-topic-id-of-256",
            "skill-topic-id-of-256",
            "memory-empty-topic-id",
            "skill-empty-topic-id",
            "memory-derived-scope-of-412",
            "self-reflection-derived-scope-of-412",
        ],
    )
    def test_is_stored_in_the_origins_scope(self, make_settings: Any, tenant_keys: Keys, event: Any) -> None:
        """A topic id of 256 (``topic:`` makes its scope 262 long), a long agent and user without a topic (their
        derived scope is 412 long), and an empty topic id (echoed in the marker, where the id rule refuses it) were
        all accepted at the door, and their run's completion was refused; it is now stored, in the origin's scope."""
        pipeline = build_pipeline(make_settings(), telemetry=DISABLED)
        [agent_run] = [t.run for t in self_iteration.plugin().tasks if t.name == AGENT_RUN_TASK]
        [payload] = _run_requests(pipeline, tenant_keys, event)
        agent_run(_runtime(pipeline), payload)
        scope = payload["scopeKey"]
        stored = pipeline.store.client.hgetall(
            tenant_keys.for_scope(scope).event(_completion_id(pipeline, payload))
        )
        assert stored, f"no completion stored in {scope[:40]}…"

    def test_of_a_preference_near_the_size_limit_is_stored(
        self, make_settings: Any, tenant_keys: Keys
    ) -> None:
        """The memory's summary is the whole feedback: the completion reported it whole beside the rest of the run,
        past the event limit; it reports at most ``REPORTED_SUMMARY_MAX`` characters of it (the memory keeps all)."""
        settings = make_settings()
        pipeline = build_pipeline(settings, telemetry=DISABLED)
        [agent_run] = [t.run for t in self_iteration.plugin().tasks if t.name == AGENT_RUN_TASK]
        [payload] = _run_requests(pipeline, tenant_keys, _near_the_size_limit(settings.max_event_bytes))
        agent_run(_runtime(pipeline), payload)
        scope = payload["scopeKey"]
        assert pipeline.store.client.hgetall(
            tenant_keys.for_scope(scope).event(_completion_id(pipeline, payload))
        )


def _completion_id(pipeline: Pipeline, payload: dict[str, Any]) -> str:
    """The event id the run's completion is stored under (its source id in the origin's scope)."""
    request = RunRequest.from_json_dict(payload)
    event = completion_event(request, {"marker": request.echoed_marker, "userId": request.user_id})
    return pipeline.emitter.validate(event, scope_key=request.scope_key).event_id


class Capturing:
    """A runner that keeps what it is handed."""

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    def dispatch(self, request: RunRequest) -> str:
        self.requests.append(request)
        return request.operation_id


class TestARunNoCompletionCanComeOf:
    def test_is_dead_in_the_outbox_before_it_runs(self, make_settings: Any) -> None:
        """A feedback whose trigger message id is 150 KB (the door takes a message id as any string) makes a
        marker the completion carries twice, past the event limit: the run is not handed to the reference agent
        (no memory written) and its record is dead at once (``GET /v1/outbox/dead``), naming why."""
        pipeline = build_pipeline(make_settings(), telemetry=DISABLED)
        runtime = _runtime(pipeline)
        runner = Capturing()
        runtime.deps.add(SelfIterationDeps(redis=runtime.redis, enabled_by_default=True, runner=runner))
        marker = {"kind": "memory", "sourceId": "m1:memory:m1", "triggerMessageId": "t" * 150_000}
        request = RunRequest(
            "agent-signal-memory-0123456789abcdef", "memory-writer", marker, "u1", "agt_1", PREFER
        )
        record = OutboxRecord(
            id="agent-run:x",
            kind=AGENT_RUN_OUTBOX,
            key="x",
            payload=request.to_json_dict(),
            scope_key="topic:t",
            event_id="",
            created_at=0,
        )
        deliver = self_iteration.plugin().deliverers[AGENT_RUN_OUTBOX](runtime)
        with pytest.raises(PermanentFailure) as refused:
            deliver(record)
        assert refused.value.code == "RUN_COMPLETION_REFUSED" and "payload is" in str(refused.value)
        assert runner.requests == []

    def test_runs_in_the_records_scope_not_the_payloads(self, make_settings: Any) -> None:
        """The scope a run completes in is the outbox record's (the scope of the event that staged it), as its
        tenant is: a request whose payload names another scope (a handler's, or one of before without any) is
        handed over with the record's."""
        runtime = _runtime(build_pipeline(make_settings(), telemetry=DISABLED))
        runner = Capturing()
        runtime.deps.add(SelfIterationDeps(redis=runtime.redis, enabled_by_default=True, runner=runner))
        request = RunRequest(
            "agent-signal-memory-0123456789abcdef", "memory-writer", {"kind": "memory"}, "u1", "a1", PREFER
        )
        payload = {**request.to_json_dict(), "scopeKey": "topic:someone-elses"}
        record = OutboxRecord(
            id="agent-run:y",
            kind=AGENT_RUN_OUTBOX,
            key="y",
            payload=payload,
            scope_key="user:u1/topic:t",
            event_id="",
            created_at=0,
        )
        self_iteration.plugin().deliverers[AGENT_RUN_OUTBOX](runtime)(record)
        assert [r.scope_key for r in runner.requests] == ["user:u1/topic:t"]


@pytest.mark.parametrize("char", ["a", "é", "😀", "\u2028", '"', "\x01"])
def test_the_probe_is_no_smaller_than_a_completion_of_any_text(char: str) -> None:
    """The pre-check's completion is at least as large, in the emitter's JSON bytes, as the run's own with a
    summary and title of the same lengths in any character: a run of emoji or control characters (4 and 6 bytes
    each) passed a probe filled with ASCII and was refused after the run wrote its memory."""
    request = RunRequest(
        "agent-signal-memory-0123456789abcdef", "memory-writer", {"kind": "memory"}, "u1", "a1", ""
    )
    probe = completion_probe(request)
    real = json.loads(json.dumps(probe))
    data = real["payload"]["selfIteration"]["mutations"][0]["data"]
    data["target"]["summary"] = char * REPORTED_SUMMARY_MAX
    data["target"]["title"] = data["summary"] = char * 80
    assert _json_bytes(probe["payload"]) >= _json_bytes(real["payload"])


def _json_bytes(payload: dict[str, Any]) -> int:
    """A payload's size as the emitter counts it (worker/intake/source_event.py)."""
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
