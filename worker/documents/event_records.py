"""The public status record of an event, built from its stored hash (``GET /v1/events/{id}``, ``GET
/v1/events``, the DLQ). :data:`LIST_FIELDS` are the hash fields a listing reads (not the body, not the attempt
history), so a page of records never carries payloads."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from worker.documents.event_body import body_of

__all__ = ["LIST_FIELDS", "attempts_history", "source_digest", "status_record"]

LIST_FIELDS = (
    "eventId",
    "state",
    "attempts",
    "chainId",
    "scopeKey",
    "enqueuedAt",
    "duplicates",
    "userId",
    "erasedAt",
    "error",
    "doneAt",
    "deadAt",
    "cancelledAt",
    "cancelRequested",
    "discardedAt",
    "discardReason",
    "redrivenAt",
    "redrives",
    "outOfOrder",
    "editedAt",
    "sourceType",
    "sourceId",
)
_TIMES = ("erasedAt", "doneAt", "deadAt", "cancelledAt", "discardedAt", "editedAt")
_FINISHED = {"done": "doneAt", "dead": "deadAt", "cancelled": "cancelledAt", "discarded": "deadAt"}


def status_record(raw: dict[str, str], event_id: str | None = None) -> dict[str, Any]:
    """The public record from the stored hash ``raw`` of the event ``event_id`` (its key's suffix: the hash no
    longer stores its own id; hashes written before that still carry an ``eventId`` field)."""
    record: dict[str, Any] = {
        "eventId": raw.get("eventId", event_id),
        "status": raw.get("state"),
        "attempts": int(raw.get("attempts", 0)),
        "chainId": raw.get("chainId"),
        "scopeKey": raw.get("scopeKey"),
        "enqueuedAt": int(raw.get("enqueuedAt", 0)),
        "duplicates": int(raw.get("duplicates", 0)),
    }
    for name in ("userId", "sourceType", "sourceId", "error", "discardReason"):
        if raw.get(name):
            record[name] = raw[name]
    # erasedAt: its user was erased: the payload is gone, the ids and status stay (a tombstone)
    record.update({name: int(raw[name]) for name in _TIMES if raw.get(name)})
    finished = raw.get(_FINISHED.get(str(raw.get("state")), ""))
    if finished:
        record["finishedAt"] = int(finished)
    if raw.get("cancelRequested") and raw.get("state") == "processing":
        record["cancelRequestedAt"] = int(raw["cancelRequested"])
    if "history" in raw:
        done_at = raw.get("doneAt")
        record["attemptsHistory"] = attempts_history(raw["history"], int(done_at) if done_at else None)
    if raw.get("redrivenAt"):  # back at its scope's tail
        record.update(redrivenAt=int(raw["redrivenAt"]), redrives=int(raw.get("redrives", 1)))
        # True when later events of its scope were enqueued before the redrive: they ran (or run) first.
        record["outOfOrder"] = raw.get("outOfOrder") == "1"
    if record["chainId"] is None and raw.get("sourceId"):
        record["chainId"] = f"chain:{raw['sourceId']}"
    elif record["chainId"] is None:  # a hash of before the sourceId field: its body is whole
        try:
            body = body_of(raw, str(record["eventId"]))
        except ValueError:
            body = None
        source_id = None if body is None else body.get("sourceId")
        record["chainId"] = f"chain:{source_id}" if source_id else None
    return record


def source_digest(source_id: str) -> str:
    """How the source-id index names a source id (its bucket, ``Keys.events_of_source``, and its members): a
    digest, so no key or member holds the id itself (erasure leaves tombstones without source ids)."""
    return hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:24]


def attempts_history(raw: str, done_at: int | None = None) -> list[dict[str, Any]]:
    """The stored attempt records (worker/store/lua/lib/history.lua), oldest first, in the contract's shape:
    ``{"attempt", "startedAt", "finishedAt"?, "status", "error"?}`` plus ``run`` (0, then one per redrive).
    A history stored as a start time alone is one first attempt that succeeded at ``done_at``."""
    if raw.isdigit():
        started = int(raw)
        only = {"attempt": 1, "run": 0, "startedAt": started, "status": "succeeded"}
        return [{**only, "finishedAt": done_at if done_at is not None else started}]
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(entries, list):  # cjson writes an empty Lua table as {}
        return []
    out: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        item: dict[str, Any] = {
            "attempt": int(entry.get("attempt", 0)),
            "run": int(entry.get("run", 0)),
            "startedAt": int(entry.get("startedAt", 0)),
            "status": str(entry.get("status", "running")),
        }
        if entry.get("finishedAt") is not None:
            item["finishedAt"] = int(entry["finishedAt"])
        if entry.get("error"):
            item["error"] = str(entry["error"])
        out.append(item)
    return out
