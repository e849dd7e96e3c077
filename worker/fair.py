"""Fair share: tenants take turns for the workers, instead of the broker's arrival order.

Without it, each scope with work is one drain message in the broker's FIFO queue, so a tenant that queued
5,000 scopes first makes every other tenant wait behind all of them. With it, making a scope ready pushes its
ref onto its tenant's ready list (``ready:<tenant>``), puts the tenant on the ring of tenants with ready
scopes (``ready-tenants``), and sends one argument-less ``agent_signal.drain_next`` message. A worker that
takes such a message pops the next scope from the next tenant in the ring (READY_POP rotates the ring), so
the messages stay one per ready scope while the order is round-robin across tenants.

Delayed drains (a retry's backoff, a busy scope's wait) keep their own ``agent_signal.drain(ref)`` message
with a countdown: their timing is the scope's, not a turn in the ring. A lost message or a failed push is
healed by the reconcile sweep, which re-publishes any scope with work and no recent drain; a ref that is
ready twice only makes a second drain find the scope idle or busy (the lease decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis import Redis

from worker.keys import Keys
from worker.tenancy import split_scope_ref

__all__ = ["DRAIN_NEXT_TASK", "DRAIN_TASK", "FairQueue"]

DRAIN_TASK = "agent_signal.drain"
DRAIN_NEXT_TASK = "agent_signal.drain_next"

# KEYS: ready-tenants, ready:<tenant>   ARGV: tenant, scopeRef
READY_PUSH = """
redis.call('RPUSH', KEYS[2], ARGV[2])
if not redis.call('LPOS', KEYS[1], ARGV[1]) then redis.call('LPUSH', KEYS[1], ARGV[1]) end
return 1
"""

# Rotate the ring and pop the next ready scope of the tenant at its tail; tenants whose list ran empty
# leave the ring.  KEYS: ready-tenants   ARGV: the ready-list prefix (Keys.ready_prefix)  -> ref | false
READY_POP = """
local n = redis.call('LLEN', KEYS[1])
for _ = 1, n do
  local tenant = redis.call('RPOPLPUSH', KEYS[1], KEYS[1])
  if not tenant then return false end
  local ready = ARGV[1] .. tenant
  local ref = redis.call('LPOP', ready)
  if redis.call('LLEN', ready) == 0 then redis.call('LREM', KEYS[1], 0, tenant) end
  if ref then return ref end
end
return false
"""


@dataclass
class FairQueue:
    """Publishes drains of scope refs (round-robin across tenants when ``enabled``) and pops them."""

    client: Redis
    keys: Keys
    app: Any  # the Celery app
    queue: str
    enabled: bool = True

    def __post_init__(self) -> None:
        self._push = self.client.register_script(READY_PUSH)
        self._pop = self.client.register_script(READY_POP)

    def publish(self, ref: str, *, countdown_s: float = 0.0) -> None:
        """Make the scope ``ref`` (``<tenant>/<scopeKey>``) drain: now in its tenant's turn, or after the delay."""
        if countdown_s > 0 or not self.enabled:
            options: dict[str, Any] = {"queue": self.queue}
            if countdown_s > 0:
                options["countdown"] = countdown_s
            self.app.send_task(DRAIN_TASK, args=[ref], **options)
            return
        tenant, _ = split_scope_ref(ref)
        self._push(keys=[self.keys.ready_tenants, self.keys.ready(tenant)], args=[tenant, ref])
        self.app.send_task(DRAIN_NEXT_TASK, args=[], queue=self.queue)

    def pop(self) -> str | None:
        """The next ready scope ref, the tenants taking turns; None when nothing is ready."""
        ref = self._pop(keys=[self.keys.ready_tenants], args=[self.keys.ready_prefix])
        if not ref:
            return None
        return ref if isinstance(ref, str) else bytes(ref).decode("utf-8")
