"""buildSelfIterationReceipts (LobeHub §7.1): ids, kinds, statuses, titles, targets, metadata, summaries."""

from __future__ import annotations

from typing import Any

import pytest

from policies.self_iteration.records.receipts import build_self_iteration_receipts


def _build(
    kind: str, mutations: list[dict[str, Any]], artifacts: list[dict[str, Any]] | None = None, **marker: Any
) -> list[dict[str, Any]]:
    return build_self_iteration_receipts(
        agent_id="agt_run",
        artifacts=artifacts or [],
        created_at=1000,
        marker={"kind": kind, **marker},
        mutations=mutations,
        operation_id="op_1",
        source_id="src",
        source_type="agent.execution.completed",
        topic_id="tpc_1",
        user_id="u1",
    )


@pytest.mark.parametrize(
    ("api", "kind", "status", "title"),
    [
        ("writeMemory", "memory", "applied", "Memory saved"),
        ("createSkillIfAbsent", "skill", "applied", "Skill created"),
        ("replaceSkillContentCAS", "skill", "applied", "Skill updated"),
        ("createSelfReviewProposal", "review", "proposed", "Self-review proposal created"),
        ("refreshSelfReviewProposal", "review", "proposed", "Self-review proposal refreshed"),
        ("supersedeSelfReviewProposal", "review", "applied", "Self-review proposal superseded"),
        ("closeSelfReviewProposal", "review", "applied", "Self-review proposal closed"),
        ("somethingElse", "review", "applied", "Agent Signal action"),
    ],
)
def test_api_table(api: str, kind: str, status: str, title: str) -> None:
    """Each apiName maps to its kind, default status and default title; ids use apiName:index."""
    (receipt,) = _build("memory", [{"apiName": api, "kind": "mutation", "data": {}}])
    assert (receipt["kind"], receipt["status"], receipt["title"], receipt["detail"]) == (
        kind,
        status,
        title,
        title,
    )
    assert receipt["id"] == f"src:{api}:0:{kind}"
    assert ("target" in receipt) is (kind != "review")


def test_titles_status_and_ids() -> None:
    """target.title beats summary beats default; skipped* status; toolCallId in the id; marker agentId kept."""
    receipts = _build(
        "skill",
        [
            {
                "apiName": "createSkillIfAbsent",
                "toolCallId": "call_7",
                "data": {"summary": "S", "target": {"title": "T"}, "documentId": "d1"},
            },
            {"apiName": "writeMemory", "data": {"summary": "only summary", "status": "skipped: duplicate"}},
            {"kind": "mutation", "data": {}},  # no apiName: no receipt
        ],
        agentId="agt_marker",
        anchorMessageId="a1",
        triggerMessageId="m1",
    )
    assert [r["id"] for r in receipts] == ["src:call_7:skill", "src:writeMemory:1:memory"]
    # A top-level documentId is a metadata (rollback) ref; the target's comes from data.target (LobeHub).
    assert (
        receipts[0]["title"] == "T"
        and receipts[0]["detail"] == "S"
        and receipts[0]["metadata"]["documentId"] == "d1"
        and "documentId" not in receipts[0]["target"]
    )
    assert receipts[1]["status"] == "skipped" and receipts[1]["title"] == "only summary"
    assert (
        receipts[0]["agentId"] == "agt_marker"
        and receipts[0]["anchorMessageId"] == "a1"
        and receipts[0]["triggerMessageId"] == "m1"
    )


def test_rollback_availability() -> None:
    """Only an applied replaceSkillContentCAS with documentId, expected updatedAt and historyId can be undone."""
    data = {"documentId": "d", "expectedCurrentDocumentUpdatedAt": 5, "historyId": "h"}
    (ok,) = _build("skill", [{"apiName": "replaceSkillContentCAS", "data": data}])
    assert ok["metadata"]["rollbackStatus"] == "available"
    (missing,) = _build(
        "skill", [{"apiName": "replaceSkillContentCAS", "data": {"documentId": "d", "historyId": "h"}}]
    )
    assert "rollbackStatus" not in missing["metadata"]
    (created,) = _build("skill", [{"apiName": "createSkillIfAbsent", "data": data}])
    assert "rollbackStatus" not in created["metadata"]


@pytest.mark.parametrize(
    ("kind", "title"),
    [
        ("nightly-review", "Nightly self-review completed"),
        ("self-reflection", "Self-reflection completed"),
        ("self-feedback-intent", "Self-feedback intent completed"),
    ],
)
def test_summary_receipt_for_review_kinds(kind: str, title: str) -> None:
    """Review kinds get a summary first, counting ideas and every mutation (as LobeHub); memory/skill kinds do not."""
    receipts = _build(
        kind,
        [
            {"apiName": "closeSelfReviewProposal", "data": {}},
            {"apiName": "createSelfReviewProposal", "data": {}},
        ],
        artifacts=[{"apiName": "recordSelfReviewIdea"}, {"apiName": "recordSelfReviewIdea"}],
        localDate="2026-07-31",
    )
    summary = receipts[0]
    assert summary["id"] == "src:self-iteration-summary" and summary["title"] == title
    assert (summary["kind"], summary["status"]) == ("review", "completed")
    assert summary["detail"] == "Captured 2 idea(s) and applied 2 write(s)."
    assert summary["metadata"] == {
        "actionCount": 2,
        "localDate": "2026-07-31",
        "sourceType": "agent.execution.completed",
    }
    assert len(_build("memory", [{"apiName": "writeMemory", "data": {}}])) == 1


def test_a_runs_marker_source_id_is_its_key_up_to_128_characters_then_a_digest() -> None:
    """The marker's sourceId starts every receipt id of the run: LobeHub's key (an id of at most 128 characters)
    is kept; a longer one, or one breaking the id rule, is a digest (receipt ids past 256 could not be named)."""
    from policies.self_iteration.handlers.actions import MARKER_KEPT_MAX, _marker_source_id

    kept = "m" * MARKER_KEPT_MAX
    assert _marker_source_id(kept, "memory") == kept
    long, spaced = "m" * (MARKER_KEPT_MAX + 1), "root:memory:has space"
    for key in (long, spaced):
        digest = _marker_source_id(key, "memory")
        assert digest.startswith("memory:sha256:") and len(digest) == len("memory:sha256:") + 40
    assert _marker_source_id(long, "memory") != _marker_source_id(spaced, "memory")
