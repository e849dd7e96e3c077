"""How an idempotency lane's value is stored (``idem:{scope}:<key>``, written by APPLY and COMMIT_BATCH as an
opaque string): the action's result JSON, deflated like a chain document (:mod:`worker.documents.chain_codec`, format
byte ``0x01``) with a dictionary of the result's own field names and vocabulary. A typical lane's value
shrinks from about 230 bytes to about 90, and the lane from 392 bytes of Redis memory to 232.

The dictionary is frozen for the same reason as the chain's (a lane must decode for as long as it is
retained; a unit test pins its digest). A value that starts with ``{`` is a lane written before (plain JSON)
and still reads. Readers fetch the bytes undecoded (``NEVER_DECODE``) and call :func:`decode_lane`.

Since issue 29 the stored JSON leaves out the result's ``actionId`` when it is the lane's idempotency key (an
action keyed by its own id, the default: the key already names it), and :func:`lane_result` puts it back from
the key it looked up (a lane written by another action under a shared key keeps its own id): a bench lane
stores 60 bytes instead of 94, a 64-byte allocation instead of 112. A lane written before (with its
``actionId``) reads as it was."""

from __future__ import annotations

import json

from worker.core.nodes import ExecutorResult
from worker.documents.chain_codec import DEFLATE_V1, deflate_json, inflate_json

__all__ = ["LANE_DICTIONARY_V1", "decode_lane", "encode_lane", "lane_json", "lane_result"]

# ExecutorResult's fields and fixed vocabulary, no values of any workload: FROZEN (see the docstring).
LANE_DICTIONARY_V1 = (
    b'"error":{"code":"","message":"","retriable":false},"status":"failed","status":"skipped",'
    b'{"actionId":"","status":"applied","attempt":{"current":1,"max":5,"startedAt":'
    b',"completedAt":,"status":"succeeded"},"detail":"'
)
_LANE_DICTIONARIES = {DEFLATE_V1: LANE_DICTIONARY_V1}


def encode_lane(result_json: str) -> bytes:
    """The stored form of an action's result JSON."""
    return deflate_json(result_json, LANE_DICTIONARY_V1)


def decode_lane(raw: bytes | str) -> str | bytes:
    """The result JSON of a stored lane (ValueError when it is of no known form)."""
    return inflate_json(raw, _LANE_DICTIONARIES, "idempotency lane")


def lane_json(result: ExecutorResult, idempotency_key: str) -> str:
    """The JSON a lane under ``idempotency_key`` stores for ``result`` (its ``actionId`` left out when it is the
    key)."""
    left_out = {"action_id"} if result.action_id == idempotency_key else None
    return result.model_dump_json(by_alias=True, exclude_none=True, exclude=left_out)


def lane_result(raw: bytes | None, idempotency_key: str) -> ExecutorResult | None:
    """The applied action's result stored in the lane of ``idempotency_key`` (``raw``: its stored value), or
    None when there is none."""
    if raw is None:
        return None
    data = json.loads(decode_lane(raw))
    if isinstance(data, dict):
        data.setdefault("actionId", idempotency_key)
    return ExecutorResult.model_validate(data)
