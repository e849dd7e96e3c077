"""A write Redis applied but its replicas did not confirm: a redis-py error the engine raises itself, kept apart
from worker/core/errors.py so that module, which the SDK's HTTP client and the CLI import, needs no redis."""

from __future__ import annotations

from redis.exceptions import RedisError

__all__ = ["NotReplicated"]


class NotReplicated(RedisError):
    """A write the primary applied but fewer replicas than ``AGENT_SIGNAL_WAIT_REPLICAS`` confirmed in time
    (Redis ``WAIT``): it is not acknowledged, since a failover now could lose it. Retrying is safe (events are
    deduplicated; a commit that did replicate is found done)."""

    def __init__(self, wanted: int, acked: int, timeout_ms: int, reply: object = None) -> None:
        super().__init__(f"{acked} of {wanted} replica(s) confirmed the write within {timeout_ms} ms")
        self.wanted, self.acked = wanted, acked
        self.reply = reply  # the script's own reply, applied on the primary (a grant's, to give it back)
