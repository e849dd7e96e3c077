"""The feedback action planner exactly as LobeHub's own tests expect it (lobehub/lobehub v2.2.13, read from the
public mirror find-xposed-magisk/lobe-chat): apps/server/src/services/agentSignal/policies/analyzeIntent/
__tests__/feedbackAction.test.ts, same inputs and expected outputs, written against our planner.

Our handlers stage their writes; ``_plan`` applies the staged commands to Redis as the fenced commit would.
One difference in the inputs: LobeHub's planner falls back to ``signal.source.payload.serializedContext``
(a payload our source refs do not carry), so our domain signals carry ``serializedContext`` themselves."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.analyze_intent import CONFLICT_POLICIES, feedback_planner
from policies.self_iteration.keys import SelfIterationKeys, skill_intent_field
from policies.self_iteration.records.procedures import DAY_S, procedure_days
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Conclude, Dispatch, Signal, SourceRef
from worker.keys.layout import BucketKeys

SCOPE = "topic:thread_1"
CONTEXT = "<feedback_analysis_context><message>context</message></feedback_analysis_context>"


def _signal(
    target: str,
    *,
    message: str,
    message_id: str,
    signal_id: str,
    source_id: str,
    satisfaction: str = "not_satisfied",
    trigger: str | None = None,
    **skill: Any,
) -> Signal:
    """LobeHub's ``createDomainSignal`` (skill fields as keyword arguments, e.g. ``skillRoute``)."""
    payload: dict[str, Any] = {
        "confidence": 0.9,
        "conflictPolicy": CONFLICT_POLICIES[target],
        "evidence": [{"cue": "test", "excerpt": message}],
        "message": message,
        "messageId": message_id,
        "reason": "test-domain-signal",
        "satisfactionResult": satisfaction,
        "serializedContext": CONTEXT,
        "target": target,
        "trigger": trigger,
        **skill,
    }
    return Signal(
        signal_id=signal_id,
        signal_type=f"signal.feedback.domain.{target}",
        source=SourceRef(source_id=source_id, source_type="agent.user.message"),
        chain=ChainRef(chain_id="chain_1", root_source_id=source_id, parent_node_id=signal_id),
        timestamp=1,
        payload={k: v for k, v in payload.items() if v is not None},
    )


class Planner:
    """Runs the planner in scope ``topic:thread_1`` and commits its staged writes to Redis."""

    def __init__(self, redis: Redis, keys: BucketKeys) -> None:
        self.redis, self.keys = redis, keys
        deps = SelfIterationDeps(redis=redis, enabled_by_default=True, runner=None)
        self.deps = Deps({SelfIterationDeps: deps})

    def __call__(self, signal: Signal, now: int = 100) -> Dispatch | Conclude | None:
        effects = EffectBuffer(keys=self.keys)
        ctx = HandlerContext(
            scope_key=SCOPE, node_timestamp=now, effects=effects, keys=self.keys, deps_of=self.deps
        )
        result = feedback_planner(signal, ctx)
        for command in effects.commands:
            self.redis.execute_command(*command)
        return result

    def records(self) -> list[dict[str, Any]]:
        """The scope's procedure records of every day that may hold some (a test may cross midnight)."""
        days = procedure_days(int(time.time()))
        hashes = [self.redis.hvals(SelfIterationKeys(self.keys).procedure(SCOPE, day)) for day in days]
        return [json.loads(v) for values in hashes for v in values]

    def markers(self) -> list[dict[str, Any]]:
        found = self.redis.scan_iter(
            match=SelfIterationKeys(self.keys).procedure_marker(SCOPE, "*", "*", "*", "*")
        )
        return [json.loads(self.redis.get(k) or "{}") for k in found]

    def intent_record(self, message_id: str) -> dict[str, Any]:
        raw = self.redis.hget(
            SelfIterationKeys(self.keys).skill_intents(SCOPE), skill_intent_field(message_id, None)
        )
        return dict(json.loads(raw or "{}"))


@pytest.fixture
def plan(redis_client: Redis, keys: BucketKeys) -> Planner:
    return Planner(redis_client, keys)


def _positive(n: str, prefix: str = "skill_positive") -> Signal:
    """One weak satisfied skill observation of the accumulation tests (``sig_<prefix>_<n>``)."""
    messages = {
        "1": "This successful workflow can be kept as a reference.",
        "2": "The review flow from earlier is worth reusing next time.",
    }
    return _signal(
        "skill",
        message=messages.get(n, "This workflow was useful and can be kept as reference."),
        message_id=f"msg_{prefix}_{n}",
        signal_id=f"sig_{prefix}_{n}",
        source_id=f"source_{prefix}_{n}",
        satisfaction="satisfied",
    )


class TestMemoryAndSkillActions:
    def test_stable_memory_idempotency_keys(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'creates stable idempotency keys for memory actions'."""
        signal = _signal(
            "memory",
            message="Remember this preference.",
            message_id="msg_1",
            signal_id="sig_1",
            source_id="source_1",
        )
        first, second = plan(signal), plan(signal)
        assert isinstance(first, Dispatch) and first == second
        (action,) = first.actions
        assert action.action_type == "action.user-memory.handle"
        assert action.payload["feedbackHint"] == "not_satisfied"
        assert action.payload["idempotencyKey"] == "source_1:memory:msg_1"
        assert action.payload["serializedContext"] == CONTEXT

    def test_memory_action_without_preplanned_payload(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'dispatches memory actions without requiring preplanned memory payloads'."""
        result = plan(
            _signal(
                "memory",
                message="Remember this preference.",
                message_id="msg_4",
                signal_id="sig_4",
                source_id="source_4",
            )
        )
        assert isinstance(result, Dispatch)
        payload = result.actions[0].payload
        assert payload["evidence"] == [{"cue": "test", "excerpt": "Remember this preference."}]
        assert (payload["feedbackHint"], payload["idempotencyKey"]) == (
            "not_satisfied",
            "source_4:memory:msg_4",
        )
        assert (payload["message"], payload["reason"]) == ("Remember this preference.", "test-domain-signal")
        assert payload["serializedContext"] == CONTEXT

    def test_skill_domain_plans_skill_management(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'plans skill-management actions for skill domain signals'."""
        message = "This successful workflow should become a reusable skill."
        result = plan(
            _signal(
                "skill",
                message=message,
                message_id="msg_2",
                signal_id="sig_2",
                source_id="source_2",
                trigger="client.runtime.complete",
            )
        )
        assert isinstance(result, Dispatch)
        (action,) = result.actions
        assert action.action_type == "action.skill-management.handle"
        assert (action.payload["idempotencyKey"], action.payload["message"]) == (
            "source_2:skill:msg_2",
            message,
        )
        assert action.payload["serializedContext"] == CONTEXT

    @pytest.mark.parametrize(
        ("explicitness", "name"),
        [
            ("explicit_action", "plans direct skill-management actions for satisfied explicit skill intent"),
            (
                "implicit_strong_learning",
                "plans direct skill-management actions for implicit strong learning intent",
            ),
        ],
    )
    def test_satisfied_direct_skill_intent(self, plan: Planner, explicitness: str, name: str) -> None:
        """feedbackAction.test.ts, the two direct satisfied-skill tests named in ``name``."""
        result = plan(
            _signal(
                "skill",
                message="Convert it into a real skills/bundle.",
                message_id="msg_skill_convert",
                signal_id="sig_skill_convert",
                source_id="source_skill_convert",
                satisfaction="satisfied",
                trigger="client.runtime.complete",
                skillActionIntent="create",
                skillIntentExplicitness=explicitness,
                skillRoute="direct_decision",
            )
        )
        assert isinstance(result, Dispatch), name
        (action,) = result.actions
        assert action.action_type == "action.skill-management.handle"
        assert action.payload["feedbackHint"] == "satisfied"
        assert action.payload["idempotencyKey"] == "source_skill_convert:skill:msg_skill_convert"

    def test_completion_triggered_direct_skill_dispatches(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'dispatches direct skill decisions from completion-triggered user feedback'."""
        result = plan(
            _signal(
                "skill",
                message="Nice work. Can we keep this workflow?",
                message_id="msg_skill_complete",
                signal_id="sig_skill_complete",
                source_id="source_skill_complete",
                satisfaction="satisfied",
                trigger="client.runtime.complete",
                skillActionIntent="create",
                skillIntentExplicitness="implicit_strong_learning",
                skillRoute="direct_decision",
            )
        )
        assert isinstance(result, Dispatch)
        assert [a.action_type for a in result.actions] == ["action.skill-management.handle"]


class TestDeferredSkill:
    def test_client_start_records_intent(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'defers direct skill decisions from normal user-message sources'."""
        result = plan(
            _signal(
                "skill",
                message="Nice work. Can we keep this workflow?",
                message_id="msg_skill_defer",
                signal_id="sig_skill_defer",
                source_id="source_skill_defer",
                satisfaction="satisfied",
                trigger="client.runtime.start",
                skillActionIntent="create",
                skillIntentConfidence=0.88,
                skillIntentExplicitness="implicit_strong_learning",
                skillIntentReason="User asked to preserve this workflow.",
                skillRoute="direct_decision",
            ),
            now=123,
        )
        assert result == Conclude(concluded={"reason": "skill intent recorded until client.runtime.complete"})
        record = plan.intent_record("msg_skill_defer")
        assert {k: record[k] for k in record if k != "pendingSynthesis"} == {
            "actionIntent": "create",
            "confidence": 0.88,
            "createdAt": 123,
            "explicitness": "implicit_strong_learning",
            "feedbackMessageId": "msg_skill_defer",
            "reason": "User asked to preserve this workflow.",
            "route": "direct_decision",
            "scopeKey": SCOPE,
            "sourceId": "source_skill_defer",
        }

    def test_server_inbound_candidate_is_parked(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'parks a server-inbound skill candidate until agent.execution.completed'."""
        message = "Assign T199 to device 2, research and build an MVP, then write a report."
        result = plan(
            _signal(
                "skill",
                message=message,
                message_id="msg_skill_server",
                signal_id="sig_skill_server",
                source_id="source_skill_server",
                trigger="bot",
                skillActionIntent="create",
                skillIntentConfidence=0.9,
                skillIntentExplicitness="implicit_strong_learning",
                skillIntentReason="a reusable task execution pattern",
                skillRoute="direct_decision",
            ),
            now=123,
        )
        assert result == Conclude(
            concluded={"reason": "skill candidate parked until agent.execution.completed"}
        )
        record = plan.intent_record("msg_skill_server")
        assert (record["feedbackMessageId"], record["route"]) == ("msg_skill_server", "direct_decision")
        assert record["pendingSynthesis"]["message"] == message


class TestNoAction:
    @pytest.mark.parametrize(
        ("target", "message", "skill", "name"),
        [
            (
                "prompt",
                'Stop saying "Below is a detailed analysis".',
                {},
                "does not plan actions for unsupported prompt domain yet",
            ),
            ("none", "Thanks.", {}, "does not plan actions for explicit no-op domain signals"),
            (
                "skill",
                "This approach is not suitable. Please do not do this again.",
                {
                    "skillActionIntent": "noop",
                    "skillIntentExplicitness": "non_skill_preference",
                    "skillRoute": "non_skill",
                },
                "does not plan skill actions for non-skill preference route",
            ),
            (
                "skill",
                "This explanation was helpful.",
                {
                    "skillActionIntent": "maintain",
                    "skillIntentExplicitness": "weak_positive",
                    "skillRoute": "accumulate",
                },
                "keeps weak positive skill intent in accumulation",
            ),
            (
                "skill",
                "This successful workflow can be kept as a reference.",
                {},
                "does not directly handle satisfied skill domain signals",
            ),
        ],
    )
    def test_no_action(
        self, plan: Planner, target: str, message: str, skill: dict[str, Any], name: str
    ) -> None:
        """feedbackAction.test.ts, the no-action tests named in ``name``: the planner returns nothing."""
        satisfaction = "satisfied" if target == "skill" else "not_satisfied"
        signal = _signal(
            target,
            message=message,
            message_id="msg_x",
            signal_id="sig_x",
            source_id="source_x",
            satisfaction=satisfaction,
            **skill,
        )
        assert plan(signal) is None, name


class TestAccumulation:
    def test_satisfied_skill_feedback_scores_a_bucket(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'accumulates satisfied skill feedback into a scored skill procedure bucket'."""
        assert plan(_positive("1"), now=100) is None
        second = plan(_positive("2"), now=130)
        ids = [f"procedure-record:sig_skill_positive_{n}:skill-observation-record" for n in "12"]
        assert isinstance(second, Dispatch) and second.actions == []
        (scored,) = second.signals
        assert scored.signal_type == "signal.procedure.bucket.scored"
        assert scored.signal_id == "sig_skill_positive_2:signal:procedure-accumulated"
        assert {k: scored.payload[k] for k in ("bucketKey", "domain", "recordIds", "suggestedActions")} == {
            "bucketKey": "topic:thread_1:skill",
            "domain": "skill",
            "recordIds": ids,
            "suggestedActions": ["maintain"],
        }
        candidates = [
            r for r in plan.records() if r["accumulatorRole"] == "candidate" and r["domainKey"] == "skill"
        ]
        assert sorted(r["id"] for r in candidates) == ids
        accumulated = [m for m in plan.markers() if m["markerType"] == "accumulated"]
        assert [(m["domainKey"], m["signalId"]) for m in accumulated] == [("skill", scored.signal_id)]

    def test_batch_scorer_item_scores(self, plan: Planner) -> None:
        """feedbackAction.test.ts (same scenario) with procedure/__tests__/batchScorer.test.ts's scoring: each observed record suggests maintain."""
        plan(_positive("1"), now=100)
        second = plan(_positive("2"), now=130)
        assert isinstance(second, Dispatch)
        payload = second.signals[0].payload
        assert payload["aggregateScore"] == pytest.approx(1.2) and payload["confidence"] == 0.7
        assert [(i["reasons"], i["score"], i["suggestedAction"]) for i in payload["itemScores"]] == [
            (["observed-record"], 0.6, "maintain"),
            (["observed-record"], 0.6, "maintain"),
        ]

    def test_context_plus_one_candidate_does_not_accumulate(self, plan: Planner, keys: BucketKeys) -> None:
        """feedbackAction.test.ts, 'does not accumulate context plus one satisfied skill intent record'."""
        context_record = {
            "accumulatorRole": "context",
            "cheapScoreDelta": 0,
            "createdAt": 90,
            "domainKey": "skill",
            "id": "procedure-record:direct-skill-context",
            "scopeKey": SCOPE,
            "status": "handled",
        }
        plan.redis.hset(
            SelfIterationKeys(keys).procedure(SCOPE, int(time.time()) // DAY_S),
            context_record["id"],
            json.dumps(context_record),
        )
        assert plan(_positive("single"), now=130) is None
        assert not [m for m in plan.markers() if m["markerType"] == "accumulated"]
        ids = [r["id"] for r in plan.records() if r["accumulatorRole"] == "candidate"]
        assert ids == ["procedure-record:sig_skill_positive_single:skill-observation-record"]


class TestSuppression:
    def test_handled_marker_suppresses_memory_action(self, plan: Planner, keys: BucketKeys) -> None:
        """feedbackAction.test.ts, 'suppresses memory action when marker reader reports handled same-source procedure'."""
        marker_key = SelfIterationKeys(keys).procedure_marker(
            SCOPE, "memory:user-preference", "explicit_persistence", "message:msg_1", None
        )
        plan.redis.set(marker_key, json.dumps({"markerType": "handled"}))
        signal = _signal(
            "memory",
            message="Remember that I prefer concise replies.",
            message_id="msg_1",
            signal_id="sig_procedure_1",
            source_id="source_procedure_1",
        )
        result = plan(signal)
        assert isinstance(result, Dispatch) and result.actions == []
        (scored,) = result.signals
        assert scored.signal_type == "signal.procedure.bucket.scored"
        assert scored.payload["suggestedActions"] == ["suppressed"]

    def test_no_marker_keeps_memory_action(self, plan: Planner) -> None:
        """feedbackAction.test.ts, 'keeps memory action when marker reader does not suppress'."""
        signal = _signal(
            "memory",
            message="Remember that I prefer concise replies.",
            message_id="msg_1",
            signal_id="sig_procedure_2",
            source_id="source_procedure_2",
        )
        result = plan(signal)
        assert isinstance(result, Dispatch)
        assert [a.action_type for a in result.actions] == ["action.user-memory.handle"]
