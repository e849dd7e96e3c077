"""LobeHub's buildSelfIterationReceipts (reference §7.1): one receipt per mutation with an ``apiName``, plus a
summary receipt for review kinds. Ids are deterministic: ``<sourceId>:<toolCallId ?? apiName:index>:<kind>``
(``index`` counts every mutation, named or not) and ``<sourceId>:self-iteration-summary``; the summary counts
every mutation as a write, as LobeHub's does.

A target's ``summary`` is the tool result's ``data.summary``; a skill target's ``agentDocumentId`` and
``documentId`` come from ``data.target``, the metadata's from the top level of ``data`` (the rollback refs).
Text fields count only when they are non-empty strings. One deliberate difference:
``expectedCurrentDocumentUpdatedAt`` may also be a number (our documents keep ``updatedAt`` in ms; LobeHub's
are ISO strings)."""

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
MEMORY_LAYERS = ("activity", "context", "experience", "identity", "preference")  # LobeHub's LayersEnum
SUMMARY_TITLES = {
    "memory": "Memory write completed",
    "nightly-review": "Nightly self-review completed",
    "self-feedback-intent": "Self-feedback intent completed",
    "self-reflection": "Self-reflection completed",
    "skill": "Skill write completed",
}


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _str(value: Any) -> str | None:
    """LobeHub's ``str()``: a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def _record(value: Any) -> dict[str, Any]:
    """LobeHub's ``isRecord`` guard: a dict, else an empty one."""
    return value if isinstance(value, dict) else {}


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
        for index, mutation in enumerate(mutations)
        if mutation.get("apiName")
    ]
    writes = len(mutations)
    if kind not in ("memory", "skill"):
        summary_receipt = {
            **base,
            "id": f"{source_id}:self-iteration-summary",
            "kind": "review",
            "status": "completed",
            "title": SUMMARY_TITLES.get(str(kind), "Self-review completed"),
            "detail": f"Captured {len(artifacts)} idea(s) and applied {writes} write(s).",
            "metadata": _clean(
                {"actionCount": writes, "localDate": marker.get("localDate"), "sourceType": source_type}
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
    """The receipt of one mutation (the ``index``-th of the run's mutations)."""
    api = str(mutation["apiName"])
    data = _record(mutation.get("data"))
    receipt_kind, status, default_title = API_KINDS.get(api, ("review", "applied", "Agent Signal action"))
    if str(data.get("status", "")).startswith("skipped"):
        status = "skipped"
    target = _record(data.get("target"))
    summary = _str(data.get("summary"))
    title = _str(target.get("title")) or summary or default_title
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
    receipt_kind: str, data: dict[str, Any], target: dict[str, Any], title: str
) -> dict[str, Any]:
    """A memory or skill receipt's ``target``: document refs (skill) from ``data.target``, summary from ``data``."""
    skill, memory = receipt_kind == "skill", receipt_kind == "memory"
    layer = target.get("memoryLayer")
    return _clean(
        {
            "agentDocumentId": _str(target.get("agentDocumentId")) if skill else None,
            "documentId": _str(target.get("documentId")) if skill else None,
            "id": _str(target.get("id")) or _str(data.get("resourceId")),
            "memoryId": _str(target.get("memoryId")) if memory else None,
            "memoryLayer": layer if memory and layer in MEMORY_LAYERS else None,
            "summary": _str(data.get("summary")),
            "title": title,
            "type": receipt_kind,
        }
    )


def _receipt_metadata(
    api: str, status: str, data: dict[str, Any], marker: dict[str, Any], source_type: str
) -> dict[str, Any]:
    """A mutation receipt's ``metadata``; a CAS skill replacement with its history is marked rollback-able."""
    expected = data.get("expectedCurrentDocumentUpdatedAt")
    if not (_str(expected) or (isinstance(expected, int | float) and not isinstance(expected, bool))):
        expected = None
    metadata = _clean(
        {
            "agentDocumentId": _str(data.get("agentDocumentId")),
            "documentId": _str(data.get("documentId")),
            "expectedCurrentDocumentUpdatedAt": expected,
            "historyId": _str(data.get("historyId")),
            "localDate": marker.get("localDate"),
            "sourceType": source_type,
        }
    )
    if (
        api == "replaceSkillContentCAS"
        and status == "applied"
        and "documentId" in metadata
        and expected is not None
        and "historyId" in metadata
    ):
        metadata["rollbackStatus"] = "available"
    return metadata
