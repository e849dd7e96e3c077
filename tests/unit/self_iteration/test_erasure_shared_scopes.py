"""Self-iteration's eraser (policies/self_iteration/erasure.py) in a scope two users share, on a real Redis: the
records the handlers write there carry their user's feedback (a parked skill candidate's message, a procedure
record's summary or tool, a skill-candidate item, a judge diagnostic quoting the message), so each names its
``userId`` and erasing one user drops exactly that user's ones; the other's stay. Diagnostics are matched on
their fields, never by substring."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.erasure import erase_user
from policies.self_iteration.handlers.analyze_intent import (
    CONFLICT_POLICIES,
    feedback_planner,
    satisfaction_judge,
)
from policies.self_iteration.handlers.procedure import tool_outcome_procedure
from policies.self_iteration.judges.rules import SatisfactionVerdict
from policies.self_iteration.keys import SelfIterationKeys
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Signal, Source, SourceRef
from worker.keys.layout import BucketKeys

SHARED = "topic:tpc-shared"
ALONE = "topic:tpc-u1-alone"  # a scope that was u1's alone: the engine dropped it (no scope-users set left)


class MalformedJudge:
    """A satisfaction judge whose answer cannot be read: the handler keeps a diagnostic quoting the message."""

    def judge(self, message: str, serialized_context: str | None) -> SatisfactionVerdict:
        raise ValueError(f"malformed answer for {message!r}")


def _source(user: str, source_id: str, source_type: str, **payload: Any) -> Source:
    return Source(
        source_id=source_id,
        source_type=source_type,
        scope_key=SHARED,
        timestamp=1,
        payload=payload,
        chain=ChainRef(chain_id=f"chain:{source_id}", root_source_id=source_id),
        user_id=user,
    )


def _skill_signal(user: str, message_id: str, **extra: Any) -> Signal:
    payload = {
        "agentId": "agt_1",
        "confidence": 0.9,
        "conflictPolicy": CONFLICT_POLICIES["skill"],
        "evidence": [{"cue": "test", "excerpt": f"SECRET-{user}"}],
        "message": f"Please keep this as a skill: SECRET-{user} steps.",
        "messageId": message_id,
        "reason": f"the user liked SECRET-{user}",
        "target": "skill",
        "topicId": "tpc-shared",
        **extra,
    }
    return Signal(
        signal_id=f"sig_{message_id}",
        signal_type="signal.feedback.domain.skill",
        source=SourceRef(source_id=message_id, source_type="agent.user.message"),
        chain=ChainRef(chain_id=f"chain:{message_id}", root_source_id=message_id),
        timestamp=1,
        payload=payload,
    )


class Scope:
    """Runs the handlers as each user in the shared scope, applying their staged writes as a commit would."""

    def __init__(self, redis: Redis, keys: BucketKeys) -> None:
        self.redis, self.keys = redis, keys
        self.k = SelfIterationKeys(keys)

    def run(self, handler: Any, node: Any, user: str, **deps: Any) -> Any:
        ctx = HandlerContext(
            scope_key=SHARED,
            node_timestamp=100,
            effects=EffectBuffer(keys=self.keys),
            keys=self.keys,
            deps_of=Deps({SelfIterationDeps: SelfIterationDeps(self.redis, True, None, **deps)}),
            source=_source(user, f"src-{user}", "agent.user.message"),
        )
        result = handler(node, ctx)
        for command in ctx.effects.commands:
            self.redis.execute_command(*command)
        return result

    def feedback_of(self, user: str) -> None:
        """A parked skill candidate, a procedure record and a tool-outcome record, and a judge diagnostic."""
        parked = _skill_signal(
            user, f"park-{user}", trigger="execAgent", skillRoute="direct_decision", satisfactionResult="no"
        )
        self.run(feedback_planner, parked, user)
        message = _source(user, f"msg-{user}", "agent.user.message", message=f"SECRET-{user} was bad")
        self.run(satisfaction_judge, message, user, satisfaction_judge=MalformedJudge())
        outcome = _source(
            user,
            f"tool-{user}",
            "tool.outcome.completed",
            domainKey="skill",
            intentClass="tool_command",  # a handled marker too, its key the user's
            outcome={"status": "succeeded"},
            tool={"identifier": "notes", "apiName": "write", "args": f"SECRET-{user}"},
        )
        self.run(tool_outcome_procedure, outcome, user)

    def holding(self, word: str) -> list[str]:
        """The keys under the test's prefix whose value holds ``word`` (hashes, lists, strings)."""
        found = []
        for key in self.redis.scan_iter(match=self.keys.all_pattern, count=1000):
            kind = self.redis.type(key)
            if kind == "hash":
                text = json.dumps(self.redis.hgetall(key))
            elif kind == "list":
                text = json.dumps(self.redis.lrange(key, 0, -1))
            elif kind == "string":
                text = str(self.redis.get(key))
            else:
                continue
            if word in text:
                found.append(str(key))
        return sorted(found)


@pytest.fixture
def scope(redis_client: Redis, keys: BucketKeys) -> Scope:
    return Scope(redis_client, keys)


def test_erasing_one_user_of_a_shared_scope_drops_their_records_there_and_keeps_the_others(
    scope: Scope, redis_client: Redis, keys: BucketKeys
) -> None:
    for user in ("u1", "u2"):
        scope.feedback_of(user)
    # u1's weak skill observation joins the scope's bucket (one item: not scored yet), and u2's item is there too
    scope.run(feedback_planner, _skill_signal("u1", "obs-u1", satisfactionResult="satisfied"), "u1")
    item = {"recordId": "procedure-record:sig_obs-u2:skill-observation-record", "score": 0.6, "userId": "u2"}
    redis_client.rpush(scope.k.skill_candidates(SHARED), json.dumps(item))
    redis_client.sadd(keys.scope_users(SHARED), "u2")  # the engine kept the scope for u2 (u1 left its users)
    before = scope.holding("SECRET-u2")
    assert len(scope.holding("SECRET-u1")) == 3 and len(before) == 3  # skill-intent, procedure, diagnostics
    users = [
        json.loads(x).get("userId") for x in redis_client.lrange(scope.k.skill_candidates(SHARED), 0, -1)
    ]
    assert users == ["u1", "u2"]

    markers = {
        u: [str(m) for m in redis_client.scan_iter(match=scope.k.procedure_markers_of(SHARED, u) + "*")]
        for u in ("u1", "u2")
    }
    assert len(markers["u1"]) == 1 and len(markers["u2"]) == 1  # each tool outcome's handled marker

    removed = erase_user(redis_client, keys, "u1", frozenset({SHARED}))

    assert redis_client.exists(*markers["u1"]) == 0 and redis_client.exists(*markers["u2"]) == 1  # a review
    assert removed["procedureMarkers"] == 1
    assert scope.holding("SECRET-u1") == []
    assert scope.holding("SECRET-u2") == before
    left = [json.loads(x) for x in redis_client.lrange(scope.k.skill_candidates(SHARED), 0, -1)]
    assert left == [item]
    # the parked candidate, the observation and the tool-outcome record, the bucket item; one diagnostic
    assert removed["scopeRecords"] == 4 and removed["diagnostics"] == 1


def test_diagnostics_are_matched_on_their_fields_never_by_substring(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """Erasing user ``e`` wiped every diagnostic with an ``e`` in it. Now: an entry naming the user goes; one
    naming no user goes only when its scope was the user's alone; nothing else does."""
    diagnostics = SelfIterationKeys(keys).diagnostics
    entries = [
        {"stage": "satisfaction", "scopeKey": SHARED, "userId": "alice", "error": "see e"},
        {"stage": "domain", "scopeKey": "topic:else", "userId": "bob", "error": "e"},
        {"stage": "satisfaction", "scopeKey": SHARED, "error": "written before entries named a user"},
        {"stage": "domain", "scopeKey": ALONE, "error": "written before entries named a user"},
        {"stage": "domain", "scopeKey": "topic:else", "userId": "e", "error": "e's own"},
    ]
    redis_client.rpush(diagnostics, *[json.dumps(e) for e in entries], "not json, with an e")
    redis_client.sadd(keys.scope_users(SHARED), "alice")  # shared: alice's events keep it

    removed = erase_user(redis_client, keys, "e", frozenset({SHARED, ALONE}))

    kept = redis_client.lrange(diagnostics, 0, -1)
    assert kept == [json.dumps(e) for e in entries[:3]] + ["not json, with an e"]
    assert removed["diagnostics"] == 2
