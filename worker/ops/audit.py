"""The tenant's audit stream (``Keys.audit``): who changed what, once per change.

An entry is ``action``, ``actor`` (the credential id of the caller: an API key's id, ``bootstrap``, ``local`` when no
credential is configured, ``cli`` for a verb run against Redis itself), ``at`` (ms) and what it names. It never
holds a user's id or content: a user, or a scope key (one may name a user: ``user:<id>``), is kept as its
pseudonym (worker/telemetry/pseudonyms.py); event and key ids are the service's own. Actions: ``key.create``,
``key.revoke`` (worker/ops/credentials.py), ``erase-user`` (worker/ops/erasure.py), ``scope.pause``,
``scope.resume``, ``event.cancel`` (worker/ops/scope_control.py), ``redrive`` (producers/sdk/dead_letters.py);
a ``discard`` is written by its script in the scope's bucket (worker/store/lua/discard.lua). Each is written by the
call that made the change, after it: a change found made already (a second pause, racing revokes) writes none.
"""

from __future__ import annotations

from typing import Any

from redis import Redis

from worker.core.clock import now_ms
from worker.keys.layout import Keys

__all__ = ["AUDIT_MAXLEN", "CLI_ACTOR", "audit"]

AUDIT_MAXLEN = 10_000  # entries kept per stream (XADD MAXLEN ~)
CLI_ACTOR = "cli"  # a change made by a verb run against Redis itself, with no credential


def audit(client: Redis, tenant: Keys, action: str, actor: str, **fields: str) -> None:
    """Append one entry to ``tenant``'s audit stream (``fields``: what it names, already free of user ids)."""
    entry: dict[Any, Any] = {"action": action, "actor": actor, "at": str(now_ms()), **fields}
    client.xadd(tenant.audit, entry, maxlen=AUDIT_MAXLEN, approximate=True)
