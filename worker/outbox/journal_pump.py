"""The journal pump: applies one bucket's journal records (worker/store/journal.py) one at a time, in commit order.

A scope's journaled writes to the tenant's home slot (a conversation line, a receipt) must land in the order
its commits made them, so they are not claimed one by one like other outbox records, which relays in several
processes deliver side by side. Each bucket's records wait on their own sorted set (``Keys.journal_due``,
scored by when the commit staged them, in µs); the pump of one relay at a time holds the bucket's
``journal_lock`` (a token, PX the outbox lease, renewed before each record) and applies the head, settles
it, and goes on. A record that fails stays at the head and the lock is left to expire after its backoff, so
nothing behind it overtakes it; after ``outbox_max_attempts`` it is settled dead (visible in the run detail)
and the rest go on. A pump that stalls past its lease loses the lock to another; the record it was applying
is then applied again, which the once-marker (JOURNAL_APPLY) or the follow-up's dedupe identity absorbs.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping

from worker.chain.outbox_records import SEPARATOR, Deliverer, OutboxRecord
from worker.core.clock import now_ms
from worker.core.retry import backoff_ms
from worker.keys.layout import Keys, split_scope_ref
from worker.store.calls import Release, Renew
from worker.store.events import EventStore
from worker.telemetry.log_privacy import describe_error

__all__ = ["pump_journal"]

log = logging.getLogger(__name__)


def pump_journal(
    store: EventStore,
    keys: Keys,
    deliverers: Mapping[str, Deliverer],
    *,
    budget: int,
    lease_ms: int,
    max_attempts: int,
    base_ms: int,
    cap_ms: int,
) -> int:
    """Apply up to ``budget`` due records of ``keys``' bucket in order; returns how many were applied."""
    client, scripts = store.client, store.scripts
    lock, due = keys.journal_lock, keys.journal_due
    token = secrets.token_hex(8)
    if not client.set(lock, token, nx=True, px=lease_ms):
        return 0
    applied, release = 0, True
    try:
        while applied < budget and int(scripts.run(Renew(lock, token, lease_ms))):
            head = client.zrange(due, 0, 0)
            if not head:
                break
            member = str(head[0])
            ref, _, record_id = member.partition(SEPARATOR)
            tenant, scope_key = split_scope_ref(ref)
            record_key = keys.for_tenant(tenant).outbox_record(scope_key, record_id)
            raw = client.get(record_key)
            record = None if raw is None else OutboxRecord.from_json(raw)
            if record is None or record.state != "pending":  # expired, or settled by a pump that stalled
                client.zrem(due, member)
                continue
            deliver = deliverers.get(record.kind)
            if deliver is None:  # a rolling deploy: a relay that knows the kind takes the bucket
                break
            record.attempts += 1
            try:
                deliver(record)
            except Exception as exc:
                record.last_error = f"{type(exc).__name__}: {exc}"[:500]
                if record.attempts < max_attempts:
                    client.set(record_key, record.to_json(), keepttl=True)
                    delay_ms = backoff_ms(record.attempts, base_ms=base_ms, cap_ms=cap_ms)
                    log.warning(
                        "journal record failed (attempt %d): %s",
                        record.attempts,
                        describe_error(exc),
                        extra={"outboxRecord": record.id},
                    )
                    scripts.run(Renew(lock, token, max(delay_ms, 1)))  # nothing overtakes it meanwhile
                    release = False
                    break
                record.state = "dead"
                log.error(
                    "journal record is dead after %d attempts: %s",
                    record.attempts,
                    describe_error(exc),
                    extra={"outboxRecord": record.id},
                )
            else:
                record.state, record.delivered_at, record.last_error = "delivered", now_ms(), ""
                applied += 1
            client.set(record_key, record.to_json(), keepttl=True)
            client.zrem(due, member)
    finally:
        if release:
            scripts.run(Release(lock, token))
    return applied
