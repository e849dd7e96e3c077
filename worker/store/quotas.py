"""Storage quotas: a tenant's retained events (``AGENT_SIGNAL_TENANT_MAX_EVENTS``), one user's stored bytes
(``AGENT_SIGNAL_USER_MAX_BYTES``) and all of a tenant's (``AGENT_SIGNAL_TENANT_MAX_BYTES``), counted where data is written and checked at the door before anything is
stored (over one: 429 ``quota_exceeded``). The counts are kept in O(1) memory, so they are approximate; what
each one misses is said below.

**Retained events.** An event's record lives a dedupe window after its admission (a done event a window after
it finished; a dead one until it is redriven or discarded), and its chain, which holds its payload too, for
``chain_retention_s`` (3 windows by default). So an event counts once per started :func:`retained_unit_bytes` of
its stored form: the ~2 KB an ordinary event keeps over its whole life is one, and a 256 KiB one counts its
share too (counted by the event alone, one 256 KiB event let through per unit filled 128 times the memory the
quota assumed, and one tenant filled the shipped Redis for everyone). Each bucket's ``retained-events`` hash
counts the units its admissions accepted per time slot of a 24th of the window (:func:`retained_slot_ms`); the slots of
the last window and one slot more are summed (:data:`RETAINED_FN`). The enqueue script checks the sum against
the quota and adds its accepted events, in the same script. A refusal's Retry-After is when the oldest counted
slot drops out. Not counted: follow-up events a chain emits (admitted by the worker's commit), and what an
erasure or a discard frees before the window ends. A dead event is kept until it is redriven or discarded, past
its window too, so the tenant's dead events that died before the window count too, one each whatever their size
(``ZCOUNT`` of each bucket's dead-letter list by death time, in the same script): a hostile-caller walk filled the
dead-letter list with 2,900 poisoned events a window, each let in again once its window had passed, and Redis grew
without end. Those counted died before the oldest slot the admissions are counted in began, so were admitted
before it: none is counted twice; one that died since, admitted earlier, is not counted until its death is that
old.

**A user's share of them.** The events naming a user count, alike, in the bucket's
``retained-events:user:<userId>`` hash too (``AGENT_SIGNAL_USER_MAX_EVENTS``, checked in the same script; with
scope buckets summed at the door first, as the tenant's are), so one end user's token cannot fill the tenant's
whole quota and hold every other user and key of the tenant out for a window. Erasing the user deletes their
counts (their share starts again; the tenant's count keeps their events until its window ends).

**A user's bytes.** ``bytes:user:<userId>`` (a hash) holds the bytes the user's memories, skills (documents,
their history, the runs' answers), conversation messages, receipts, session context and session function state
(artifacts, ledgers: sessions/function_store.py, its growth) take, counted by the
code that writes them: ``keep`` for data without an expiry, ``d<day>`` (the day its TTL ends, in days since the
epoch) for data that expires, so a day's bytes stop counting once it has passed (:data:`USER_BYTES_FN`).
Erasure deletes the hash. A conversation's count follows its trimmed list (a trimmed message is subtracted);
skills and memories count their JSON; receipts and session context count the bytes written, until their TTL as
of the write (a session that a later write keeps alive stops counting its older bytes after one TTL; what a
revert, a clear, a compaction or an applied D-Mail drops from a context is given back in the days it was
counted in, as long as the session's user is the one it was counted for and has not been erased since
(sessions/lua/lib/session.lua); the function state is counted again as new by the first write after its first
count's day). The door refuses a user's events and context writes once the user is at or over the quota; a
write in progress (a run the worker already has) is not refused, so a user can end somewhat over it.
Retry-After is the end of the earliest counted day when something expires, else there is none (only erasure, or
deleting memories and skills, frees the rest).

**A tenant's bytes.** ``bytes:tenant`` (a hash of the same fields) counts whatever a user's count does, written
beside it (:func:`user_bytes_effects` stages both, the session scripts write both), and what sessions and
receipts that name no user store, which counts toward no user: so a tenant that mints tokens for many users, or
writes sessions of no user, still stops at its quota. Erasing a user takes their count out of the tenant's, day
by day, none below zero, and in the same script marks their sessions so that none gives those bytes back to the
tenant's count a second time (FORGET_USER_BYTES: one may outlive the erasure, its scope busy). The door checks
it wherever it checks a user's: every event and session write of the tenant that grows what is stored is refused
at it. ``agent-signal migrate bytes`` raises it to the users' counts of an earlier release
(:func:`migrate_tenant_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from redis import Redis, WatchError

from worker.core.clock import now_ms as clock_now_ms
from worker.core.ids import NO_USER
from worker.keys.buckets import slot_tag
from worker.keys.layout import BucketKeys, Keys, glob_escaped
from worker.settings import Settings

__all__ = [
    "BACKLOG_RETRY_S",
    "DAY_MS",
    "KEEP",
    "RETAINED_SLOTS",
    "RETAINED_UNIT_BYTES",
    "SCAN_COUNT",
    "UserOverQuota",
    "add_user_bytes",
    "bytes_over",
    "migrate_tenant_bytes",
    "quota_args",
    "receipt_bytes_effects",
    "retained_counts",
    "retained_refusal",
    "retained_slot_ms",
    "retained_unit_bytes",
    "retained_units",
    "stored_bytes_checks",
    "stored_bytes_over",
    "stored_bytes_refusal",
    "tenants_with_user_bytes",
    "user_bytes_day",
    "user_bytes_effects",
    "user_bytes_field",
]

DAY_MS = 24 * 60 * 60 * 1000
RETAINED_SLOTS = 24  # a window is counted in this many slots (and one more, the current one)
# A retained-events refusal a backlog past the window holds (every worker down): room comes as workers drain it,
# not when the oldest counted slot leaves the window (up to a day away), so the caller asks again this soon.
BACKLOG_RETRY_S = 30
KEEP = "keep"
SCAN_COUNT = 500  # keys a migration's SCAN asks for per call


RETAINED_UNIT_BYTES = 2048  # what an ordinary event keeps over its life (docs/decisions.md, "Storage quotas")


def retained_unit_bytes(settings: Settings) -> int:
    """The stored bytes one unit of the retained-events quota stands for: 2 KiB over a window, shared out over the
    windows a chain outlives its event (682 B at the defaults: a chain kept three windows holds its payload
    three times as long as the count does)."""
    windows = max(1.0, settings.chain_retention_s / max(settings.dedupe_window_s, 1))
    return max(1, int(RETAINED_UNIT_BYTES / windows))


def retained_units(body: str | bytes, unit_bytes: int) -> int:
    """One event's count against the quota: once per started ``unit_bytes`` of its stored form (at least once)."""
    size = len(body.encode()) if isinstance(body, str) else len(body)
    return max(1, -(-size // unit_bytes))


def retained_slot_ms(window_s: int) -> int:
    """One slot of the retained-events count: a 24th of the dedupe window, at least a second."""
    return max(1000, window_s * 1000 // RETAINED_SLOTS)


def quota_args(settings: Settings, check: bool) -> list[int]:
    """ENQUEUE's quota arguments: maxTenantEvents and maxUserEvents (checked only with ``check``),
    retainedSlotMs (counted whenever either quota is on) and the bytes of a unit of the retained count."""
    counting = settings.tenant_max_events > 0 or settings.user_max_events > 0
    return [
        settings.tenant_max_events if check else 0,
        settings.user_max_events if check else 0,
        retained_slot_ms(settings.dedupe_window_s) if counting else 0,
        retained_unit_bytes(settings),
    ]


def stored_bytes_checks(settings: Settings, keys: Keys, users: Sequence[str]) -> list[tuple[str, int]]:
    """The stored-bytes counts a batch naming ``users`` is checked against, with their quotas, in the order an
    ``OVERLIMIT user <n>`` reply counts them: each user's (when ``user_max_bytes`` is on), then the tenant's
    (when ``tenant_max_bytes`` is): :meth:`worker.core.errors.OverLimit.from_reply` reads a place past the
    users as the tenant's."""
    out = (
        [(keys.user_bytes(user), settings.user_max_bytes) for user in users]
        if settings.user_max_bytes
        else []
    )
    if settings.tenant_max_bytes:
        out.append((keys.tenant_bytes, settings.tenant_max_bytes))
    return out


def user_bytes_day(ttl_s: int, now_ms: int | None = None) -> int:
    """The day (since the epoch) whose end stops counting data that expires ``ttl_s`` from now."""
    now = clock_now_ms() if now_ms is None else now_ms
    return (now + ttl_s * 1000) // DAY_MS


def user_bytes_field(ttl_s: int | None, now_ms: int | None = None) -> str:
    """The field of ``bytes:user:<u>`` that data expiring ``ttl_s`` from now is counted in (None: kept)."""
    return KEEP if ttl_s is None else f"d{user_bytes_day(ttl_s, now_ms)}"


def user_bytes_effects(
    keys: Keys, user_id: str | None, n_bytes: int, *, ttl_s: int | None = None
) -> list[list[Any]]:
    """The staged commands that count ``n_bytes`` more (or fewer) of stored user data: for the tenant always
    (``tenant_max_bytes``), and for ``user_id`` when there is one (``user_max_bytes``)."""
    if n_bytes == 0:
        return []
    field = user_bytes_field(ttl_s)
    tenant = ["HINCRBY", keys.tenant_bytes, field, n_bytes]
    if not user_id or user_id == NO_USER:  # data of no user (a user id is never NO_USER)
        return [tenant]
    return [["HINCRBY", keys.user_bytes(user_id), field, n_bytes], tenant]


def receipt_bytes_effects(keys: Keys, receipt: Mapping[str, Any], body: str, ttl_s: int) -> list[list[Any]]:
    """A receipt's stored bytes counted for its user (if it names one) and its tenant until it expires
    (receipt_effects stages this)."""
    user = receipt.get("userId")
    return user_bytes_effects(
        keys, user if isinstance(user, str) else None, len(body.encode("utf-8")), ttl_s=ttl_s
    )


def add_user_bytes(
    client: Any, keys: Keys, user_id: str | None, n_bytes: int, *, ttl_s: int | None = None
) -> None:
    """Count ``n_bytes`` of ``user_id``'s data (None: data of no user) now, for the user and the tenant
    (``client`` may be a pipeline: queued in it)."""
    for command in user_bytes_effects(keys, user_id, n_bytes, ttl_s=ttl_s):
        client.hincrby(command[1], command[2], command[3])


def retained_counts(
    client: Redis,
    counts: Sequence[Sequence[str]],
    window_s: int,
    *,
    dlqs: Sequence[str] = (),
    actives: Sequence[str] = (),
) -> list[tuple[int, int]]:
    """Retained-event counts kept over several hashes each (a count's buckets), read in one pipeline: each count's
    (units in the window, seconds until its oldest slot leaves it; 0 when nothing is counted). With ``dlqs``, the
    same pipeline counts their dead events that died before the oldest slot counted began, one more pair last:
    (that count, 0); with ``actives`` (the buckets' indexes of queued and running events, scored by admission), the
    events still waiting that were admitted before it, one more pair after that."""
    slot_ms = retained_slot_ms(window_s)
    pipe = client.pipeline(transaction=False)
    for keys in counts:
        for key in keys:
            pipe.hgetall(key)
    now = clock_now_ms()
    current = now // slot_ms
    # died before the oldest slot counted began: admitted before it too (ENQUEUE does the same)
    for key in (*dlqs, *actives):
        pipe.zcount(key, "-inf", f"({(current - RETAINED_SLOTS) * slot_ms}")
    replies = iter(pipe.execute())
    out: list[tuple[int, int]] = []
    for keys in counts:
        total, oldest = 0, None
        for _ in keys:
            for slot_text, n in next(replies).items():
                slot = int(slot_text)
                if current - slot <= RETAINED_SLOTS:
                    total += int(n)
                    oldest = slot if oldest is None else min(oldest, slot)
        # nothing counted: a batch over the quota is over it alone, and waiting does not help
        retry_s = (
            0 if oldest is None else max(1, math.ceil(((oldest + RETAINED_SLOTS + 1) * slot_ms - now) / 1000))
        )
        out.append((total, retry_s))
    rest = [int(n) for n in replies]
    if dlqs:
        out.append((sum(rest[: len(dlqs)]), 0))
    if actives:
        out.append((sum(rest[len(dlqs) :]), 0))
    return out


def retained_refusal(
    client: Redis, every: Sequence[BucketKeys], adding: int, max_events: int, window_s: int
) -> str | None:
    """With scope buckets, the tenant's retained events summed over its buckets (each script counts its own), its
    dead events past the window with them (one each: a dead event never expires, and the retained count, kept per
    admission slot, no longer counts it; ENQUEUE does the same) and its events still queued or running that were
    admitted before the window (one each: a backlog outliving its window is still stored), ``adding`` the units of
    the batch (:func:`retained_units`): the OVERLIMIT reply ENQUEUE would give, or None."""
    (total, retry_s), (dead, _), (waiting, _) = retained_counts(
        client,
        [[k.retained_events for k in every]],
        window_s,
        dlqs=[k.dlq for k in every],
        actives=[k.runs("status", "active") for k in every],
    )
    if total + dead + waiting + adding <= max_events:
        return None
    if dead + adding > max_events:  # alone over it, or beside the dead: waiting won't help
        retry_s = 0
    elif waiting and not 0 < retry_s <= BACKLOG_RETRY_S:  # room comes as workers drain the backlog
        retry_s = BACKLOG_RETRY_S
    return f"OVERLIMIT events {total + dead + waiting} {retry_s} {dead} {waiting}"


class UserOverQuota(NamedTuple):
    """The first count at or over its quota: its place among those asked (from 1), its bytes, and the seconds
    until some of them expire (0: none does by itself)."""

    position: int
    used: int
    retry_s: int


def stored_bytes_over(client: Redis, checks: Sequence[tuple[str, int]]) -> UserOverQuota | None:
    """Stored-bytes counts (``bytes:user:<u>``, ``bytes:tenant``: their key, their quota) read from the tenant's
    home slot: the first at or over its quota, or None."""
    pipe = client.pipeline(transaction=False)
    for key, _ in checks:
        pipe.hgetall(key)
    return bytes_over(pipe.execute(), [max_bytes for _, max_bytes in checks])


def bytes_over(counts: Sequence[Mapping[Any, Any]], quotas: Sequence[int]) -> UserOverQuota | None:
    """The first of ``counts`` (stored-bytes hashes as read, in order) at or over its quota, or None: for a
    caller that read them itself (a WATCH transaction, on the connection it holds: sessions/function_store.py)."""
    now = clock_now_ms()
    today = now // DAY_MS
    for index, (raw, max_bytes) in enumerate(zip(counts, quotas, strict=True), start=1):
        total, earliest = 0, None
        for field, n in raw.items():
            if field == KEEP:
                total += int(n)
            elif field[1:].isdigit() and int(field[1:]) >= today:
                total += int(n)
                earliest = int(field[1:]) if earliest is None else min(earliest, int(field[1:]))
        if total >= max_bytes:
            retry_s = 0 if earliest is None else max(1, math.ceil(((earliest + 1) * DAY_MS - now) / 1000))
            return UserOverQuota(index, total, retry_s)
    return None


def stored_bytes_refusal(client: Redis, settings: Settings, keys: Keys, users: Sequence[str]) -> str | None:
    """The OVERLIMIT reply ENQUEUE would give for the first user, or the tenant, at or over its stored-bytes
    quota (:func:`stored_bytes_checks`; scope buckets: the enqueue scripts cannot read the home slot), or None."""
    over = stored_bytes_over(client, stored_bytes_checks(settings, keys, users))
    return None if over is None else f"OVERLIMIT user {over.position} {over.used} {over.retry_s}"


def tenants_with_user_bytes(client: Redis, prefix: str) -> set[str]:
    """The tenants holding a user's stored-bytes count: a tenant of sessions only never enqueued an event, so
    the set of tenants (:attr:`~worker.keys.layout.Keys.tenants`, written by an enqueue) does not name it, and
    ``migrate bytes`` would pass it by. One SCAN of the keyspace."""
    found: set[str] = set()
    for key in client.scan_iter(match=f"{glob_escaped(prefix)}t:{{*}}:bytes:user:*", count=SCAN_COUNT):
        tag = slot_tag(str(key)[len(prefix) :])  # the tenant's home slot: its name, no bucket
        if tag and "." not in tag and "{" not in tag:
            found.add(tag)
    return found


def migrate_tenant_bytes(client: Redis, keys: Keys, *, dry_run: bool = False) -> int:
    """``agent-signal migrate bytes``: the tenant's count raised, day by day, to at least the sum of its users'
    counts, which an earlier release kept alone. A max, not a sum: since the upgrade every user's bytes were
    counted in both, so adding would count them twice. It may miss what sessions of no user stored since the
    upgrade (at most that, or what the users stored before it, whichever is less), and it can run any number of
    times. -> the bytes added (``dry_run``: that would be)."""
    users: dict[str, int] = {}
    for key in client.scan_iter(match=glob_escaped(keys.user_bytes("")) + "*", count=SCAN_COUNT):
        for field, n in client.hgetall(key).items():  # the store's clients decode replies
            users[str(field)] = users.get(str(field), 0) + int(n)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys.tenant_bytes)  # type: ignore[no-untyped-call]
                counted = {str(f): int(n) for f, n in pipe.hgetall(keys.tenant_bytes).items()}
                raise_to = {f: n for f, n in users.items() if n > counted.get(f, 0)}
                if dry_run or not raise_to:
                    pipe.reset()
                else:
                    pipe.multi()
                    for name, total in raise_to.items():
                        pipe.hset(keys.tenant_bytes, name, total)
                    pipe.execute()
                return sum(n - counted.get(f, 0) for f, n in raise_to.items())
            except WatchError:
                continue  # a write counted meanwhile: read the tenant's count again
