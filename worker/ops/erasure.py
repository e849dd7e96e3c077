"""Erasure: remove everything a tenant stores about one user (``DELETE /v1/users/{userId}``).

Every key that holds a user's data is found from the tenant and the user, by design (``worker/keys/layout.py``):

* the engine's user-keyed families: receipts (bodies and indexes), conversations, the user's conversation and
  session indexes, and the count of their stored bytes (worker/store/quotas.py: their storage quota starts
  again at 0); then each plugin's part (``Plugin.erase_user``: self-iteration drops memories, skills and their
  versions, the feature override, review guards and judge diagnostics naming the user,
  policies/self_iteration/erasure.py);
* the user's events, from their index ``events-of:user:U`` (written with each event): each event becomes a
  tombstone that keeps its id (so a replay of it is still a duplicate), status, attempts and times, and
  loses its payload, user, scope and source ids; its chain document and outbox records go;
* the scopes those events ran in and the user's sessions' scopes: a scope whose events were all this
  user's (``scope-users:{scope}``) is dropped whole (inbox, lease/fence counters, idempotency lanes,
  plugin data, procedure records, outbox…); a scope shared with other users keeps its data, loses the
  user's queued events and the user's name. A session's settings decide over who sent its events: a session
  that names this user loses its session data (context, checkpoints, usage, D-Mail, settings, function state)
  even where others' events ran in its scope, and a session that names another user is never dropped (it
  may have been this user's before a key gave it to someone else).

A scope whose lease is held right now is left alone and reported in ``busyScopes``: an event of it is
running and would write again after us. Erasure is idempotent, so the caller repeats it until
``busyScopes`` is 0. Each run is audited in the tenant's audit stream under the user's pseudonym, a keyed
hash (worker/telemetry/pseudonyms.py): the audit must not keep the id, nor a hash anyone could compute from a guess.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from worker.core.clock import now_ms
from worker.keys.layout import Keys, glob_escaped
from worker.store.events import EventStore
from worker.store.reads import chain_owner
from worker.telemetry.pseudonyms import load_pseudonyms

__all__ = ["ErasureReport", "UserEraser", "erase_user"]

SCAN_COUNT = 500
TOMBSTONE_DROPS = (
    "event",
    "userId",
    "scopeKey",
    "sourceId",
    "error",
    "chainId",
    "lastError",
    "history",  # attempts: their errors may quote the payload
    "discardReason",
)


@dataclass(slots=True)
class ErasureReport:
    user_id: str
    removed: Counter[str] = field(default_factory=Counter)
    busy_scopes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "userId": self.user_id,
            "removed": dict(sorted(self.removed.items())),
            "busyScopes": len(self.busy_scopes),
        }


UserEraser = Callable[[Redis, Keys, str, frozenset[str]], Mapping[str, int]]
"""A plugin's part of an erasure (``Plugin.erase_user``): given the client, the tenant's keys, the user and the
scopes of the user's events and sessions (not busy), delete what the plugin stores of that user and return the
counts by kind (they join the report's ``removed``). It runs after the engine's part; it must be idempotent."""


def _s(value: Any) -> str:
    return value if isinstance(value, str) else value.decode("utf-8")


def erase_user(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    *,
    session_scope: Callable[[str], str],
    erasers: Sequence[UserEraser] = (),
    audit_maxlen: int = 10_000,
) -> ErasureReport:
    """Erase ``user_id`` in ``tenant`` (see the module docstring), with each loaded plugin's ``erasers``;
    returns what was removed."""
    report = ErasureReport(user_id)
    events = _user_events(store, tenant, user_id)
    sessions = sorted(_s(x) for x in store.client.smembers(tenant.user_sessions(user_id)))
    scopes = {e["scopeKey"] for e in events if e.get("scopeKey")} | {session_scope(s) for s in sessions}
    whole, shared, owned = _classify(store, tenant, user_id, scopes, report)
    skipped = set(report.busy_scopes)
    mine = [e for e in events if e.get("scopeKey") not in skipped]
    _tombstone(store, tenant, user_id, mine, shared, report)
    _drop_user_keyed(store, tenant, user_id, report)
    _drop_scopes(store, tenant, whole, report)
    _drop_sessions(store, tenant, [scope for scope in owned if scope not in whole], report)
    for erase in erasers:  # what the plugins store of the user (their families, their rules)
        report.removed.update(erase(store.client, tenant, user_id, frozenset(scopes - skipped)))
    if not report.busy_scopes:
        indexes = [k.user_events(user_id) for k in tenant.every_bucket()]
        store.client.delete(*indexes, tenant.user_sessions(user_id))
    store.client.xadd(
        tenant.audit,
        {
            "action": "erase-user",
            "user": load_pseudonyms(store.client, store.settings).of(user_id),
            "at": str(now_ms()),
            "removed": json.dumps(report.to_json_dict()["removed"]),
        },
        maxlen=audit_maxlen,
        approximate=True,
    )
    return report


def _user_events(store: EventStore, tenant: Keys, user_id: str) -> list[dict[str, str]]:
    """The user's events still stored: id, scope, chain, user, and the bucket that holds it (read from each
    event's record; each bucket's user index, with scope buckets)."""
    every = tenant.every_bucket()
    pipe = store.client.pipeline(transaction=False)
    for k in every:
        pipe.zrange(k.user_events(user_id), 0, -1)
    ids = [(_s(x), b) for b, found in enumerate(pipe.execute()) for x in found]
    pipe = store.client.pipeline(transaction=False)
    for event_id, b in ids:
        pipe.hmget(every[b].event(event_id), "scopeKey", "chainId", "userId", "state", "sourceId")
    out = []
    for (event_id, b), (scope, chain, owner, state, source_id) in zip(ids, pipe.execute(), strict=True):
        if state is None:
            continue  # expired past the dedupe window: nothing left
        out.append(
            {
                "eventId": event_id,
                "scopeKey": _s(scope) if scope else "",
                "chainId": _s(chain) if chain else (f"chain:{_s(source_id)}" if source_id else ""),
                "userId": _s(owner) if owner else "",
                "state": _s(state),
                "bucket": str(b),
            }
        )
    return out


def _classify(
    store: EventStore, tenant: Keys, user_id: str, scopes: Iterable[str], report: ErasureReport
) -> tuple[list[str], list[str], list[str]]:
    """(scopes that are only this user's, scopes shared with others, scopes whose session names this user);
    busy ones go to the report. A scope whose session names another user is shared, whoever sent its events."""
    whole: list[str] = []
    shared: list[str] = []
    owned: list[str] = []
    for scope in sorted(scopes):
        pipe = store.client.pipeline(transaction=False)
        pipe.exists(tenant.lease(scope))
        pipe.smembers(tenant.scope_users(scope))
        pipe.hget(tenant.session(scope), "userId")
        leased, users, owner = pipe.execute()
        if leased:
            report.busy_scopes.append(scope)
            continue
        if owner is not None and _s(owner) == user_id:
            owned.append(scope)
        if {_s(u) for u in users} <= {user_id} and (owner is None or _s(owner) == user_id):
            whole.append(scope)
        else:
            shared.append(scope)
    return whole, shared, owned


def _drop_sessions(store: EventStore, tenant: Keys, scopes: list[str], report: ErasureReport) -> None:
    """The session data of sessions that name the user, in scopes others' events keep (the rest of such a
    scope stays)."""
    for scope in scopes:
        doomed = [
            tenant.context(scope),
            tenant.context_meta(scope),
            tenant.checkpoints(scope),
            tenant.usage(scope),
            tenant.dmail(scope),
            tenant.session(scope),
            tenant.functions_state(scope),
        ]
        report.removed["scopeKeys"] += int(store.client.delete(*doomed))


def _tombstone(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    events: list[dict[str, str]],
    shared: list[str],
    report: ErasureReport,
) -> None:
    """Events keep id, status, attempts and times; payload, user, scope and source ids go. Their chain
    documents (when the chain is this user's) and outbox records go; queued ones leave shared inboxes."""
    client, every = store.client, tenant.every_bucket()
    shared_set = set(shared)
    at = now_ms()
    for event in events:
        event_id, scope = event["eventId"], event["scopeKey"]
        k = every[int(event["bucket"])]
        pipe = client.pipeline(transaction=True)
        pipe.hdel(k.event(event_id), *TOMBSTONE_DROPS)
        pipe.hset(k.event(event_id), "erasedAt", at)
        if event["state"] in ("queued", "processing"):
            pipe.hset(k.event(event_id), "state", "erased")
            pipe.hincrby(k.stats, "queued", -1)  # it will never run: out of the tenant's queue quota
        if scope in shared_set:
            pipe.lrem(k.inbox(scope), 0, event_id)
        pipe.zrem(k.dlq, event_id)
        pipe.execute()
        report.removed["eventPayloads"] += 1
        report.removed["chains"] += int(client.delete(k.chain(event_id)))  # its run's own trace
        # a chain stored under its chain id before chains were kept per event: only when this event wrote it
        if event["chainId"] and chain_owner(store.get_bytes(k.chain(event["chainId"]))) == event_id:
            report.removed["chains"] += int(client.delete(k.chain(event["chainId"])))
        if scope:
            _drop_outbox_of(store, tenant, scope, event_id, report)
    for scope in shared:
        client.srem(tenant.scope_users(scope), user_id)


def _drop_outbox_of(
    store: EventStore, tenant: Keys, scope: str, event_id: str, report: ErasureReport
) -> None:
    k, client = tenant.for_scope(scope), store.client
    index = k.outbox_of_event(scope, event_id)
    ids = [_s(x) for x in client.smembers(index)]
    if not ids:
        return
    ref = k.scope_ref(scope)
    pipe = client.pipeline(transaction=False)
    for record_id in ids:
        pipe.delete(k.outbox_record(scope, record_id))
        pipe.zrem(k.outbox_due, f"{ref}\x1f{record_id}")
        pipe.zrem(k.journal_due, f"{ref}\x1f{record_id}")
    pipe.delete(index)
    pipe.execute()
    report.removed["outboxRecords"] += len(ids)


def _drop_user_keyed(store: EventStore, tenant: Keys, user_id: str, report: ErasureReport) -> None:
    """The engine's user-keyed families: receipts, conversations, the stored-bytes count, rate buckets."""
    k, client = tenant, store.client
    # Receipts: every one the user has is in the user's own index; the per-agent/topic and per-run indexes
    # are the keys under it.
    ids = [_s(x) for x in client.zrange(k.user_receipts(user_id), 0, -1)]
    for start in range(0, len(ids), 500):
        report.removed["receipts"] += int(
            client.delete(*[k.receipt(user_id, i) for i in ids[start : start + 500]])
        )
    for index in client.scan_iter(match=glob_escaped(k.user_receipts(user_id)) + ":*", count=SCAN_COUNT):
        client.delete(index)
    client.delete(k.user_receipts(user_id))
    for key in client.scan_iter(match=glob_escaped(k.receipt(user_id, "")) + "*", count=SCAN_COUNT):
        report.removed["receipts"] += int(client.delete(key))  # one its indexes no longer name
    owners = [_s(m) for m in client.zrange(k.user_conversations(user_id), 0, -1)]
    for member in owners:
        user, agent, topic = [*member.split("\x1f"), "", "", ""][:3]
        report.removed["conversations"] += int(client.delete(k.conversation(user, agent, topic)))
        client.zrem(k.conversations, member)
    client.delete(k.user_conversations(user_id))
    client.delete(k.user_bytes(user_id))  # the storage quota's count: nothing of the user is left to count
    # A user token's rate bucket is named "<issuer>:<userId>" (engine-wide, short-lived): drop it now.
    for key in client.scan_iter(
        match=glob_escaped(k.rate_bucket("")) + "*:" + glob_escaped(user_id), count=SCAN_COUNT
    ):
        client.delete(key)


def _drop_scopes(store: EventStore, tenant: Keys, scopes: list[str], report: ErasureReport) -> None:
    """Every key of these scopes (one SCAN over the tenant), their registry entries and due outbox calls."""
    if not scopes:
        return
    client = store.client
    tags = [f"{{{scope}}}" for scope in scopes]
    doomed: list[str] = []
    for raw in client.scan_iter(match=tenant.tenant_pattern, count=SCAN_COUNT):
        key = _s(raw)
        if any(tag in key for tag in tags):
            doomed.append(key)
    for start in range(0, len(doomed), 500):
        client.delete(*doomed[start : start + 500])
    report.removed["scopeKeys"] += len(doomed)
    report.removed["scopes"] += len(scopes)
    for scope in scopes:
        b = tenant.for_scope(scope)
        client.hdel(b.runs("paused"), scope)  # a paused scope's key may name the user
        ref = b.scope_ref(scope)
        client.srem(b.scopes, ref)
        for due in (b.outbox_due, b.journal_due):
            for member, _ in client.zscan_iter(due, match=glob_escaped(f"{ref}\x1f") + "*"):
                client.zrem(due, member)
