"""The self-iteration handlers against the audit's findings, called directly on a real Redis (staged writes
applied as the fenced commit would): no shared "-" user for events without one, a parked skill candidate
consumed only by its own user, the skill-candidate bucket emptied once scored and capped, malformed judge
answers always a diagnostic (never a TypeError), and the feature gate checked on the memory path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.gate import set_override
from policies.self_iteration.handlers.actions import skill_management_handler, user_memory_handler
from policies.self_iteration.handlers.analyze_intent import (
    CONFLICT_POLICIES,
    SKILL_BUCKET_MAX_ITEMS,
    domain_judge,
    feedback_planner,
    satisfaction_judge,
)
from policies.self_iteration.handlers.completion import (
    completion_fanout,
    consume_pending_synthesis,
    skill_synthesis,
)
from policies.self_iteration.judges.openai_compatible import (
    MalformedJudgeOutput,
    OpenAIDomainJudge,
    OpenAISatisfactionJudge,
)
from policies.self_iteration.judges.rules import SatisfactionVerdict
from policies.self_iteration.keys import SelfIterationKeys, skill_intent_field, skill_intent_field_of_before
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import (
    Action,
    ChainRef,
    Conclude,
    Dispatch,
    ExecutorResult,
    Signal,
    Source,
    SourceRef,
    action_from,
)
from worker.keys.layout import BucketKeys

SCOPE = "topic:tpc_1"


class Harness:
    """Runs handlers in scope ``topic:tpc_1`` and applies their staged writes to Redis."""

    def __init__(self, redis: Redis, keys: BucketKeys) -> None:
        self.redis, self.keys = redis, keys
        self.deps = SelfIterationDeps(redis=redis, enabled_by_default=True, runner=None)

    def ctx(self, user: str | None, *, deps: SelfIterationDeps | None = None) -> HandlerContext:
        return HandlerContext(
            scope_key=SCOPE,
            node_timestamp=100,
            effects=EffectBuffer(keys=self.keys),
            keys=self.keys,
            deps_of=Deps({SelfIterationDeps: deps or self.deps}),
            source=_source("src_1", "agent.user.message", user),
        )

    def run(self, handler: Any, node: Any, ctx: HandlerContext) -> Any:
        result = handler(node, ctx)
        for command in ctx.effects.commands:
            self.redis.execute_command(*command)
        return result

    def diagnostics(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.redis.lrange(SelfIterationKeys(self.keys).diagnostics, 0, -1)]


@pytest.fixture
def h(redis_client: Redis, keys: BucketKeys) -> Harness:
    return Harness(redis_client, keys)


def _source(source_id: str, source_type: str, user: str | None, **payload: Any) -> Source:
    return Source(
        source_id=source_id,
        source_type=source_type,
        scope_key=SCOPE,
        timestamp=1,
        payload=payload,
        chain=ChainRef(chain_id=f"chain:{source_id}", root_source_id=source_id),
        user_id=user,
    )


def _signal(target: str, message: str, message_id: str, **extra: Any) -> Signal:
    payload = {
        "agentId": "agt_1",
        "confidence": 0.9,
        "conflictPolicy": CONFLICT_POLICIES[target],
        "evidence": [{"cue": "test", "excerpt": message}],
        "message": message,
        "messageId": message_id,
        "reason": "test",
        "satisfactionResult": "not_satisfied",
        "target": target,
        "topicId": "tpc_1",
        **extra,
    }
    return Signal(
        signal_id=f"sig_{message_id}",
        signal_type=f"signal.feedback.domain.{target}",
        source=SourceRef(source_id=message_id, source_type="agent.user.message"),
        chain=ChainRef(chain_id=f"chain:{message_id}", root_source_id=message_id),
        timestamp=1,
        payload=payload,
    )


def _action(kind: str) -> Action:
    signal = _signal(kind, "Going forward, I prefer tables in a checklist.", "msg_1")
    action_type = "action.user-memory.handle" if kind == "memory" else "action.skill-management.handle"
    payload = {
        "agentId": "agt_1",
        "idempotencyKey": f"msg_1:{kind}:msg_1",
        "message": signal.payload["message"],
        "messageId": "msg_1",
    }
    return action_from(signal, kind, action_type, payload, 1)


class TestNoSharedAnonymousUser:
    """Defect 1: an event without a user wrote memories, skills and receipts for the user id "-"."""

    @pytest.mark.parametrize(
        ("kind", "handler", "detail"),
        [
            ("memory", user_memory_handler, "Missing userId for memory action."),
            ("skill", skill_management_handler, "Missing userId for skill-management action."),
        ],
    )
    def test_an_action_without_a_user_skips_and_requests_no_run(
        self, h: Harness, kind: str, handler: Any, detail: str
    ) -> None:
        ctx = h.ctx(None)
        result = h.run(handler, _action(kind), ctx)
        assert isinstance(result, ExecutorResult)
        assert (result.status, result.detail) == ("skipped", detail)
        assert not ctx.effects  # no run request in the outbox: nothing is written for anybody

    @pytest.mark.parametrize("kind", ["memory", "skill"])
    def test_an_action_with_a_user_still_requests_its_run(self, h: Harness, kind: str) -> None:
        handler = user_memory_handler if kind == "memory" else skill_management_handler
        ctx = h.ctx("u1")
        result = h.run(handler, _action(kind), ctx)
        assert isinstance(result, ExecutorResult) and result.status == "applied"
        assert ctx.effects  # the run request, staged in the outbox

    def test_a_completion_without_a_user_writes_no_receipt(self, h: Harness) -> None:
        payload = {
            "agentId": "agt_1",
            "operationId": "op_1",
            "topicId": "tpc_1",
            "selfIteration": {
                "marker": {"kind": "memory", "sourceId": "s1"},
                "mutations": [{"apiName": "writeMemory", "data": {"status": "applied", "summary": "x"}}],
                "artifacts": [],
            },
        }
        source = _source("op_1:complete", "agent.execution.completed", None, **payload)
        result = completion_fanout(source, h.ctx(None))
        assert result == Conclude(concluded={"reason": "no userId: receipts need a user"})
        named = _source("op_1:complete", "agent.execution.completed", "u1", **payload)
        dispatch = completion_fanout(named, h.ctx("u1"))
        assert isinstance(dispatch, Dispatch)
        assert [a.payload["receipt"]["userId"] for a in dispatch.actions] == ["u1"]

    def test_a_retried_tool_call_gives_one_receipt_the_first(self, h: Harness) -> None:
        """Two mutations of one tool call (retried: skipped, then applied) make two receipts of one id; only the
        first was ever stored (append-once), and as two actions under one key with different payloads the whole
        completion would end INVALID_RESULT, every other receipt with it. The first of each id is dispatched."""
        mutations = [
            {
                "apiName": "writeMemory",
                "toolCallId": "call_1",
                "data": {"status": "skipped", "summary": "first"},
            },
            {
                "apiName": "writeMemory",
                "toolCallId": "call_1",
                "data": {"status": "applied", "summary": "again"},
            },
            {
                "apiName": "writeMemory",
                "toolCallId": "call_2",
                "data": {"status": "applied", "summary": "other"},
            },
        ]
        payload = {
            "agentId": "agt_1",
            "operationId": "op_2",
            "topicId": "tpc_1",
            "selfIteration": {"marker": {"kind": "memory", "sourceId": "s2"}, "mutations": mutations},
        }
        dispatch = completion_fanout(
            _source("op_2:complete", "agent.execution.completed", "u1", **payload), h.ctx("u1")
        )
        assert isinstance(dispatch, Dispatch)
        receipts = [a.payload["receipt"] for a in dispatch.actions]
        assert len({r["id"] for r in receipts}) == len(receipts) == 2
        assert "first" in json.dumps(receipts[0]) and "again" not in json.dumps(receipts)


def _completion(user: str | None, trigger: str = "msg_park") -> Source:
    return _source(
        f"op_{user}:complete",
        "agent.execution.completed",
        user,
        agentId="agt_1",
        operationId=f"op_{user}",
        topicId="tpc_1",
        reason="done",
        assistantMessageId="asst_1",
        triggerMessageId=trigger,
    )


class TestParkedCandidateOwner:
    """Defect 3: a completion of another user consumed a parked skill candidate."""

    @pytest.fixture
    def parked(self, h: Harness) -> None:
        signal = _signal(
            "skill",
            'Please create a skill called "Plan": SECRET steps.',
            "msg_park",
            trigger="execAgent",
            skillRoute="direct_decision",
            skillActionIntent="create",
        )
        result = h.run(feedback_planner, signal, h.ctx("u1"))
        assert result == Conclude(
            concluded={"reason": "skill candidate parked until agent.execution.completed"}
        )

    def test_the_candidate_names_its_user(self, h: Harness, parked: None) -> None:
        raw = h.redis.hget(SelfIterationKeys(h.keys).skill_intents(SCOPE), "skill-intent-record:u1:msg_park")
        assert json.loads(raw or "{}")["userId"] == "u1"

    @pytest.mark.parametrize("other", ["u2", None])
    def test_another_users_completion_leaves_it_parked(
        self, h: Harness, parked: None, other: str | None
    ) -> None:
        """The candidate is under its user's field: another user's completion does not find it (a derived-id
        walk: another user's message of the same ``messageId`` overwrote it under the message id alone)."""
        assert h.run(skill_synthesis, _completion(other), h.ctx(other)) is None
        assert h.diagnostics() == []
        _left_to_its_own_user(h, other)

    @pytest.mark.parametrize("other", ["u2", None])
    def test_a_candidate_of_before_is_left_parked_with_a_diagnostic(
        self, h: Harness, parked: None, other: str | None
    ) -> None:
        """Parked before fields were one user's (under the message id alone): another user's completion finds
        it there, leaves it and says so; its own user's completion still consumes it."""
        intents = SelfIterationKeys(h.keys).skill_intents(SCOPE)
        raw = h.redis.hget(intents, skill_intent_field("msg_park", "u1"))
        h.redis.hdel(intents, skill_intent_field("msg_park", "u1"))
        h.redis.hset(intents, skill_intent_field_of_before("msg_park"), raw or "")
        assert h.run(skill_synthesis, _completion(other), h.ctx(other)) is None
        if other is not None:
            (entry,) = h.diagnostics()
            assert (entry["stage"], entry["sourceId"], entry["userId"]) == (
                "skill-synthesis",
                "op_u2:complete",
                "u2",
            )
            assert "SECRET" not in json.dumps(entry)
        _left_to_its_own_user(h, other)


def _left_to_its_own_user(h: Harness, other: str | None) -> None:
    """The other user's skill action does not consume u1's parked candidate; u1's own completion still finds it."""
    ctx = h.ctx(other or "u2")
    consume_pending_synthesis(ctx, "msg_park", other or "u2")
    assert not ctx.effects
    dispatch = h.run(skill_synthesis, _completion("u1"), h.ctx("u1"))
    assert isinstance(dispatch, Dispatch)
    (action,) = dispatch.actions
    assert "SECRET" in action.payload["message"] and action.payload["pendingSynthesisOf"] == "msg_park"


def _positive(n: int) -> Signal:
    return _signal(
        "skill",
        "This workflow was useful and can be kept as reference.",
        f"msg_pos_{n}",
        satisfactionResult="satisfied",
        skillRoute="accumulate",
        skillActionIntent="maintain",
        skillIntentExplicitness="weak_positive",
    )


class TestSkillCandidateBucket:
    """Defect 9: the bucket never reset: every weak-positive message re-scored all earlier ones."""

    def test_a_scored_bucket_starts_again(self, h: Harness) -> None:
        key = SelfIterationKeys(h.keys).skill_candidates(SCOPE)
        sizes = []
        for n in range(8):
            result = h.run(feedback_planner, _positive(n), h.ctx("u1"))
            if isinstance(result, Dispatch):
                (scored,) = result.signals
                sizes.append(len(scored.payload["itemScores"]))
                assert scored.payload["recordIds"] == [
                    f"procedure-record:sig_msg_pos_{i}:skill-observation-record" for i in (n - 1, n)
                ]
            assert h.redis.llen(key) == (0 if isinstance(result, Dispatch) else 1)
        assert sizes == [2, 2, 2, 2]

    def test_a_bucket_that_never_scores_is_capped(self, h: Harness) -> None:
        key = SelfIterationKeys(h.keys).skill_candidates(SCOPE)
        stale = [json.dumps({"recordId": f"old_{i}", "score": 0, "at": 1}) for i in range(50)]
        h.redis.rpush(key, *stale)
        assert h.run(feedback_planner, _positive(0), h.ctx("u1")) is None  # 0.6 < 1: not scored
        assert h.redis.llen(key) == SKILL_BUCKET_MAX_ITEMS
        newest = json.loads(h.redis.lindex(key, -1) or "{}")
        assert newest["recordId"] == "procedure-record:sig_msg_pos_0:skill-observation-record"


class FakeClient:
    """Answers every generate_object call with ``data`` (what a model sent back, already parsed JSON)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def generate_object(self, name: str, schema: dict[str, Any], system: str, user: str) -> dict[str, Any]:
        return self.data


GOOD_SATISFACTION = {"result": "not_satisfied", "confidence": 0.9, "reason": "r", "evidence": []}
GOOD_TARGET = {"target": "memory", "confidence": 0.8, "reason": "r", "evidence": []}
VERDICT = SatisfactionVerdict("not_satisfied", 0.9, "r")


class TestMalformedJudgeAnswers:
    """Defect 10: float(None), list(5) raised TypeError (the event went to the dead letters); NaN passed."""

    @pytest.mark.parametrize(
        "change",
        [
            {"confidence": None},
            {"confidence": float("nan")},
            {"confidence": float("inf")},
            {"confidence": 1.5},
            {"confidence": "0.9"},
            {"confidence": True},
            {"evidence": 5},
            {"evidence": [5]},
            {"evidence": [{"cue": 1, "excerpt": "x"}]},
            {"reason": None},
            {"result": "happy"},
        ],
    )
    def test_satisfaction(self, change: dict[str, Any]) -> None:
        judge = OpenAISatisfactionJudge(FakeClient({**GOOD_SATISFACTION, **change}))  # type: ignore[arg-type]
        with pytest.raises(MalformedJudgeOutput):
            judge.judge("hello")

    @pytest.mark.parametrize(
        "targets",
        [
            5,
            None,
            [],
            [GOOD_TARGET] * 5,
            [5],
            [{**GOOD_TARGET, "confidence": None}],
            [{**GOOD_TARGET, "confidence": float("nan")}],
            [{**GOOD_TARGET, "confidence": "high"}],
            [{**GOOD_TARGET, "evidence": 5}],
            [{**GOOD_TARGET, "evidence": [5]}],
            [{**GOOD_TARGET, "reason": ["r"]}],
            [{**GOOD_TARGET, "target": "everything"}],
        ],
    )
    def test_domains(self, targets: Any) -> None:
        judge = OpenAIDomainJudge(FakeClient({"targets": targets}))  # type: ignore[arg-type]
        with pytest.raises(MalformedJudgeOutput):
            judge.judge_domains("hello", VERDICT)

    def test_valid_answers_still_pass(self) -> None:
        evidence = [{"cue": "c", "excerpt": "e"}]
        sat = OpenAISatisfactionJudge(
            FakeClient({**GOOD_SATISFACTION, "confidence": 1, "evidence": evidence})
        )  # type: ignore[arg-type]
        assert sat.judge("hello") == SatisfactionVerdict("not_satisfied", 1.0, "r", evidence)
        dom = OpenAIDomainJudge(FakeClient({"targets": [GOOD_TARGET, {**GOOD_TARGET, "target": "skill"}]}))  # type: ignore[arg-type]
        assert [(t.target, t.confidence) for t in dom.judge_domains("hello", VERDICT)] == [
            ("memory", 0.8),
            ("skill", 0.8),
        ]

    def test_the_domain_judge_concludes_with_a_diagnostic(self, h: Harness) -> None:
        judge = OpenAIDomainJudge(FakeClient({"targets": [{**GOOD_TARGET, "evidence": 5}]}))  # type: ignore[arg-type]
        deps = SelfIterationDeps(redis=h.redis, enabled_by_default=True, runner=None, domain_judge=judge)
        satisfaction = Signal(
            signal_id="msg_1:signal:feedback-satisfaction",
            signal_type="signal.feedback.satisfaction",
            source=SourceRef(source_id="msg_1", source_type="agent.user.message"),
            chain=ChainRef(chain_id="chain:msg_1", root_source_id="msg_1"),
            timestamp=1,
            payload={**GOOD_SATISFACTION, "message": "hello", "messageId": "msg_1"},
        )
        result = h.run(domain_judge, satisfaction, h.ctx("u1", deps=deps))
        assert isinstance(result, Conclude) and result.concluded is not None
        assert result.concluded["reason"] == "malformed domain classifier output"
        (entry,) = h.diagnostics()
        assert entry["stage"] == "domain" and "evidence" in entry["error"]

    def test_the_satisfaction_judge_concludes_with_a_diagnostic(self, h: Harness) -> None:
        judge = OpenAISatisfactionJudge(FakeClient({**GOOD_SATISFACTION, "confidence": float("nan")}))  # type: ignore[arg-type]
        deps = SelfIterationDeps(
            redis=h.redis, enabled_by_default=True, runner=None, satisfaction_judge=judge
        )
        source = _source("msg_1", "agent.user.message", "u1", message="hello", messageId="msg_1")
        result = h.run(satisfaction_judge, source, h.ctx("u1", deps=deps))
        assert isinstance(result, Conclude) and result.concluded is not None
        assert result.concluded["reason"] == "malformed satisfaction classifier output"
        assert [e["stage"] for e in h.diagnostics()] == ["satisfaction"]


class TestGateOnTheMemoryPath:
    """Defect 11: a user who turned self-iteration off after the event was admitted still got a memory."""

    def test_the_memory_action_checks_the_gate(self, h: Harness) -> None:
        set_override(h.redis, h.keys, "u1", False)
        ctx = h.ctx("u1")
        result = h.run(user_memory_handler, _action("memory"), ctx)
        assert isinstance(result, ExecutorResult)
        assert (result.status, result.detail) == ("skipped", "Self iteration is disabled.")
        assert not ctx.effects

    def test_the_satisfaction_judge_checks_the_gate(self, h: Harness) -> None:
        set_override(h.redis, h.keys, "u1", False)
        source = _source("msg_1", "agent.user.message", "u1", message="Going forward, I prefer tables.")
        result = h.run(satisfaction_judge, source, h.ctx("u1"))
        assert result == Conclude(concluded={"status": "skipped", "reason": "gate_disabled"})
        set_override(h.redis, h.keys, "u1", None)
        assert isinstance(h.run(satisfaction_judge, source, h.ctx("u1")), Dispatch)
