"""Scope buckets: how one tenant's keys spread over several Redis Cluster slots (``AGENT_SIGNAL_SCOPE_BUCKETS``).

With one bucket (the default) every key of a tenant has the hash tag ``{<tenant>}``: one slot per tenant.
With ``n`` buckets, a scope's engine keys (its inbox, lease, fence, events, chains, lanes, plugin keys) and the
per-bucket indexes its scripts write (stats, dead letters, the scopes registry, run indexes, the outbox
registry) have the tag ``{<tenant>.<bb>}``, ``bb`` the scope's bucket in two hex digits: a tenant spreads over
``n`` slots, and every script still touches one. The tenant's user data (receipts, memories, skills,
conversations, sessions, the audit trail) keeps ``{<tenant>}``; a commit's staged writes to it, and follow-up
events of a scope in another bucket, go through the outbox's journal (``worker/store/journal.py``).

A scope's bucket is CRC-32 of its key modulo ``n``: stable across processes and releases. ``n`` is fixed for a
deployment's life (changing it moves every scope: export and import). Tenant names hold no ``.``.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from worker.core.tenancy import DEFAULT_TENANT

__all__ = [
    "MAX_BUCKETS",
    "TenantSlots",
    "bucket_of",
    "bucket_prefixes",
    "glob_escaped",
    "home_prefix",
    "slot_tag",
]

MAX_BUCKETS = 256


def bucket_of(scope_key: str, buckets: int) -> int:
    """The bucket of a scope (0 when there is one bucket)."""
    return 0 if buckets <= 1 else zlib.crc32(scope_key.encode("utf-8")) % buckets


def home_prefix(prefix: str, tenant: str) -> str:
    """``<prefix>t:{<tenant>}:``: the tenant's own slot (all of it with one bucket)."""
    return f"{prefix}t:{{{tenant}}}:"


@lru_cache(maxsize=1024)
def bucket_prefixes(prefix: str, tenant: str, buckets: int) -> tuple[str, ...]:
    """Every bucket's key prefix, by bucket number (built once per tenant and process)."""
    if buckets <= 1:
        return (home_prefix(prefix, tenant),)
    return tuple(f"{prefix}t:{{{tenant}.{b:02x}}}:" for b in range(buckets))


def slot_tag(key: str) -> str:
    """The hash tag of a key as Redis Cluster reads it: between the first ``{`` and the next ``}`` when that
    is not empty, else the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def glob_escaped(text: str) -> str:
    """``text`` as a literal in a SCAN MATCH pattern (a key prefix: append ``*``)."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


@dataclass(frozen=True, slots=True)
class TenantSlots:
    """The key prefixes of one tenant: its home slot's and its buckets' (the base of the key builders in
    worker/keys/layout.py: :class:`~worker.keys.layout.Keys` for a tenant, ``BucketKeys`` for one of its buckets)."""

    prefix: str = "agent-signal:"
    tenant: str = DEFAULT_TENANT
    buckets: int = 1  # scope buckets: 1 keeps every key of a tenant in one slot
    # Built once: every key of an event's commit starts with one of them (two dozen per event on the hot path).
    home_prefix: str = field(init=False, repr=False, compare=False)  # ``<prefix>t:{<tenant>}:``: user data
    _prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False)  # by bucket number

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prefixes", bucket_prefixes(self.prefix, self.tenant, self.buckets))
        object.__setattr__(self, "home_prefix", home_prefix(self.prefix, self.tenant))

    def scope_prefix(self, scope_key: str) -> str:
        """The prefix of a scope's engine keys: its bucket's (the home prefix with one bucket)."""
        prefixes = self._prefixes
        return prefixes[0] if len(prefixes) == 1 else prefixes[bucket_of(scope_key, len(prefixes))]

    def owns(self, key: str) -> bool:
        """True for any key of this tenant (its home slot or any bucket's)."""
        return key.startswith(self.home_prefix) or any(key.startswith(p) for p in self._prefixes)

    def applied_marker(self, beside: str, record_id: str) -> str:
        """The once-marker of a journal record, in the slot of ``beside`` (one of this tenant's keys)."""
        for p in (self.home_prefix, *self._prefixes):
            if beside.startswith(p):
                # hashed: a record id names an idempotency key, which may name a user (erasure)
                return f"{p}applied:{hashlib.sha256(record_id.encode('utf-8')).hexdigest()[:32]}"
        raise ValueError(f"{beside!r} is not a key of tenant {self.tenant}")

    @property
    def tenant_pattern(self) -> str:
        """A SCAN pattern for every key of this tenant, home and buckets (erasure checks and export use it)."""
        return f"{self.prefix}t:{{{self.tenant}[}}.]*"
