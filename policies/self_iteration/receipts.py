"""LobeHub's buildSelfIterationReceipts (reference §7.1): one receipt per mutation, plus a summary receipt for
review kinds. Ids are deterministic: ``<sourceId>:<toolCallId ?? apiName:index>:<kind>`` and
``<sourceId>:self-iteration-summary``."""

from __future__ import annotations

from typing import Any

__all__ = ["build_self_iteration_receipts"]

API_KINDS: dict[str, tuple[str, str, str]] = {
    "writeMemory": ("memory", "applied", "Memory saved"),
    "createSkillIfAbsent": ("skill", "applied", "Skill created"),
    "replaceSkillContentCAS": ("skill", "applied", "Skill updated"),
    "createSelfReviewProposal": ("review", "proposed", "Self-review proposal created"),
    "refreshSelfReviewProposal": ("review", "proposed", "Self-review proposal refreshed"),
    "supersedeSelfReviewProposal": ("review", "applied", "Self-review proposal superseded"),
    "closeSelfReviewProposal": ("review", "applied", "Self-review proposal closed"),
}
SUMMARY_TITLES = {
    "memory": "Memory write completed",
    "nightly-review": "Nightly self-review completed",
    "self-feedback-intent": "Self-feedback intent completed",
    "self-reflection": "Self-reflection completed",
    "skill": "Skill write completed",
}


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def build_self_iteration_receipts(
    *,
    agent_id: str,
    artifacts: list[dict[str, Any]],
    created_at: int,
    marker: dict[str, Any],
    mutations: list[dict[str, Any]],
    operation_id: str,
    source_id: str,
    source_type: str,
    topic_id: str,
    user_id: str,
) -> list[dict[str, Any]]:
    base = _clean(
        {
            "agentId": marker.get("agentId")
            or agent_id,  # the marker's agentId is kept (LobeHub drops it: quirk 7)
            "anchorMessageId": marker.get("anchorMessageId"),
            "triggerMessageId": marker.get("triggerMessageId"),
            "createdAt": created_at,
            "operationId": operation_id,
            "sourceId": source_id,
            "sourceType": source_type,
            "topicId": topic_id,
            "userId": user_id,
        }
    )
    kind = marker.get("kind")
    receipts = [
        _mutation_receipt(base, index, mutation, marker, source_id, source_type)
        for index, mutation in enumerate(m for m in mutations if m.get("apiName"))
    ]
    applied = sum(1 for receipt in receipts if receipt["status"] == "applied")
    if kind not in ("memory", "skill"):
        summary_receipt = {
            **base,
            "id": f"{source_id}:self-iteration-summary",
            "kind": "review",
            "status": "completed",
            "title": SUMMARY_TITLES.get(str(kind), "Self-review completed"),
            "detail": f"Captured {len(artifacts)} idea(s) and applied {applied} write(s).",
            "metadata": _clean(
                {"actionCount": applied, "localDate": marker.get("localDate"), "sourceType": source_type}
            ),
        }
        return [summary_receipt, *receipts]
    return receipts


def _mutation_receipt(
    base: dict[str, Any],
    index: int,
    mutation: dict[str, Any],
    marker: dict[str, Any],
    source_id: str,
    source_type: str,
) -> dict[str, Any]:
    """The receipt of one mutation (the ``index``-th with an ``apiName``)."""
    api = str(mutation["apiName"])
    data = mutation.get("data") or {}
    receipt_kind, status, default_title = API_KINDS.get(api, ("review", "applied", "Agent Signal action"))
    if str(data.get("status", "")).startswith("skipped"):
        status = "skipped"
    target = data.get("target") or {}
    title = target.get("title") or data.get("summary") or default_title
    summary = data.get("summary")
    receipt: dict[str, Any] = {
        **base,
        "id": f"{source_id}:{mutation.get('toolCallId') or f'{api}:{index}'}:{receipt_kind}",
        "kind": receipt_kind,
        "status": status,
        "title": title,
        "detail": summary or title,
    }
    if receipt_kind != "review":
        receipt["target"] = _receipt_target(receipt_kind, data, target, title)
    receipt["metadata"] = _receipt_metadata(api, status, data, marker, source_type)
    return receipt


def _receipt_target(
    receipt_kind: str, data: dict[str, Any], target: dict[str, Any], title: Any
) -> dict[str, Any]:
    """A memory or skill receipt's ``target``."""
    return _clean(
        {
            "agentDocumentId": data.get("agentDocumentId"),
            "documentId": data.get("documentId") if receipt_kind == "skill" else None,
            "id": target.get("id") or data.get("resourceId"),
            "memoryId": target.get("memoryId"),
            "memoryLayer": target.get("memoryLayer") if receipt_kind == "memory" else None,
            "summary": target.get("summary"),
            "title": title,
            "type": receipt_kind,
        }
    )


def _receipt_metadata(
    api: str, status: str, data: dict[str, Any], marker: dict[str, Any], source_type: str
) -> dict[str, Any]:
    """A mutation receipt's ``metadata``; a CAS skill replacement with its history is marked rollback-able."""
    metadata = _clean(
        {
            "agentDocumentId": data.get("agentDocumentId"),
            "documentId": data.get("documentId"),
            "expectedCurrentDocumentUpdatedAt": data.get("expectedCurrentDocumentUpdatedAt"),
            "historyId": data.get("historyId"),
            "localDate": marker.get("localDate"),
            "sourceType": source_type,
        }
    )
    if (
        api == "replaceSkillContentCAS"
        and status == "applied"
        and data.get("documentId")
        and data.get("expectedCurrentDocumentUpdatedAt") is not None
        and data.get("historyId")
    ):
        metadata["rollbackStatus"] = "available"
    return metadata
