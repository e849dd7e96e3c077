"""Receipts exactly as LobeHub's own tests expect them (lobehub/lobehub v2.2.13, read from the public mirror
find-xposed-magisk/lobe-chat): ``buildSelfIterationReceipts.test.ts`` and ``completionLoop.integration.test.ts``
under apps/server/src/services/agentSignal/services/selfIteration/completion/__test__/, same inputs and
expected outputs, written against our functions."""

from __future__ import annotations

from typing import Any

from redis import Redis

from policies.self_iteration.handlers.completion import completion_fanout
from policies.self_iteration.records.receipts import build_self_iteration_receipts
from worker.chain.context import HandlerContext
from worker.core.nodes import ChainRef, Source
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore

BUILD_TEST = "buildSelfIterationReceipts.test.ts"
LOOP_TEST = "completionLoop.integration.test.ts"

MARKER = {
    "anchorMessageId": "msg_anchor",
    "kind": "nightly-review",
    "localDate": "2026-05-30",
    "sourceId": "nightly-review:user_1:agent_1:2026-05-30",
    "triggerMessageId": "msg_trigger",
}
SOURCE_ID = MARKER["sourceId"]
METADATA = {"localDate": "2026-05-30", "sourceType": "agent.execution.completed"}


def _build(
    mutations: list[dict[str, Any]] | None = None, artifacts: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """LobeHub's ``baseInput`` with the given mutations and artifacts."""
    return build_self_iteration_receipts(
        agent_id="agent_1",
        artifacts=artifacts or [],
        created_at=1_748_600_000_000,
        marker=MARKER,
        mutations=mutations or [],
        operation_id="op_1",
        source_id=SOURCE_ID,
        source_type="agent.execution.completed",
        topic_id="tpc_1",
        user_id="user_1",
    )


class TestBuildSelfIterationReceipts:
    def test_summary_receipt_with_run_counts(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'always emits one summary receipt with run counts'."""
        receipts = _build(artifacts=[{"apiName": "recordSelfReviewIdea", "data": {}, "kind": "artifact"}])
        assert len(receipts) == 1
        (summary,) = receipts
        assert summary["id"] == f"{SOURCE_ID}:self-iteration-summary"
        assert (summary["kind"], summary["status"]) == ("review", "completed")
        assert summary["title"] == "Nightly self-review completed"
        assert (summary["anchorMessageId"], summary["triggerMessageId"]) == ("msg_anchor", "msg_trigger")
        assert summary["metadata"]["actionCount"] == 0

    def test_memory_mutation_target_keeps_summary(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'projects a memory mutation into an applied memory receipt with a target'."""
        mutation = {
            "apiName": "writeMemory",
            "data": {"kind": "mutation", "resourceId": "mem_1", "summary": "Saved tone preference"},
            "kind": "mutation",
            "toolCallId": "call_1",
        }
        _, memory = _build([mutation])
        assert (memory["kind"], memory["status"]) == ("memory", "applied")
        assert memory["id"] == f"{SOURCE_ID}:call_1:memory"
        assert memory["title"] == "Saved tone preference"
        assert memory["metadata"] == METADATA
        assert memory["target"] == {
            "id": "mem_1",
            "summary": "Saved tone preference",
            "title": "Saved tone preference",
            "type": "memory",
        }

    def test_structured_memory_target(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'preserves structured memory target metadata for layer-specific navigation'."""
        data = {
            "kind": "mutation",
            "resourceId": "pref_1",
            "status": "applied",
            "summary": "Use concise implementation notes.",
            "target": {
                "id": "pref_1",
                "memoryId": "mem_1",
                "memoryLayer": "preference",
                "title": "Prefers concise implementation notes",
                "type": "memory",
            },
        }
        _, memory = _build(
            [{"apiName": "writeMemory", "data": data, "kind": "mutation", "toolCallId": "call_pref"}]
        )
        assert memory["title"] == "Prefers concise implementation notes"
        assert memory["target"] == {
            "id": "pref_1",
            "memoryId": "mem_1",
            "memoryLayer": "preference",
            "summary": "Use concise implementation notes.",
            "title": "Prefers concise implementation notes",
            "type": "memory",
        }

    def test_proposal_is_a_proposed_review_without_target(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'maps proposal creation to a proposed review receipt without a target'."""
        data = {"proposalId": "brf_1", "resourceId": "brf_1", "summary": "Refine skill X"}
        _, proposal = _build(
            [
                {
                    "apiName": "createSelfReviewProposal",
                    "data": data,
                    "kind": "mutation",
                    "toolCallId": "call_2",
                }
            ]
        )
        assert (proposal["kind"], proposal["status"]) == ("review", "proposed")
        assert "target" not in proposal

    def test_skipped_tool_result(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'collapses a skipped tool result to a skipped receipt'."""
        data = {"status": "skipped_unsupported", "summary": "name taken"}
        _, skill = _build(
            [{"apiName": "createSkillIfAbsent", "data": data, "kind": "mutation", "toolCallId": "call_3"}]
        )
        assert (skill["kind"], skill["status"]) == ("skill", "skipped")
        assert "rollbackStatus" not in skill["metadata"]

    def test_skill_creation_is_not_rollback_able(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'does not mark skill creation rollback available without a mutation id'
        (and '... when only resource metadata exists', which has the same input)."""
        data = {
            "resourceId": "adoc_created",
            "summary": "Created support skill",
            "target": {
                "agentDocumentId": "adoc_created",
                "documentId": "doc_created",
                "id": "adoc_created",
                "title": "Support skill",
                "type": "skill",
            },
        }
        for call in ("call_create_skill", "call_create_skill_with_mutation"):
            _, skill = _build(
                [{"apiName": "createSkillIfAbsent", "data": data, "kind": "mutation", "toolCallId": call}]
            )
            assert (skill["kind"], skill["status"]) == ("skill", "applied")
            assert skill["metadata"] == METADATA

    def test_skill_rollback_refs_and_target_document_refs(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'projects a skill rollback history ref and target document refs into an applied skill receipt'."""
        data = {
            "agentDocumentId": "adoc_1",
            "documentId": "doc_1",
            "expectedCurrentDocumentUpdatedAt": "2026-06-29T00:00:00.000Z",
            "historyId": "history_1",
            "resourceId": "adoc_1",
            "summary": "Refined support skill",
            "target": {
                "agentDocumentId": "adoc_1",
                "documentId": "doc_1",
                "id": "adoc_1",
                "title": "Support skill",
                "type": "skill",
            },
        }
        _, skill = _build(
            [
                {
                    "apiName": "replaceSkillContentCAS",
                    "data": data,
                    "kind": "mutation",
                    "toolCallId": "call_skill",
                }
            ]
        )
        assert skill["kind"] == "skill"
        assert skill["metadata"] == {
            "agentDocumentId": "adoc_1",
            "documentId": "doc_1",
            "expectedCurrentDocumentUpdatedAt": "2026-06-29T00:00:00.000Z",
            "historyId": "history_1",
            **METADATA,
            "rollbackStatus": "available",
        }
        assert skill["target"] == {
            "agentDocumentId": "adoc_1",
            "documentId": "doc_1",
            "id": "adoc_1",
            "summary": "Refined support skill",
            "title": "Support skill",
            "type": "skill",
        }

    def test_skill_target_document_refs_come_from_data_target_only(self) -> None:
        """buildSelfIterationReceipts.ts (the source of the test above): top-level document ids go to metadata, never the target."""
        data = {"agentDocumentId": "adoc_top", "documentId": "doc_top", "target": {"title": "Support skill"}}
        _, skill = _build([{"apiName": "createSkillIfAbsent", "data": data, "kind": "mutation"}])
        assert skill["target"] == {"title": "Support skill", "type": "skill"}
        assert (skill["metadata"]["agentDocumentId"], skill["metadata"]["documentId"]) == (
            "adoc_top",
            "doc_top",
        )

    def test_idempotent_ids(self) -> None:
        """buildSelfIterationReceipts.test.ts, 'is idempotent: re-projecting the same run yields the same receipt ids'."""
        mutations = [
            {
                "apiName": "writeMemory",
                "data": {"resourceId": "mem_1"},
                "kind": "mutation",
                "toolCallId": "c1",
            }
        ]
        assert [r["id"] for r in _build(mutations)] == [r["id"] for r in _build(mutations)]

    def test_summary_counts_and_ids_index_every_mutation(self) -> None:
        """buildSelfIterationReceipts.ts (no LobeHub test covers it): the summary counts every mutation, ids index all."""
        mutations = [
            {"kind": "mutation", "data": {}},  # no apiName: no receipt, but counted and indexed
            {"apiName": "writeMemory", "data": {"status": "skipped_duplicate"}, "kind": "mutation"},
            {"apiName": "createSelfReviewProposal", "data": {}, "kind": "mutation"},
        ]
        summary, memory, proposal = _build(mutations, artifacts=[{"apiName": "recordSelfReviewIdea"}])
        assert summary["detail"] == "Captured 1 idea(s) and applied 3 write(s)."
        assert summary["metadata"]["actionCount"] == 3
        assert memory["id"] == f"{SOURCE_ID}:writeMemory:1:memory"
        assert proposal["id"] == f"{SOURCE_ID}:createSelfReviewProposal:2:review"


SELF_ITERATION = {
    "artifacts": [{"apiName": "recordSelfReviewIdea", "data": {"idea": "try x"}, "kind": "artifact"}],
    "marker": {
        "anchorMessageId": "msg_anchor",
        "kind": "nightly-review",
        "localDate": "2026-05-30",
        "sourceId": "nightly-review:user_1:agent_1:2026-05-30",
    },
    "mutations": [
        {
            "apiName": "writeMemory",
            "data": {"resourceId": "mem_1", "summary": "Saved tone preference"},
            "kind": "mutation",
            "toolCallId": "call_mem",
        },
        {
            "apiName": "createSelfReviewProposal",
            "data": {"proposalId": "brf_1", "summary": "Refine skill X"},
            "kind": "mutation",
            "toolCallId": "call_prop",
        },
    ],
    "userId": "user_1",
}
COMPLETED = {
    "agentId": "nightly-review",
    "operationId": "op_1",
    "selfIteration": SELF_ITERATION,
    "topicId": "topic_1",
}


def _fanout(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Run our completion fan-out on an ``agent.execution.completed`` payload; the receipts it plans."""
    source = Source(
        source_id=f"{payload['operationId']}:complete:done",
        source_type="agent.execution.completed",
        scope_key="topic:topic_1",
        timestamp=1000,
        payload=payload,
        chain=ChainRef(chain_id="chain:op", root_source_id="op"),
        user_id="user_1",
    )
    result = completion_fanout(source, HandlerContext(scope_key="topic:topic_1", node_timestamp=1000))
    return [] if result is None else [a.payload["receipt"] for a in result.actions]


class TestCompletionLoop:
    def test_completed_run_projects_receipts(self) -> None:
        """completionLoop.integration.test.ts, 'projects + persists receipts for a completed self-iteration run'."""
        receipts = _fanout(COMPLETED)
        assert [r["kind"] for r in receipts] == ["review", "memory", "review"]
        memory = next(r for r in receipts if r["kind"] == "memory")
        assert (memory["status"], memory["topicId"], memory["anchorMessageId"]) == (
            "applied",
            "topic_1",
            "msg_anchor",
        )
        assert {k: memory["target"][k] for k in ("id", "type")} == {"id": "mem_1", "type": "memory"}
        proposal = next(r for r in receipts if "call_prop" in r["id"])
        assert (proposal["kind"], proposal["status"]) == ("review", "proposed")
        assert "target" not in proposal
        # buildSelfIterationReceipts.ts: the summary counts both mutations as writes.
        assert receipts[0]["detail"] == "Captured 1 idea(s) and applied 2 write(s)."

    def test_replay_adds_no_duplicates(self, redis_client: Redis, keys: BucketKeys) -> None:
        """completionLoop.integration.test.ts, 'is idempotent: replaying the same completion adds no duplicate receipts'."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        first = [store.append(r) for r in _fanout(COMPLETED)]
        again = [store.append(r) for r in _fanout(COMPLETED)]
        assert first == [True, True, True] and again == [False, False, False]
        listed, _ = store.list(user_id="user_1", agent_id="nightly-review", topic_id="topic_1", limit=50)
        assert len(listed) == 3

    def test_memory_run_projects_one_receipt(self) -> None:
        """completionLoop.integration.test.ts, 'projects a single memory receipt (no summary) with target + anchor for a memory-kind run'."""
        data = {
            "resourceId": "pref_1",
            "status": "applied",
            "summary": "Saved tone preference",
            "target": {
                "id": "pref_1",
                "memoryId": "mem_1",
                "memoryLayer": "preference",
                "title": "Tone preference",
                "type": "memory",
            },
        }
        payload = {
            "agentId": "agent_user_1",
            "operationId": "op_mem",
            "selfIteration": {
                "artifacts": [],
                "marker": {
                    "anchorMessageId": "assistant_msg_1",
                    "kind": "memory",
                    "sourceId": "source_1:action-memory-1",
                    "triggerMessageId": "user_msg_1",
                },
                "mutations": [{"apiName": "writeMemory", "data": data, "kind": "mutation"}],
                "userId": "user_1",
            },
            "topicId": "topic_1",
        }
        (memory,) = _fanout(payload)
        assert (memory["kind"], memory["status"]) == ("memory", "applied")
        assert (memory["anchorMessageId"], memory["triggerMessageId"]) == ("assistant_msg_1", "user_msg_1")
        assert memory["topicId"] == "topic_1"
        target = {k: memory["target"][k] for k in ("id", "memoryId", "memoryLayer", "type")}
        assert target == {"id": "pref_1", "memoryId": "mem_1", "memoryLayer": "preference", "type": "memory"}

    def test_no_self_iteration_payload_is_a_no_op(self) -> None:
        """completionLoop.integration.test.ts, 'no-ops when the completion carries no self-iteration payload (no marker stamped)'."""
        assert _fanout({"agentId": "nightly-review", "operationId": "op_2", "topicId": "topic_2"}) == []
