"""How an event's body is stored in its hash (field ``event``): without what the hash already holds.

The hash keeps ``sourceType``, ``sourceId`` and ``scopeKey`` as fields of their own (listings read them
without the body), and the event id is the key's suffix. So the stored body leaves those four out, and it
leaves out ``chain`` when the chain is the default one of a root event (``chain:<sourceId>`` rooted at the
source itself, which :func:`worker.intake.source_event.prepare` gives every event, follow-ups included). Any other chain is
kept, first, so the stored form always starts with ``{"chain":`` or ``{"timestamp":``, never with an identity
field: :func:`full_body` tells the forms apart without parsing.

A body stored before this form (the whole Source, starting ``{"sourceId":``) still reads: :func:`full_body`
returns such a body as it is. Nothing in Lua reads a body; the scripts store and return it as an opaque
string (with the hash's ``sourceType`` and ``sourceId`` next to it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import (  # json.dumps of a str, without dumps's per-call setup
    encode_basestring,  # ensure_ascii=False
    encode_basestring_ascii,
)
from typing import Any

__all__ = ["body_of", "full_body", "root_body", "stored_body"]

IDENTITY = ("sourceId", "sourceType", "scopeKey", "eventId")
_CHAIN = '{"chain":'
_SPLICE_AFTER = ('{"timestamp":', _CHAIN)  # how every stored form starts (timestamp is always set)


def stored_body(source: Mapping[str, Any]) -> str:
    """The stored form of a Source's JSON dict (``Source.to_json_dict()``, or a whole body parsed)."""
    source_id = source.get("sourceId")
    chain = source.get("chain")
    default_chain = {"chainId": f"chain:{source_id}", "rootSourceId": source_id}
    rest = {k: v for k, v in source.items() if k not in IDENTITY and k != "chain"}
    if "timestamp" not in rest:  # not a Source: keep it whole (full_body returns it unchanged)
        return json.dumps(dict(source), separators=(",", ":"), ensure_ascii=False)
    if chain is not None and chain != default_chain:
        rest = {"chain": chain, **rest}
    else:
        rest = {"timestamp": rest.pop("timestamp"), **rest}
    return json.dumps(rest, separators=(",", ":"), ensure_ascii=False)


def root_body(
    timestamp: int,
    payload_json: str,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    workspace_id: str | None = None,
    traceparent: str | None = None,
) -> str:
    """The stored form of a root event's Source made of its parts, as :func:`stored_body` writes it for that
    Source's JSON dict (its default chain left out, its identity in the hash), without building, validating and
    serialising the Source (9 us of the door's 22 per event, timeit). ``payload_json`` is the payload as
    ``json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`` writes it (the door
    has it from its size check); a payload with a nan or inf is not JSON, and its caller takes the Source's
    path, whose serialiser writes those as null."""
    body = f'{{"timestamp":{int(timestamp)},"payload":{payload_json}'
    for name, value in (
        ("userId", user_id),
        ("agentId", agent_id),
        ("workspaceId", workspace_id),
        ("traceparent", traceparent),
    ):
        if value is not None:
            body += f',"{name}":{encode_basestring(value)}'
    return body + "}"


def full_body(stored: str, *, event_id: str, scope_key: str, source_type: str, source_id: str) -> str:
    """The whole Source JSON of a stored body, its identity taken from the hash (an old whole body as is)."""
    if not stored.startswith(_SPLICE_AFTER) or not source_id:
        return stored
    dumps = encode_basestring_ascii
    head = (
        f'{{"sourceId":{dumps(source_id)},"sourceType":{dumps(source_type)},'
        f'"scopeKey":{dumps(scope_key)},"eventId":{dumps(event_id)},'
    )
    if not stored.startswith(_CHAIN):
        head += f'"chain":{{"chainId":{dumps("chain:" + source_id)},"rootSourceId":{dumps(source_id)}}},'
    return head + stored[1:]


def body_of(raw: Mapping[str, str], event_id: str) -> dict[str, Any] | None:
    """The whole stored event (type, ids, payload) of an event's hash ``raw``, or None when it has no body
    (erased, or expired between reads)."""
    stored = raw.get("event")
    if not stored:
        return None
    whole = full_body(
        stored,
        event_id=event_id,
        scope_key=raw.get("scopeKey", ""),
        source_type=raw.get("sourceType", ""),
        source_id=raw.get("sourceId", ""),
    )
    data = json.loads(whole)
    return data if isinstance(data, dict) else None
