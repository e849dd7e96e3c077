"""Dedupe: one chain per ``<scopeKey>:<sourceType>:<sourceId>`` within the window.

The key leaves the timestamp out (LobeHub includes it, so a producer that does not pin a timestamp is never
deduped: quirk §11.3). The event id that the API hands back is a short, URL-safe digest of the dedupe key,
so replays of the same event get the same id. The dedupe record is the event record itself (state
``queued → processing → done | dead``): a duplicate of any state is answered ``duplicate`` and counted; a
dead event is replayed only by an explicit redrive, never by the producer sending it again (a poison event
must not re-enter through the front door).
"""

from __future__ import annotations

import hashlib

__all__ = ["dedupe_key", "event_id_for"]


def dedupe_key(scope_key: str, source_type: str, source_id: str) -> str:
    """The natural key of a source event."""
    return f"{scope_key}:{source_type}:{source_id}"


def event_id_for(key: str, tenant: str = "default") -> str:
    """``evt_`` + 24 hex digits of SHA-256 of the tenant and the dedupe key: deterministic, path-safe, and
    never the same for two tenants (the ``default`` tenant hashes the key alone, as before tenants)."""
    material = key if tenant == "default" else f"{tenant}/{key}"
    return "evt_" + hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]
