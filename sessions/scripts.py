"""The context store's and the D-Mail mailbox's scripts (``sessions/lua/*.lua``): every operation is one atomic
script.

Context records are kimi's JSONL lines, one list item each: messages, ``{"role":"_checkpoint","id":n}`` and
``{"role":"_usage","token_count":n}``. ``ckpt`` maps a checkpoint id to its list position, the number of
messages and the bytes of records before it, so a revert is an LTRIM, not a scan.

Bounds (sessions/store.py ``SessionLimits``): every script gets the session TTL and the caps as ARGV[1..5], and
as ARGV[6] the user the caller read from the settings (a script answers ``{'moved'}`` and writes nothing when the
session names another user by then: the caller reads again);
a script that adds records checks the caps *before* writing anything and answers ``{'full', 'records'|'bytes'}``
instead, so concurrent appends cannot pass a cap together. After the session's own keys come the tenant's
``bytes:tenant`` and, when the session names a user, that user's ``bytes:user:<userId>`` (worker/store/quotas.py):
every record added is counted in both until the session's TTL as of the write (and where, in ``ctxmeta``, so
that a revert, a clear or a compaction gives back what it drops, day by day), and a script that adds records
answers ``{'quota', bytes, retryAfterS, 'user'|'tenant'}`` (nothing written) when the user's data is already at
``AGENT_SIGNAL_USER_MAX_BYTES`` or the tenant's at ``AGENT_SIGNAL_TENANT_MAX_BYTES``. ``ctxmeta.bytes`` is the byte count of the context
records, kept by every script that changes the list. Every script ends by refreshing the TTL of all of the
session's keys (KEYS), so a session expires as a whole, ``session_ttl_s`` after its last write.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from redis.commands.core import Script

from worker.store.loader import load_script
from worker.store.scripts import CONSTANTS

__all__ = ["SessionScripts"]

PACKAGE = "sessions"


def _register(client: Redis, name: str) -> Script:
    return client.register_script(load_script(name, package=PACKAGE, constants=CONSTANTS))


@dataclass(frozen=True, slots=True)
class SessionScripts:
    claim: Script
    forget_ended: Script
    append: Script
    checkpoint: Script
    revert: Script
    clear: Script
    send: Script
    step_end: Script

    @classmethod
    def register(cls, client: Redis) -> SessionScripts:
        return cls(**{name: _register(client, name) for name in cls.__dataclass_fields__})
