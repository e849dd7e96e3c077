"""The tenant's audit trails: who changed what, once per change.

Two streams, each capped at :data:`AUDIT_MAXLEN` entries: ``Keys.audit`` for key changes (``key.create``,
``key.revoke``: worker/ops/credentials.py) and erasures (``erase-user``: worker/ops/erasure.py), and
``Keys.ops_audit`` for operations on events and scopes (``scope.pause``, ``scope.resume``, ``event.cancel``:
worker/ops/scope_control.py; ``redrive``: producers/sdk/dead_letters.py; ``discard``, written by its script in the
scope's bucket: worker/store/lua/discard.lua). Apart, so that an operate key redriving a large DLQ, or pausing in a
loop, never pushes an admin's key change out of the first (a review).

An entry is ``action``, ``actor`` (who asked: an API key's id, ``bootstrap``, ``local`` when no credential is
configured, ``user-token:<issuer>`` for a user token, ``cli`` for a verb run against Redis itself), ``at`` (ms)
and what it names. It never holds a user's id or content: a user, or a scope key (one may name a user:
``user:<id>``), is kept as its pseudonym (worker/telemetry/pseudonyms.py); event and key ids are the service's own.
Each is written by the call that made the change, after it (``key.create`` before, so that no key exists
unaudited): a change found made already (a second pause, racing revokes, a cancel asked twice) writes none.

Each entry is logged too (``audit: <action> by <actor>``, its fields under ``audit``, at INFO): a stream lives in the
store it audits, and a store restored from a backup takes back the revokes and erasures made since, with the
entries that said so (docs/operations.md, "Restoring Redis from a backup"). The logs keep what to do again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from redis import Redis

from worker.core.clock import now_ms
from worker.keys.layout import Keys

__all__ = ["AUDIT_MAXLEN", "CLI_ACTOR", "audit", "audit_each", "log_audit"]

AUDIT_MAXLEN = 10_000  # entries kept per stream (XADD MAXLEN ~)
CLI_ACTOR = "cli"  # a change made by a verb run against Redis itself, with no credential
log = logging.getLogger(__name__)

Trail = Literal["audit", "ops"]  # Keys.audit (keys, erasures) or Keys.ops_audit (operations)


def audit(client: Redis, tenant: Keys, trail: Trail, action: str, actor: str, **fields: str) -> None:
    """Append one entry to ``tenant``'s ``trail`` (``fields``: what it names, already free of user ids)."""
    audit_each(client, tenant, trail, action, actor, [fields])


def audit_each(
    client: Redis, tenant: Keys, trail: Trail, action: str, actor: str, each: Sequence[Mapping[str, str]]
) -> None:
    """One entry per item of ``each`` (a redrive's events), in one round trip."""
    if not each:
        return
    stream = tenant.audit if trail == "audit" else tenant.ops_audit
    pipe = client.pipeline(transaction=False)
    for fields in each:
        entry: dict[Any, Any] = {"action": action, "actor": actor, "at": str(now_ms()), **fields}
        pipe.xadd(stream, entry, maxlen=AUDIT_MAXLEN, approximate=True)
    pipe.execute()
    for fields in each:
        log_audit(tenant.tenant, action, actor, **fields)


def log_audit(tenant: str, action: str, actor: str, **fields: str) -> None:
    """The log line of an audit entry (one its script wrote too: a discard)."""
    entry = {
        "action": action,
        "actor": actor,
        **fields,
    }  # one field: its names may be a log record's own (name)
    log.info("audit: %s by %s", action, actor, extra={"tenant": tenant, "audit": entry})
