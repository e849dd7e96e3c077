"""The keys of the rate limits and quotas: a part of :class:`worker.keys.layout.Keys` (which inherits it), kept apart
by concept. Like every key, they are built here and nowhere else (``tests/unit/worker/keys/test_keys_home.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.keys.buckets import TenantSlots, glob_escaped

__all__ = ["LimitKeys"]


@dataclass(frozen=True, slots=True)
class LimitKeys(TenantSlots):
    """Rate buckets (engine-wide, tagged with the tenant: a credential's and its tenant's share a cluster slot,
    so one script charges both), open streams and users' stored bytes (a bucket's retained events: ``BucketKeys``) (worker/store/quotas.py)."""

    def rate_bucket(self, credential_id: str) -> str:
        """A credential of this tenant: its token bucket (hash {tokens, at}), expiring when idle."""
        return f"{self.prefix}ratelimit:{{{self.tenant}}}:{credential_id}"

    @property
    def deletion_pattern(self) -> str:
        """A SCAN pattern matching every key of the tenant (its slots and its rate buckets), and more: a key is
        the tenant's when :meth:`stored_by_tenant` says so (a tenant's deletion walks the keyspace once)."""
        return f"{glob_escaped(self.prefix)}*{{{self.tenant}[}}.]*"

    def stored_by_tenant(self, key: str) -> bool:
        """Whether ``key`` is one of the tenant's: its home slot, any of its buckets (whatever their count), its
        rate buckets (its own and its credentials')."""
        return key.startswith(
            (
                f"{self.prefix}t:{{{self.tenant}}}",
                f"{self.prefix}t:{{{self.tenant}.",
                f"{self.prefix}ratelimit:{{{self.tenant}}}",
            )
        )

    @property
    def tenant_rate_bucket(self) -> str:
        """The tenant's token bucket over all its credentials and user tokens (hash {tokens, at})."""
        return f"{self.prefix}ratelimit:{{{self.tenant}}}"

    @property
    def open_streams(self) -> str:
        """The tenant's open receipt streams across web processes (zset: stream id -> lease end, ms); a process
        renews its streams' leases, so a crashed one's streams drop out when their lease ends."""
        return f"{self.home_prefix}open-streams"

    def user_bytes(self, user_id: str) -> str:
        """The bytes one user's data takes (hash ``keep`` / ``d<day>`` -> bytes): their storage quota. Handlers
        that write user data count it here; erasure deletes it."""
        return f"{self.home_prefix}bytes:user:{user_id}"

    @property
    def tenant_bytes(self) -> str:
        """The bytes all the tenant's stored user data takes (hash ``keep`` / ``d<day>`` -> bytes, as a user's):
        every user's counts together, and what sessions and receipts that name no user store."""
        return f"{self.home_prefix}bytes:tenant"
