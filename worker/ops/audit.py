"""The tenant's audit stream (``Keys.audit``): who changed what, once per change.

An entry is ``action``, ``actor`` (the credential id of the caller: an API key's id, ``bootstrap``, ``local`` when no
credential is configured, ``cli`` for a verb run against Redis itself), ``at`` (ms) and what it names. It never
holds a user's id or content: a user, or a scope key (one may name a user: ``user:<id>``), is kept as its
pseudonym (worker/telemetry/pseudonyms.py); event and key ids are the service's own. Actions: ``key.create``,
``key.revoke`` (worker/ops/credentials.py), ``erase-user`` (worker/ops/erasure.py), ``scope.pause``,
``scope.resume``, ``event.cancel`` (worker/ops/scope_control.py), ``redrive`` (producers/sdk/dead_letters.py);
a ``discard`` is written by its script in the scope's bucket (worker/store/lua/discard.lua). Each is written by the
call that made the change, after it: a change found made already (a second pause, racing revokes) writes none.

Each entry is logged too (``audit: <action> by <actor>``, its fields as the line's, at INFO): the stream lives in the
store it audits, and a store restored from a backup takes back the revokes and erasures made since, with the entries
that said so (docs/operations.md, "Restoring Redis from a backup"). The logs keep what to do again.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis

from worker.core.clock import now_ms
from worker.keys.layout import Keys

__all__ = ["AUDIT_MAXLEN", "CLI_ACTOR", "audit", "log_audit"]

AUDIT_MAXLEN = 10_000  # entries kept per stream (XADD MAXLEN ~)
CLI_ACTOR = "cli"  # a change made by a verb run against Redis itself, with no credential
log = logging.getLogger(__name__)


def audit(client: Redis, tenant: Keys, action: str, actor: str, **fields: str) -> None:
    """Append one entry to ``tenant``'s audit stream (``fields``: what it names, already free of user ids)."""
    entry: dict[Any, Any] = {"action": action, "actor": actor, "at": str(now_ms()), **fields}
    client.xadd(tenant.audit, entry, maxlen=AUDIT_MAXLEN, approximate=True)
    log_audit(tenant.tenant, action, actor, **fields)


def log_audit(tenant: str, action: str, actor: str, **fields: str) -> None:
    """The log line of an audit entry (one its script wrote too: a discard)."""
    entry = {
        "action": action,
        "actor": actor,
        **fields,
    }  # one field: its names may be a log record's own (name)
    log.info("audit: %s by %s", action, actor, extra={"tenant": tenant, "audit": entry})
