"""Undoing a skill receipt (``POST /v1/receipts/{id}/rollback``, LobeHub's receiptRollbackService, reference
§7.3): the route finds the caller's receipt, :func:`rollback_skill_receipt` answers its status, and the route
keeps that status on the receipt (``metadata.rollbackStatus``).

Differences from LobeHub: ``expectedCurrentDocumentUpdatedAt`` may be Unix milliseconds (a number or a numeric
string: our reference agent's) or an ISO 8601 string (LobeHub's ``updatedAt``); and a retried undo is
idempotent: a receipt already ``rolled_back``, or whose document is the version this receipt's undo restored
(``restoredFrom`` is its ``historyId``), answers ``rolled_back`` again, never ``conflict``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.exceptions import RedisError

from policies.self_iteration.records.documents import DocumentStore, RollbackStatus

__all__ = ["expected_updated_at_ms", "rollback_skill_receipt"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NUMERIC = re.compile(r"-?\d{1,19}")


def expected_updated_at_ms(value: Any) -> int | None:
    """A receipt's ``expectedCurrentDocumentUpdatedAt`` in Unix milliseconds: an integral number, a numeric
    string, or an ISO 8601 date-time (``Z`` or an offset; none means UTC). None when it is none of these."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if NUMERIC.fullmatch(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)  # exact: no float rounding of the milliseconds


def rollback_skill_receipt(docs: DocumentStore, receipt: Mapping[str, Any]) -> RollbackStatus:
    """The rollback status of ``receipt`` (the receipt as stored), restoring its skill document's previous
    version when the document is still the version the receipt produced."""
    metadata = receipt.get("metadata") or {}
    document_id, history_id = metadata.get("documentId"), metadata.get("historyId")
    if receipt.get("kind") != "skill" or not isinstance(document_id, str) or not isinstance(history_id, str):
        return "unsupported"
    if not (document_id and history_id):
        return "unsupported"
    if metadata.get("rollbackStatus") == "rolled_back":
        return "rolled_back"  # a retry: the undo happened, whatever the document did since
    expected = expected_updated_at_ms(metadata.get("expectedCurrentDocumentUpdatedAt"))
    if expected is None:
        return "conflict"  # LobeHub: no expected version, no compare-and-set
    owner = (str(receipt.get("userId")), str(receipt.get("agentId")))
    status = docs.rollback(*owner, document_id, history_id, expected)
    if status != "conflict":
        return status
    try:  # the document moved on: by this very undo (a retry whose first answer was lost), it is rolled_back
        current = docs.get_skill(*owner, document_id)
    except RedisError:
        return "failed"
    return "rolled_back" if current is not None and current.get("restoredFrom") == history_id else status
