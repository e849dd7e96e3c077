"""Every handler write is fenced: source and signal handlers' writes commit with the event, or not at all.

Regression tests for the writes that used to escape the fenced commit (on real Redis; the SIGKILL case on
real worker processes):
* a failing skill-management action followed by a retry still synthesizes the parked skill once;
* a tool outcome that goes dead leaves no procedure state;
* a worker SIGKILLed between a signal handler's write and the commit leaves no trace of that write.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.keys import SelfIterationKeys
from producers import Producer
from tests.conftest import wait_for
from tests.support.waiting import relay_for
from worker.drain.pipeline import Pipeline
from worker.keys.layout import Keys
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

OWNER = {"userId": "u1", "agentId": "agt_1"}


class RecordingRunner:
    """An agent runner that records the operations handed over to it."""

    def __init__(self) -> None:
        self.handed_over: list[str] = []

    def dispatch(self, request: Any) -> str:
        self.handed_over.append(f"{request.slug}:{request.operation_id}")
        return str(request.operation_id)


class OnceBrokenReads:
    """The plugin's Redis for reads, except that the ``n``-th read of one hash field raises once (a Redis
    hiccup inside the skill-management action: the event is retried)."""

    def __init__(self, real: Redis, field: str, n: int) -> None:
        self.real, self.field, self.n, self.seen = real, field, n, 0

    def hget(self, key: str, field: str) -> Any:
        return self.hmget(key, [field])[0]

    def hmget(self, key: str, fields: list[str]) -> Any:
        if self.field in fields:
            self.seen += 1
            if self.seen == self.n:
                raise ConnectionError("Redis went away for a moment")
        return self.real.hmget(key, fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _drain_until_final(pipeline: Pipeline, producer: Producer, scope: str, event_id: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        pipeline.drain_scope(scope)
        record = producer.status(event_id)
        return record if record is not None and record["status"] in ("done", "dead") else None

    return dict(wait_for(final, timeout_s=30, what=f"event {event_id} to finish"))


def test_failed_skill_action_then_retry_synthesizes_the_parked_skill_once(make_settings: Any) -> None:
    """The skill-management action fails on its first attempt (after the completion planned it); the retried
    event plans it again from the still-parked candidate, it applies once, and the relay hands it over once."""
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    runner = RecordingRunner()
    deps = pipeline.deps.get(SelfIterationDeps)
    # Reads of the parked record: 1 the completion's synthesis, 2 the action's consume (broken once), 3, 4 retry.
    flaky = OnceBrokenReads(deps.redis, "skill-intent-record:u1:msg_p1", n=2)
    pipeline.deps.add(replace(deps, runner=runner, redis=flaky))
    parked = producer.enqueue(
        {
            "sourceType": "agent.user.message",
            "sourceId": "msg_p1",
            **OWNER,
            "payload": {
                "agentId": "agt_1",
                "topicId": "tpc_p",
                "messageId": "msg_p1",
                "trigger": "bot.inbound",
                "message": 'Please create a skill called "Deploy notes": build, tag, announce.',
            },
        }
    )
    assert _drain_until_final(pipeline, producer, "topic:tpc_p", parked.event_id)["status"] == "done"
    intents = SelfIterationKeys(producer.keys).skill_intents("topic:tpc_p")
    record = json.loads(producer.store.client.hget(intents, "skill-intent-record:u1:msg_p1") or "{}")
    assert "pendingSynthesis" in record, "the skill candidate should be parked until the run completes"
    completed = producer.enqueue(
        {
            "sourceType": "agent.execution.completed",
            "sourceId": "op_p1",
            **OWNER,
            "payload": {
                "agentId": "agt_1",
                "topicId": "tpc_p",
                "assistantMessageId": "ast_p1",
                "triggerMessageId": "msg_p1",
                "operationId": "op_p1",
            },
        }
    )
    final = _drain_until_final(pipeline, producer, "topic:tpc_p", completed.event_id)
    assert final["status"] == "done" and final["attempts"] == 2, final
    assert flaky.seen >= 3, "the action's first attempt failed and the retry planned it again"
    consumed = json.loads(producer.store.client.hget(intents, "skill-intent-record:u1:msg_p1") or "{}")
    assert "pendingSynthesis" not in consumed and consumed["feedbackMessageId"] == "msg_p1"
    relay = relay_for(pipeline, settings)
    wait_for(lambda: relay.run_once() == 0 and len(runner.handed_over) >= 1, what="the hand-over")
    assert [h.split(":")[0] for h in runner.handed_over] == ["skill-management"]
    producer.close()


def _family(tenant_keys: Keys, key: str) -> str:
    """The family of one of the tenant's keys: the word after its slot's prefix (``procedure`` in
    ``<prefix>t:{default}:procedure:{topic:t}:d20000``)."""
    assert tenant_keys.owns(key), key
    return key.split("}:", 1)[1].split(":", 1)[0]


def test_dead_tool_outcome_leaves_no_procedure_state(
    make_settings: Any, redis_client: Redis, tenant_keys: Keys
) -> None:
    """A tool outcome that can never be processed is dead-lettered and nothing the procedure staged remains. The
    activity plugin's schema refuses it at the door; it reaches the worker through a door whose plugins lack
    that one (as while a deployment rolls out a new plugin list)."""
    settings = make_settings()
    door = [s for s in settings.shipped_plugins if not s.startswith("policies.activity:")]
    assert len(door) == len(settings.shipped_plugins) - 1
    producer = Producer(settings.model_copy(update={"shipped_plugins": door}))
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    event = {
        "sourceType": "tool.outcome.failed",
        "sourceId": "tool_dead_1",
        **OWNER,
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_t",
            "domainKey": "memory:user-preference",
            "intentClass": "explicit_persistence",
            "outcome": {"status": "failed"},
            "tool": {"apiName": "write"},  # no identifier: the activity plugin dead-letters it
        },
    }
    # The procedure handler stages its writes before the activity handler dead-letters the event.
    handlers = [h.id for h in pipeline.registry.match("source", "tool.outcome.failed")]
    assert handlers.index("source.tool-outcome.procedure") < handlers.index("source.tool-outcome.activity")
    result = producer.enqueue(event)
    final = _drain_until_final(pipeline, producer, "topic:tpc_t", result.event_id)
    assert final["status"] == "dead" and "INVALID_TOOL_OUTCOME" in final["error"]
    # The procedure's families, named by the plugin's own key builder (a scope's keys sit in its bucket, the
    # diagnostics in the home slot); every key of the tenant is scanned and sorted by family.
    mine = SelfIterationKeys(tenant_keys)
    scope = "topic:tpc_t"
    procedure_families = {
        _family(tenant_keys, key)
        for key in (
            mine.procedure(scope, 0),
            mine.procedure_undated(scope),
            mine.procedure_marker(scope, "memory:user-preference", "explicit_persistence", "p", "u1"),
            mine.procedure_receipts(scope),
            mine.reflection_accumulator(scope, "topic", "tpc_t"),
            mine.diagnostics,
        )
    }
    stored = {
        key: _family(tenant_keys, key) for key in redis_client.scan_iter(match=tenant_keys.tenant_pattern)
    }
    assert "ev" in stored.values(), "the scan sees the tenant's keys (the dead event's hash among them)"
    leftovers = sorted(key for key, family in stored.items() if family in procedure_families)
    assert leftovers == []
    producer.close()


def test_sigkill_between_a_signal_handlers_write_and_the_commit_leaves_no_trace(
    make_settings: Any, start_worker: Any, redis_client: Redis
) -> None:
    """The worker dies after the signal handler staged its write: the redelivered event writes it once."""
    settings = make_settings(plugins=["tests.plugins.ledger:plugin"], extra_source_types=["ledger.entry"])
    worker = start_worker(settings)
    producer = Producer(settings)
    scope = "topic:ledger-kill"
    ctx_keys = Keys(settings.key_prefix, buckets=settings.scope_buckets)  # the scope's bucket, at any count
    accepted = producer.enqueue(
        {"sourceType": "ledger.entry", "sourceId": "l1", "scopeKey": scope, "payload": {"sleepMs": 30_000}}
    )
    pid = int(wait_for(lambda: redis_client.get(ctx_keys.plugin(scope, "probe")), what="the signal handler"))
    assert redis_client.hgetall(ctx_keys.plugin(scope, "ledger")) == {}, (
        "nothing is written before the commit"
    )
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: producer.status(accepted.event_id)["status"] == "done",
        timeout_s=60,
        what="recovery",
        # once in CI this wait ran out, and nothing said which way recovery stalled: the record and the log do
        explain=lambda: f"record: {producer.status(accepted.event_id)}\nworker log:\n{worker.log()[-6000:]}",
    )
    record = producer.status(accepted.event_id)
    assert record is not None and record["attempts"] == 2
    assert redis_client.hgetall(ctx_keys.plugin(scope, "ledger")) == {
        "source": "1",
        "signal": "1",
        "action": "1",
    }
    producer.close()
