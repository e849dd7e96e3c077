"""The public status record of an event, built from its stored hash (``GET /v1/events/{id}``, the DLQ)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["status_record"]


def status_record(raw: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "eventId": raw.get("eventId"),
        "status": raw.get("state"),
        "attempts": int(raw.get("attempts", 0)),
        "chainId": raw.get("chainId"),
        "scopeKey": raw.get("scopeKey"),
        "enqueuedAt": int(raw.get("enqueuedAt", 0)),
        "duplicates": int(raw.get("duplicates", 0)),
    }
    if raw.get("userId"):
        record["userId"] = raw["userId"]
    if raw.get("erasedAt"):  # its user was erased: the payload is gone, the ids and status stay (a tombstone)
        record["erasedAt"] = int(raw["erasedAt"])
    if raw.get("error"):
        record["error"] = raw["error"]
    if raw.get("doneAt"):
        record["doneAt"] = int(raw["doneAt"])
    if raw.get("redrivenAt"):  # back at its scope's tail
        record.update(redrivenAt=int(raw["redrivenAt"]), redrives=int(raw.get("redrives", 1)))
        # True when later events of its scope were enqueued before the redrive: they ran (or run) first.
        record["outOfOrder"] = raw.get("outOfOrder") == "1"
    if record["chainId"] is None and raw.get("sourceId"):
        record["chainId"] = f"chain:{raw['sourceId']}"
    elif record["chainId"] is None:
        try:
            source_id = json.loads(raw["event"])["sourceId"]
            record["chainId"] = f"chain:{source_id}"
        except (KeyError, ValueError):
            record["chainId"] = None
    return record
