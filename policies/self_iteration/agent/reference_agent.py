"""The reference agent: a rule-based stand-in for the memory writer, skill manager and reviewers, so a fresh
install closes the loop without a model. It writes into the DocumentStore (memories, versioned skill
documents) and reports the run as ``agent.execution.completed`` with LobeHub's ``selfIteration`` payload
(``{marker, mutations, artifacts, userId}``; tool results carry ``kind``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from policies.self_iteration.agent.runners import RunRequest
from policies.self_iteration.records.documents import DocumentStore

__all__ = [
    "REPORTED_SUMMARY_MAX",
    "RunDropped",
    "completion_event",
    "completion_probe",
    "run_reference_agent",
]

Proceed = Callable[[], bool]


class RunDropped(Exception):
    """The run was dropped before it wrote anything (``proceed`` said no: its origin event was erased)."""


def _always() -> bool:
    return True


PREFERENCE = re.compile(r"\bprefer|\blike\b|\bwant\b|偏好|喜欢|以后|今后", re.IGNORECASE)
LEAD_IN = re.compile(r"^(?:going forward|from now on|in the future|next time)[,:]?\s*", re.IGNORECASE)


# The memory's summary as the completion reports it (the memory itself keeps all of it): the feedback it comes from
# may be nearly as large as an event may be, and the completion carries more than the summary.
REPORTED_SUMMARY_MAX = 2000


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _title(message: str, limit: int = 80) -> str:
    text = LEAD_IN.sub("", message.strip())
    text = text[:1].upper() + text[1:] if text else "Memory saved"
    return _shortened(text, limit)


def _memory(store: DocumentStore, request: RunRequest, proceed: Proceed) -> list[dict[str, Any]]:
    message = str(request.context.get("message") or request.prompt)
    layer = "preference" if PREFERENCE.search(message) else "context"
    title = _title(message)
    if not proceed():
        raise RunDropped
    memory = store.write_memory(
        request.user_id,
        source_id=request.marker.get("sourceId", request.operation_id),
        layer=layer,
        title=title,
        summary=message.strip(),
    )
    target = {
        "id": memory["id"],
        "memoryId": memory["id"],
        "memoryLayer": layer,
        "summary": _shortened(str(memory["summary"]), REPORTED_SUMMARY_MAX),
        "title": title,
        "type": "memory",
    }
    data = {
        "kind": "mutation",
        "target": target,
        "resourceId": memory["id"],
        "status": "applied",
        "summary": title,
    }
    return [{"apiName": "writeMemory", "kind": "mutation", "data": data}]


QUOTED = re.compile(r"[\"“「]([^\"”」]{2,60})[\"”」]")


def _skill_title(message: str) -> str:
    """A quoted name in the feedback names the skill ("Release checklist"); else the feedback itself."""
    quoted = QUOTED.search(message)
    return quoted.group(1).strip() if quoted else _title(message, 60)


def _skill(store: DocumentStore, request: RunRequest, proceed: Proceed) -> list[dict[str, Any]]:
    message = str(request.context.get("message") or request.prompt)
    agent_id = request.agent_id or "-"
    title = str(request.context.get("skillTitle") or _skill_title(message))
    content = f"# {title}\n\nLearned from feedback: {message.strip()}\n"
    if not proceed():
        raise RunDropped
    api, doc, history_id = store.upsert_skill(
        request.user_id, agent_id, title=title, content=content, source_id=request.operation_id
    )
    data: dict[str, Any] = {
        "kind": "mutation",
        "status": "applied",
        "summary": f"{'Created' if history_id is None else 'Updated'} skill {title}",
        "documentId": doc["id"],
        "agentDocumentId": doc["agentDocumentId"],
        "target": {
            "agentDocumentId": doc["agentDocumentId"],
            "documentId": doc["id"],
            "id": doc["id"],
            "title": title,
            "type": "skill",
        },
        "resourceId": doc["id"],
    }
    if history_id is not None:
        data["historyId"] = history_id
        data["expectedCurrentDocumentUpdatedAt"] = doc["updatedAt"]
    return [
        {"apiName": api, "kind": "mutation", "data": data, "toolCallId": f"{request.operation_id}:call_0"}
    ]


def _review(request: RunRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    idea = {
        "apiName": "recordSelfReviewIdea",
        "kind": "artifact",
        "data": {"kind": "artifact", "summary": "Reviewed recent turns"},
    }
    return [], [idea]


def run_reference_agent(
    store: DocumentStore, request: RunRequest, *, proceed: Proceed = _always
) -> dict[str, Any]:
    """Do the run; returns the ``selfIteration`` payload of its completion (its marker echoed, with the origin
    event). ``proceed`` is asked right before the run writes: False raises :class:`RunDropped`, nothing written."""
    mutations: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    if request.slug == "memory-writer":
        mutations = _memory(store, request, proceed)
    elif request.slug == "skill-management":
        mutations = _skill(store, request, proceed)
    else:
        mutations, artifacts = _review(request)
    return {
        "marker": request.echoed_marker,
        "mutations": mutations,
        "artifacts": artifacts,
        "userId": request.user_id,
    }


def completion_event(request: RunRequest, self_iteration: dict[str, Any]) -> dict[str, Any]:
    """The ``agent.execution.completed`` source event of a finished run (LobeHub's CompletionLifecycle). It names no
    ``scopeKey``: it runs where the run was asked for, ``request.scope_key`` (never another user's scope), which the
    task gives the emitter beside it (``emit(..., scope_key=...)``): a scope the engine derived or confined may be
    longer than the id rule a producer's ``scopeKey`` keeps to (``topic:`` and a 256-character topic id), and a
    completion that named it was refused after the run had written (a fuzzing audit)."""
    marker = request.marker
    payload: dict[str, Any] = {
        "agentId": request.agent_id,
        "operationId": request.operation_id,
        "reason": "done",
        "steps": 1,
        "selfIteration": self_iteration,
    }
    for key in ("topicId", "anchorMessageId", "triggerMessageId"):
        if marker.get(key):
            payload[key] = marker[key]
    if request.topic_id and "topicId" not in payload:
        payload["topicId"] = request.topic_id
    event: dict[str, Any] = {
        "sourceType": "agent.execution.completed",
        "sourceId": f"{request.operation_id}:complete:done",
        "userId": request.user_id,
        "payload": {k: v for k, v in payload.items() if v is not None},
    }
    if request.agent_id:
        event["agentId"] = request.agent_id
    return event


WIDEST_JSON_CHAR = "\x01"  # json.dumps writes it as \u0001: 6 bytes for one character


def completion_probe(request: RunRequest) -> dict[str, Any]:
    """The largest completion the reference agent can report for ``request``, without running it: its memory
    mutation with a summary of :data:`REPORTED_SUMMARY_MAX` characters (a skill's and a review's are smaller).
    What the emitter refuses of it, it would refuse of the run's own completion, after the run had written. The
    emitter counts the bytes of its JSON, and the summary is cut by characters: each filler character is one JSON
    writes in 6 bytes (``\\u0001``, more than any other: an emoji is 4), so no text of that length is larger."""
    summary = WIDEST_JSON_CHAR * REPORTED_SUMMARY_MAX
    target = {
        "id": "mem",
        "memoryId": "mem",
        "memoryLayer": "preference",
        "summary": summary,
        "title": summary[:80],
    }
    data = {
        "kind": "mutation",
        "target": target,
        "resourceId": "mem",
        "status": "applied",
        "summary": summary[:80],
    }
    mutation = {"apiName": "writeMemory", "kind": "mutation", "data": data}
    return completion_event(
        request,
        {
            "marker": request.echoed_marker,
            "mutations": [mutation],
            "artifacts": [],
            "userId": request.user_id,
        },
    )
