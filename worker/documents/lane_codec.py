"""How an idempotency lane's value is stored (``idem:{scope}:<key>``, written by APPLY and COMMIT_BATCH as an
opaque string): the action's result JSON, compressed like a chain document (:mod:`worker.documents.chain_codec`)
with a dictionary of the result's own field names and vocabulary. Format byte ``0x02`` (written since issue 29's
second step): a zstd frame (:class:`~worker.documents.zstd_form.ZstdForm`) made with :data:`LANE_DICTIONARY_V2`,
:data:`LANE_DICTIONARY_V1`'s vocabulary with entropy tables fitted to the engine's own results; ``0x01`` (written
before, and with ``AGENT_SIGNAL_STORED_FORM=deflate`` for a rolling upgrade's first phase; always read): raw
deflate with :data:`LANE_DICTIONARY_V1`. The welcome workload's lanes store 99 bytes on
average for 255 of JSON (114 deflated; ``python -m bench.dictionaries``), the bench's lane key 224 bytes of Redis
memory (392 as plain JSON).

The dictionaries are frozen for the same reason as the chain's (a lane must decode for as long as it is
retained; a unit test pins their digests). A value that starts with ``{`` is a lane written before (plain JSON)
and still reads. Readers fetch the bytes undecoded (``NEVER_DECODE``) and call :func:`decode_lane`.

Since issue 29 the stored JSON leaves out the result's ``actionId`` when the lane's key implies it
(:func:`~worker.core.idempotency.lane_action_id`: an action keyed by default, by its own id with or without its
event's source type before it, or one whose id is the planner's key), and :func:`lane_result` puts it back from
what the reader's action implies (a lane written by another action under a shared key keeps its own id): a bench lane
stores 60 bytes instead of 94, a 64-byte allocation instead of 112. A lane written before (with its
``actionId``) reads as it was."""

from __future__ import annotations

import base64
import json

from worker.core.nodes import ExecutorResult
from worker.documents.chain_codec import DEFLATE_V1, StoredForm, deflate_json, inflate_json
from worker.documents.zstd_form import ZstdForm

__all__ = [
    "LANE_DICTIONARY_V1",
    "LANE_DICTIONARY_V2",
    "ZSTD_V2",
    "decode_lane",
    "encode_lane",
    "lane_json",
    "lane_result",
]

ZSTD_V2 = 0x02  # format byte of a lane: a zstd frame with LANE_DICTIONARY_V2 (stored_form zstd)

# ExecutorResult's fields and fixed vocabulary, no values of any workload: FROZEN (see the docstring).
LANE_DICTIONARY_V1 = (
    b'"error":{"code":"","message":"","retriable":false},"status":"failed","status":"skipped",'
    b'{"actionId":"","status":"applied","attempt":{"current":1,"max":5,"startedAt":'
    b',"completedAt":,"status":"succeeded"},"detail":"'
)
_LANE_DICTIONARIES = {DEFLATE_V1: LANE_DICTIONARY_V1}
# A zstd dictionary: LANE_DICTIONARY_V1 as its content, with entropy tables fitted to the results of the welcome
# workload (examples/events.jsonl), made by ``python -m bench.dictionaries``: FROZEN (see the docstring).
LANE_DICTIONARY_V2 = base64.b64decode(
    "N6Qw7H8bAgEpENBBkjb//////wPS/h7ZmzSJ3C16U5IkyVBYFwbZsonsFrlVM6b+ByADAAAAgGmcxDYAAAAEwMSMpA8AoYnHIwP4AQAA"
    "AMAKAAAAAAAAAAAAAAAAIAYAAAAA1C7HAQBoNIAGAAA4sJoGAABAaw0AAAAAAQAAAAQAAAAIAAAAImVycm9yIjp7ImNvZGUiOiIiLCJt"
    "ZXNzYWdlIjoiIiwicmV0cmlhYmxlIjpmYWxzZX0sInN0YXR1cyI6ImZhaWxlZCIsInN0YXR1cyI6InNraXBwZWQiLHsiYWN0aW9uSWQi"
    "OiIiLCJzdGF0dXMiOiJhcHBsaWVkIiwiYXR0ZW1wdCI6eyJjdXJyZW50IjoxLCJtYXgiOjUsInN0YXJ0ZWRBdCI6LCJjb21wbGV0ZWRB"
    "dCI6LCJzdGF0dXMiOiJzdWNjZWVkZWQifSwiZGV0YWlsIjoi"
)
_V2 = ZstdForm(ZSTD_V2, LANE_DICTIONARY_V2)


def encode_lane(result_json: str, form: StoredForm = "zstd") -> bytes:
    """The stored form of an action's result JSON: format ``0x02``, or ``0x01`` when ``form`` is ``"deflate"``."""
    if form == "deflate":
        return deflate_json(result_json, LANE_DICTIONARY_V1)
    return _V2.encode(result_json.encode("utf-8"))


def decode_lane(raw: bytes | str) -> str | bytes:
    """The result JSON of a stored lane (ValueError when it is of no known form)."""
    if isinstance(raw, bytes) and raw[:1] == _V2.first_byte:
        return _V2.decode(raw, "idempotency lane")
    return inflate_json(raw, _LANE_DICTIONARIES, "idempotency lane")


def lane_json(result: ExecutorResult, implied_action_id: str) -> str:
    """The JSON a lane stores for ``result`` (its ``actionId`` left out when it is the one the lane's action
    implies, :func:`~worker.core.idempotency.lane_action_id`)."""
    left_out = {"action_id"} if result.action_id == implied_action_id else None
    return result.model_dump_json(by_alias=True, exclude_none=True, exclude=left_out)


def lane_result(raw: bytes | None, implied_action_id: str) -> ExecutorResult | None:
    """The applied action's result stored in a lane (``raw``: its stored value; its ``actionId``, when left out,
    is the one the reader's action implies), or None when there is none."""
    if raw is None:
        return None
    data = json.loads(decode_lane(raw))
    if isinstance(data, dict):
        data.setdefault("actionId", implied_action_id)
    return ExecutorResult.model_validate(data)
