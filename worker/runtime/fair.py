"""Fair share and shared drain messages: tenants take turns for the workers, and one message drains many scopes.

Without it, each scope with work is one drain message in the broker's FIFO queue, so a tenant that queued
5,000 scopes first makes every other tenant wait behind all of them, and every one-event scope pays a whole
broker message (publish, deliver, ack, the task's own bookkeeping) on top of its lease and commit. With it,
making a scope ready pushes its ref onto its tenant's ready list (``ready:<tenant>``) and puts the tenant on
the ring of tenants with ready scopes (``ready-tenants``). A worker that takes an argument-less
``agent_signal.drain_next`` message pops the next scope from the next tenant in the ring (READY_POP rotates
the ring), drains it, and pops again: up to ``scopes_per_drain`` scopes, or until its time budget is spent,
per message. So the order is round-robin across tenants, and a message's fixed cost is shared by many scopes.

How many messages: a counter of drain tickets (``{fair}:drain-tickets``) holds the number of
``drain_next`` messages sent and not yet retired. READY_PUSH sends one more only while fewer than
``drain_messages_max`` are out, so an idle worker slot always finds one (keep it at or above the fleet's
total concurrency) and a burst of 2,000 scopes costs a few dozen messages, not 2,000. A message retires its
ticket in the same script that finds every ready list empty: a scope pushed after that sees the lower count
and sends a message of its own, so no ready scope is ever left without a message that will pop it. A
message that stops at its scope or time limit hands its ticket on to a new message (nothing counted twice).

What heals a miscount: the counter expires ``ticket_ttl_ms`` after the last ticket was taken (so tickets of
messages the broker lost cannot keep it high under steady traffic), never goes below zero, failed sends
give their tickets back, and a drain_next task that fails hands its ticket on. Too many messages is harmless
(one finds the lists empty and retires); too few is healed by the expiry and by the reconcile sweep
(worker/runtime/reconcile.py), which re-publishes any scope with work, no recent drain and no place on a ready
list, takes tickets so that one is out for each scope it found waiting on a list (at most the cap), and sends at
least one message, past the cap when none was free. A hot scope cannot starve cold ones: it drains at most
``max_events_per_drain`` events per turn, then hands off to the back of its tenant's ready list, behind every
scope that became ready meanwhile.

Where the broker is the store's own Redis, a drain_next message is pushed onto the broker's list whole: by the
enqueue script in the same script that takes its ticket, or by one ``LPUSH`` (worker/runtime/drain_message.py);
elsewhere Celery's ``send_task`` sends it.

Delayed drains (a retry's backoff, a busy scope's wait) keep their own ``agent_signal.drain(ref)`` message
with a countdown: their timing is the scope's. When one comes due it does not drain its scope at once: it makes
the scope ready in its tenant's turn, takes a ticket past the cap, and goes on as a drain_next message
(:meth:`FairQueue.push_due`, worker/runtime/tasks.py). So a tenant's thousand retries that come due together
are a thousand turns of the ring, not a thousand drains ahead of every other tenant's scopes (an audit measured
another tenant's event 1.1 to 1.4 s behind 1,500 of them). A ref that is ready twice only makes a second drain
find the scope idle or busy (the lease decides).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from redis import Redis
from redis.exceptions import RedisError

from worker.core.tenancy import split_scope_ref
from worker.keys.engine import EngineWide
from worker.runtime.drain_message import DrainMessages, drain_next_template
from worker.store.calls import ReadyPop, ReadyPush, TicketForce, TicketReturn
from worker.store.events import ReadyPush as ReadyPushFields
from worker.store.scripts import Scripts
from worker.store.server.client import is_cluster
from worker.telemetry.log_privacy import HIDDEN_TASK_ARGS, describe_error

__all__ = ["DRAIN_NEXT_TASK", "DRAIN_TASK", "FairQueue"]

log = logging.getLogger(__name__)

DRAIN_TASK = "agent_signal.drain"
DRAIN_NEXT_TASK = "agent_signal.drain_next"
TICKETS_UNCAPPED = 2**31 - 1  # READY_PUSH's cap for a message that is out already: it always takes its ticket


@dataclass
class FairQueue:
    """Publishes drains of scope refs (round-robin across tenants when ``enabled``) and pops them."""

    client: Redis
    keys: EngineWide  # the engine-wide keys (any builder has them)
    app: Any  # the Celery app
    queue: str
    enabled: bool = True
    messages_max: int = 64  # drain_next messages out at once (Settings.drain_messages_max)
    ticket_ttl_ms: int = 30_000  # the ticket count expires this long after it was last touched
    # The broker's list for ``queue`` where the broker is this Redis (Keys.broker_queue): drain_next messages
    # are then pushed there whole (worker/runtime/drain_message.py), by ENQUEUE_PUSH or one LPUSH, instead of
    # through Celery's send_task. None: a broker of its own (RabbitMQ, another Redis), send_task.
    drain_queue: str | None = None

    def __post_init__(self) -> None:
        self.scripts = Scripts(self.client)
        self._messages: DrainMessages | None = None

    def messages(self) -> DrainMessages | None:
        """The drain_next messages this process pushes itself, or None (no :attr:`drain_queue`). A template
        that cannot be made (an app Celery cannot publish with) is said once, and send_task serves from then on."""
        queue_key = self.drain_queue  # read once: a failed capture in another thread may clear it meanwhile
        if self._messages is None and queue_key is not None:
            try:
                template = drain_next_template(self.app, DRAIN_NEXT_TASK, self.queue)
            except SoftTimeLimitExceeded:
                raise  # a task's soft limit landing here ends the task, as anywhere else
            except Exception as exc:
                log.warning("drain_next messages go through send_task: no template (%s)", describe_error(exc))
                self.drain_queue = None
                return None
            self._messages = DrainMessages(queue_key, template)
        return self._messages

    def publish(self, ref: str, *, countdown_s: float = 0.0) -> None:
        """Make the scope ``ref`` (``<tenant>/<scopeKey>``) drain: now in its tenant's turn, or after the delay."""
        if countdown_s > 0 or not self.enabled:
            options: dict[str, Any] = {"queue": self.queue}
            if countdown_s > 0:
                options["countdown"] = countdown_s
            self.app.send_task(DRAIN_TASK, args=[ref], **options, **HIDDEN_TASK_ARGS)
            return
        self.publish_many([ref])

    def publish_many(self, refs: Sequence[str]) -> None:
        """Make each scope ready now (one round trip for all of them), and send the drain_next messages
        their tickets allow."""
        if not refs:
            return
        if not self.enabled:
            for ref in refs:
                self.publish(ref)
            return
        self._send_next(self._push_all(refs))

    def admission_push(self, client: Redis, tenant: str) -> ReadyPushFields | None:
        """The fields with which an enqueue through ``client`` makes ``tenant``'s scopes ready in its own
        script (ENQUEUE_PUSH), or None where it cannot: fair share off, another Redis than ours, or a Redis
        Cluster (the ready lists live in the ``{fair}`` slot, the tenant's keys in its own)."""
        if not self.enabled or client is not self.client or is_cluster(client):
            return None
        # The script pushes the messages itself where it can; else the caller sends them (``send``), and the
        # queue key it is given is one it never writes.
        messages = self.messages()
        return {
            "ring": self.keys.ready_tenants,
            "ready": self.keys.ready(tenant),
            "tickets": self.keys.drain_tickets,
            "drain_queue": self.keys.drain_tickets if messages is None else messages.queue_key,
            "tickets_max": self.messages_max,
            "ticket_ttl_ms": self.ticket_ttl_ms,
            "drain_message": "" if messages is None else messages.template,
        }

    def send(self, count: int) -> None:
        """Send ``count`` drain_next messages for tickets taken by ENQUEUE_PUSH where it could not push them
        itself (see :meth:`_send_next`)."""
        if count > 0:
            self._send_next(count)

    def publish_stranded(self, refs: Sequence[str], *, waiting: int = 0) -> None:
        """The reconcile sweep's publish: the scopes made ready (each taking a ticket under the cap, as any
        push), enough tickets that one is out for each of the ``waiting`` scopes it left on their ready lists (at
        most the cap: their messages lost with a broker, or a count expired, the lists get as many messages as a
        push of them would have sent), and at least one message in all, past the cap if need be (a count left
        high by lost messages gets one message a sweep until it expires, a ticket TTL after its last ticket
        taken for a push or a waiting scope: the forced ones do not renew it)."""
        if not refs and not waiting:
            return
        if not self.enabled:
            self.publish_many(refs)
            return
        count = self._push_all(refs) if refs else 0
        if waiting or count == 0:
            # one out for each ref pushed and each scope waiting (at most the cap), at least one sent
            wanted = count + waiting
            call = TicketForce(
                self.keys.drain_tickets, self.ticket_ttl_ms, wanted, self.messages_max, int(count == 0)
            )
            try:
                count += int(self.scripts.run(call))
            except RedisError as exc:
                if count == 0:
                    raise
                # the pushed refs' tickets are taken: their messages go out still (the next sweep tries again)
                log.warning("the sweep's extra drain tickets were not taken (%s)", describe_error(exc))
        self._send_next(count)

    def _push_all(self, refs: Sequence[str]) -> int:
        """READY_PUSH each ref; how many tickets they took."""
        calls = [self._ready_push(ref, self.messages_max) for ref in refs]
        # One pipeline on one Redis; on a cluster one call each, as before run_batch. Either way redis-py sends a
        # call again whose reply was lost, and a READY_PUSH sent twice takes a second ticket for one message: the
        # ticket expires unused (AGENT_SIGNAL_DRAIN_TICKET_TTL_S), as a lost message's does.
        if len(calls) > 1 and self.scripts.plain:
            return sum(1 for one in self.scripts.run_batch(calls) if one)
        taken = 0
        try:
            for call in calls:
                taken += 1 if self.scripts.run(call) else 0
        except Exception:
            self._send_taken(taken)  # the refs pushed before it have their tickets: their messages go out
            raise
        return taken

    def _send_taken(self, count: int) -> None:
        """:meth:`_send_next` for tickets taken before an error, which goes on: a failed send is logged, not
        raised in its place."""
        try:
            self._send_next(count)
        except Exception as exc:
            log.warning("drain_next messages of a partial push not sent (%s)", describe_error(exc))

    def push_due(self, ref: str) -> None:
        """A delayed drain of ``ref`` that came due: the scope made ready in its tenant's turn, with a ticket for
        the message that now goes on as a drain_next message (taken past the cap: the message is out already)."""
        self.scripts.run(self._ready_push(ref, TICKETS_UNCAPPED))

    def _ready_push(self, ref: str, tickets_max: int) -> ReadyPush:
        """READY_PUSH's call for ``ref``: its tenant's ready list, a ticket taken while fewer than ``tickets_max``
        are out."""
        tenant, _ = split_scope_ref(ref)
        return ReadyPush(
            ring=self.keys.ready_tenants,
            ready=self.keys.ready(tenant),
            tickets=self.keys.drain_tickets,
            tenant=tenant,
            scope_ref=ref,
            tickets_max=tickets_max,
            ticket_ttl_ms=self.ticket_ttl_ms,
        )

    def pop_call(self) -> ReadyPop:
        """READY_POP's call (also what POP_ACQUIRE pops with: ScopeLease.acquire_ready)."""
        return ReadyPop(
            self.keys.ready_tenants, self.keys.drain_tickets, self.keys.ready_prefix, self.ticket_ttl_ms
        )

    def pop(self) -> str | None:
        """The next ready scope ref, the tenants taking turns. None when nothing is ready: the caller's
        drain ticket is retired then, so call this only from a drain_next message."""
        ref = self.scripts.run(self.pop_call())
        if not ref:
            return None
        return ref if isinstance(ref, str) else bytes(ref).decode("utf-8")

    def hand_on(self) -> None:
        """A drain_next message that stops before the lists are empty passes its ticket to a new message."""
        self._send_next()

    def _send_next(self, count: int = 1) -> None:
        """Send ``count`` drain_next messages, one ticket each; a failed send gives back every unsent ticket.
        Where the broker is this Redis, all of them in one LPUSH (:meth:`messages`)."""
        if count <= 0:
            return
        sent = 0
        try:
            messages = self.messages()
            if messages is not None:
                self.client.lpush(messages.queue_key, *messages.fresh(count))  # all of them or none
                return
            for _ in range(count):
                self.app.send_task(DRAIN_NEXT_TASK, args=[], queue=self.queue, **HIDDEN_TASK_ARGS)
                sent += 1
        except Exception:
            try:
                self.scripts.run(TicketReturn(self.keys.drain_tickets, count - sent))
            except RedisError:
                pass  # the count expires on its own (ticket_ttl_ms)
            raise
