"""Deleting a tenant: everything it stores, its API keys and with them its users' tokens (``DELETE
/v1/tenants/{tenant}``, ``agent-signal tenants delete``).

A platform that offboards a customer needs every trace of it gone, not only its users one by one. Every key a
tenant's data lives under matches one SCAN pattern (``Keys.tenant_pattern``: its home slot and its scope
buckets), so the deletion is a walk of the keyspace (each primary in turn on a cluster) that unlinks what it
finds, after four steps that stop new writes:

1. **A marker** (``Keys.tenant_deletion``, in the ``{credentials}`` slot) says the tenant is being deleted: while it
   exists no key of the tenant is made (:meth:`CredentialStore.create` refuses, checked under WATCH with the
   create's write, so a create racing the marker either lands before it, and is revoked next, or is refused).
2. **Its keys are revoked** (each audited as ``key.revoke`` by the deletion's actor, in the trail that goes with
   it, and logged): no credential of the tenant authenticates once every web process's cache window has passed,
   and the user tokens its keys issued die with them (a token is valid while its issuer is). The bootstrap key
   acts for tenant ``default``, which is therefore never deleted here: its users are erased one by one.
3. **Its scopes leave fair share** (its ready list, its place in the ring): no drain_next message pops one again.

4. **It is tombstoned** (``Keys.tenants_deleted``, kept after the deletion): work already on its way for it (a
   drain message on the broker, a plugin task such as an agent run, a journal or outbox record, the reconcile
   sweep's finds, a plugin's admission) is dropped where it starts (worker/store/deleted_tenants.py), within a
   couple of seconds of the first call; a deletion waits while an erasure of one of its users runs.

Then the walk. A drain under way in one of its scopes loses its lease, fence, inbox and event: its renewal finds
them gone and its commit is refused (worker/store/lua/commit.lua checks the lease), so nothing is applied after
the walk passed; what a request authenticated just before the revoke writes is found by the next pass. The
deletion is **done** when one whole pass found nothing and began at least ``settle_ms`` after the last revoke (and
3 s after the first call: every process has read the tombstone by then):
the caller's door settings (the auth cache window plus the body timeout: a request authenticated before the revoke
may still be reading its body) and the engine's (a lease's TTL, an outbox claim's lease: work begun before the
tombstone was seen). Then the tenant's key records and indexes go too (their ids stay in the global set that says
"credentials are configured"), the marker goes, and one entry is added to the engine-wide
``Keys.tenant_deletions`` stream (the tenant's own audit trails are gone with it): who, when, how many keys
revoked and Redis keys removed. The tenant's name may then be used again, from nothing: a key made for it takes
it out of the tombstones.

Each call works for at most ``budget_s`` and keeps its place (the walk's cursors, its counts) in the marker, so a
tenant of millions of keys is deleted by calls that each answer within an HTTP request's time: the caller repeats
until ``state`` is ``done`` (the CLI does, showing progress). One call at a time per tenant
(``Keys.tenant_deletion_lock``): another meanwhile raises :class:`DeletionRunning`, whose wait is at most the
holder's budget. Calling again within :data:`DONE_ANSWERED_S` of ``done`` answers that deletion again
(``Keys.tenant_deleted``), without starting another (a key made for the name ends that too); later, a call sweeps
again.

Left as they are: the name in the engine-wide ``tenants`` set (a process that registered it once does not add it
again, and the reconcile sweep walks that set: a tenant name used again must be found) and in the tombstones;
what a process holds in memory (its metric series labelled with the tenant, until it restarts); and backups of
the store, which are the operator's to age out.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from redis import Redis

from worker.core.tenancy import DEFAULT_TENANT, check_tenant
from worker.keys.layout import Keys
from worker.ops.audit import AUDIT_MAXLEN, log_audit
from worker.ops.credentials import CredentialError, CredentialStore
from worker.ops.key_index import tenant_key_ids
from worker.store.deleted_tenants import REFRESH_S
from worker.store.server.client import is_cluster

__all__ = [
    "DEFAULT_BUDGET_S",
    "DeletionProgress",
    "DeletionRunning",
    "Settle",
    "delete_tenant",
]

SCAN_COUNT = 1_000  # keys a SCAN page looks at
UNLINK_BATCH = 500  # keys unlinked per round trip
DEFAULT_BUDGET_S = 10.0  # how long one call walks before it answers "running" (an HTTP request's share)
# every process has read the tombstone this long after the first call (its cache refreshes every REFRESH_S)
TOMBSTONE_SEEN_MS = int((REFRESH_S + 1) * 1000)
LOCK_MARGIN_S = 30.0  # the call lock outlives the budget by this (a call that crashed frees it then)
# A done deletion is answered again this long (two CLIs, or a CLI and a retried request, end one deletion once);
# a call after that sweeps again (a restore, or a task published outside any tenant's work, may have written since).
DONE_ANSWERED_S = 600
log = logging.getLogger(__name__)

State = Literal["running", "done"]


class DeletionRunning(Exception):
    """Another call is deleting this tenant, or one of its users is being erased: try again in ``retry_after_s``
    (whole seconds, ≥ 1)."""

    def __init__(
        self, tenant: str, retry_after_s: int, what: str = "a deletion of it is running in another call"
    ) -> None:
        super().__init__(f"tenant {tenant!r}: {what}; retry in {retry_after_s}s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Settle:
    """How long a deletion waits (the module docstring), given by its caller's settings: ``after_revoke_ms`` from
    the tenant's last revoke (a request let in before it may still write), ``after_start_ms`` from its first call
    (work begun before its tombstone was read: a drain under its lease, a relay under its claim, a plugin task
    within its time limit), and ``reuse_after_ms`` from its end until a key can be made for the name again (a
    message of before, redelivered, can still arrive: it would run in the new tenant)."""

    after_revoke_ms: int = 0
    after_start_ms: int = 0
    reuse_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class DeletionProgress:
    """Where a tenant's deletion stands after one call."""

    tenant: str
    state: State
    started_at_ms: int
    keys_revoked: int  # by this call
    removed: int  # Redis keys unlinked by this call
    removed_total: int  # by every call of this deletion
    retry_after_s: int  # when to call again (0 once done)

    def public(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "state": self.state,
            "startedAt": self.started_at_ms,
            "keysRevoked": self.keys_revoked,
            "removed": self.removed,
            "removedTotal": self.removed_total,
            "retryAfterS": self.retry_after_s,
        }


def delete_tenant(
    client: Redis,
    keys: Keys,
    credentials: CredentialStore,
    tenant: str,
    *,
    actor: str,
    settle: Settle,
    budget_s: float = DEFAULT_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> DeletionProgress:
    """One call of ``tenant``'s deletion (the module docstring): mark, revoke, leave fair share, then walk for at most
    ``budget_s``. Raises :class:`CredentialError` naming ``tenant`` for a bad name or ``default``, and
    :class:`DeletionRunning` while another call holds the tenant."""
    check_tenant(tenant)
    if tenant == DEFAULT_TENANT:
        raise CredentialError(
            "tenant 'default' is the bootstrap key's and cannot be deleted: erase its users (DELETE /v1/users/{userId})",
            "tenant",
        )
    lock, token = keys.tenant_deletion_lock(tenant), secrets.token_hex(12)
    if not client.set(lock, token, nx=True, px=int((budget_s + LOCK_MARGIN_S) * 1000)):
        # the call holding it answers within its budget (the lock's margin is for a call that crashed: a walk's
        # second CLI waited 39 s for a call that had ended 2 s after it was refused)
        left_ms = int(client.pttl(lock)) - int(LOCK_MARGIN_S * 1000)  # the holder's budget left
        raise DeletionRunning(tenant, max(1, -(-left_ms // 1000)))
    try:
        return _one_call(client, keys, credentials, tenant, actor, settle, clock() + budget_s, clock)
    finally:
        if client.get(lock) == token:
            client.delete(lock)


def _one_call(
    client: Redis,
    keys: Keys,
    credentials: CredentialStore,
    tenant: str,
    actor: str,
    settle: Settle,
    deadline: float,
    clock: Callable[[], float],
) -> DeletionProgress:
    marker = keys.tenant_deletion(tenant)
    if (ended := _done_before(client, keys, tenant)) is not None:
        return ended
    now_ms = credentials.server_ms()
    if (
        erasing_ms := int(client.pttl(keys.for_tenant(tenant).erasure_lock))
    ) > 0:  # its last write would follow
        raise DeletionRunning(tenant, -(-erasing_ms // 1000), "an erasure of one of its users is running")
    begin = client.pipeline(transaction=True)  # one {credentials} slot
    begin.hsetnx(marker, "startedAt", now_ms)
    begin.hsetnx(marker, "actor", actor)
    begin.hsetnx(keys.tenants_deleted, tenant, now_ms)  # its work on the way is dropped from now on
    begin.execute()
    revoked, revoked_at_ms = _revoke_all(
        credentials, keys, tenant, actor
    )  # every call: a create before the marker
    client.hset(marker, "revokedAt", revoked_at_ms)
    fair = client.pipeline(transaction=True)  # one {fair} slot
    fair.lrem(keys.ready_tenants, 0, tenant)
    fair.delete(keys.ready(tenant))
    fair.execute()
    state = _walk_state(client.hgetall(marker))
    tenant_keys = keys.for_tenant(tenant)
    removed = 0
    while True:
        if state.cursors is None:  # a new pass
            state.cursors, state.pass_started_ms, state.pass_found = {}, credentials.server_ms(), 0
        finished, found = _walk(client, tenant_keys, state.cursors, deadline, clock)
        removed += found
        state.pass_found += found
        state.removed_total += found
        if not finished:
            _save(client, marker, state)
            return state.progress(tenant, revoked, removed, retry_after_s=1)
        settled_ms = max(
            state.revoked_at_ms + settle.after_revoke_ms,
            state.started_at_ms + max(settle.after_start_ms, TOMBSTONE_SEEN_MS),
        )
        erasing = int(client.pttl(tenant_keys.erasure_lock)) > 0  # began during this call: wait it out
        if state.pass_found == 0 and state.pass_started_ms >= settled_ms and not erasing:
            _finish(client, keys, tenant, actor, state, credentials.server_ms(), settle.reuse_after_ms)
            return DeletionProgress(
                tenant, "done", state.started_at_ms, revoked, removed, state.removed_total, 0
            )
        state.cursors = None
        if state.pass_found == 0:  # nothing left, but a request let in before the revoke may still write
            _save(client, marker, state)
            wait_ms = settled_ms - credentials.server_ms()
            return state.progress(tenant, revoked, removed, retry_after_s=max(1, -(-wait_ms // 1000)))
        if clock() >= deadline:
            _save(client, marker, state)
            return state.progress(tenant, revoked, removed, retry_after_s=1)


def _done_before(client: Redis, keys: Keys, tenant: str) -> DeletionProgress | None:
    """The tenant's deletion already done, answered as it ended, or None. A walk: a second CLI's call just after
    another ended the deletion began one more, which revoked nothing, waited the whole settle window again (key
    creation refused meanwhile), pushed the name's rest back and was audited a second time; a third CLI's did it
    again. Nothing of the tenant can have been written since (its tombstone refuses admissions and drops its
    work), and a key made for the name takes this record out, so a deletion after that starts over."""
    if client.exists(keys.tenant_deletion(tenant)):
        return None
    done = client.hgetall(keys.tenant_deleted(tenant))
    if not done:
        return None
    return DeletionProgress(tenant, "done", int(done["startedAt"]), 0, 0, int(done["removed"]), 0)


@dataclass(slots=True)
class _WalkState:
    started_at_ms: int
    started_by: str  # the actor of the deletion's first call (who asked for it)
    revoked_at_ms: int
    cursors: dict[str, int] | None  # by node ("" on one Redis); None: no pass under way
    pass_started_ms: int
    pass_found: int
    removed_total: int

    def progress(self, tenant: str, revoked: int, removed: int, *, retry_after_s: int) -> DeletionProgress:
        return DeletionProgress(
            tenant, "running", self.started_at_ms, revoked, removed, self.removed_total, retry_after_s
        )


def _walk_state(raw: dict[Any, Any]) -> _WalkState:
    cursors = raw.get("cursors")
    return _WalkState(
        started_at_ms=int(raw["startedAt"]),
        started_by=str(raw["actor"]),
        revoked_at_ms=int(raw["revokedAt"]),
        cursors=None if cursors is None else {str(k): int(v) for k, v in json.loads(cursors).items()},
        pass_started_ms=int(raw.get("passStartedAt", 0)),
        pass_found=int(raw.get("passFound", 0)),
        removed_total=int(raw.get("removed", 0)),
    )


def _save(client: Redis, marker: str, state: _WalkState) -> None:
    fields: dict[Any, Any] = {
        "passStartedAt": state.pass_started_ms,
        "passFound": state.pass_found,
        "removed": state.removed_total,
    }
    pipe = client.pipeline(transaction=True)
    if state.cursors is None:
        pipe.hdel(marker, "cursors")
    else:
        fields["cursors"] = json.dumps(state.cursors)
    pipe.hset(marker, mapping=fields)
    pipe.execute()


def _revoke_all(credentials: CredentialStore, keys: Keys, tenant: str, actor: str) -> tuple[int, int]:
    """Revoke every key of ``tenant`` not revoked yet: (how many this call revoked, the latest revoke of any key of
    the tenant in ms, 0 for none: a key revoked just before the deletion began counts too)."""
    revoked, latest_ms = 0, 0
    for key_id in tenant_key_ids(
        credentials.client, keys, tenant
    ):  # indexes keys made by code of before first
        record = credentials.read(key_id)
        if record is not None and record.active:
            record = credentials.revoke(key_id, actor=actor)
            revoked += 1
        if record is not None and record.revoked_at_ms is not None:
            latest_ms = max(latest_ms, record.revoked_at_ms)
    return revoked, latest_ms


def _walk(
    client: Redis, tenant: Keys, cursors: dict[str, int], deadline: float, clock: Callable[[], float]
) -> tuple[bool, int]:
    """Go on with the pass from ``cursors`` (updated in place) until it ends or the deadline: (ended, unlinked).
    One pattern finds the tenant's slots and its rate buckets; a key it matches that is another's (a scope key
    of another tenant that holds ``{<tenant>}``) is left."""
    pattern = tenant.deletion_pattern
    cluster: Any = client if is_cluster(client) else None
    nodes: list[Any] = [None] if cluster is None else cluster.get_primaries()
    removed = 0
    for node in nodes:
        name = "" if node is None else str(node.name)
        cursor = cursors.get(name, 0)
        if cursor == -1:  # this node's part of the pass is over
            continue
        while True:
            if cluster is None:
                cursor, found = client.scan(cursor, match=pattern, count=SCAN_COUNT)
            else:
                answers, found = cluster.scan(cursor, match=pattern, count=SCAN_COUNT, target_nodes=node)
                cursor = answers[node.name]
            # the erasure lock is left to expire: while an erasure holds it, calls wait (a review: the walk took it,
            # and the erasure's last write followed the deletion's end)
            mine = [
                str(k) for k in found if tenant.stored_by_tenant(str(k)) and str(k) != tenant.erasure_lock
            ]
            removed += _unlink(client, mine)
            cursors[name] = int(cursor) if cursor else -1
            if not cursor:
                break
            if clock() >= deadline:
                return False, removed
    return True, removed


def _unlink(client: Redis, found: list[str]) -> int:
    removed = 0
    for start in range(0, len(found), UNLINK_BATCH):
        pipe = client.pipeline(transaction=False)  # a cluster's pipeline sends each key to its node
        for key in found[start : start + UNLINK_BATCH]:
            pipe.unlink(key)
        removed += sum(int(n) for n in pipe.execute())
    return removed


def _finish(
    client: Redis, keys: Keys, tenant: str, actor: str, state: _WalkState, now_ms: int, reuse_after_ms: int
) -> None:
    """The tenant's key records and indexes and the marker go (its rate buckets went with the walk); the deletion
    is audited. Its name stays in ``Keys.tenants_deleted``."""
    ids = sorted(str(i) for i in client.smembers(keys.api_keys_of(tenant)))
    pipe = client.pipeline(transaction=False)  # one {credentials} slot
    for key_id in ids:
        pipe.unlink(keys.api_key(key_id))
    pipe.unlink(keys.api_keys_of(tenant))  # one key a command: a cluster's pipeline takes no multi-key UNLINK
    pipe.unlink(keys.active_api_keys_of(tenant))
    pipe.execute()
    entry: dict[Any, Any] = {
        "action": "tenant.delete",
        "actor": state.started_by,
        "endedBy": actor,
        "at": str(now_ms),
        "tenant": tenant,
        "startedAt": str(state.started_at_ms),
        "keys": str(len(ids)),
        "removed": str(state.removed_total),
    }
    client.xadd(keys.tenant_deletions, entry, maxlen=AUDIT_MAXLEN, approximate=True)
    ended = client.pipeline(transaction=True)  # one {credentials} slot
    ended.delete(keys.tenant_deletion(tenant))
    ended.hset(
        keys.tenant_deleted(tenant),
        mapping={"startedAt": state.started_at_ms, "removed": state.removed_total},
    )
    ended.expire(keys.tenant_deleted(tenant), DONE_ANSWERED_S)
    ended.hset(keys.tenants_deleted, tenant, now_ms + reuse_after_ms)  # the name may be used again from then
    ended.execute()
    log_audit(
        tenant,
        "tenant.delete",
        actor,
        startedAt=entry["startedAt"],
        keys=entry["keys"],
        removed=entry["removed"],
    )
