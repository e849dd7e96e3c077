"""The ``drain_next`` message as a Redis broker holds it: made once per fair queue by Celery and kombu themselves,
then stamped with a fresh id per message, so that a script (ENQUEUE_PUSH) or one ``LPUSH`` can send it.

A ``drain_next`` message carries no arguments: every one is the same bytes but for its task id (its ``id``,
``root_id`` and ``correlation_id``), its delivery tag (kombu's key for it among the unacknowledged) and one header
of ours, ``grant``: null, or what the enqueue script's pop found for it (the lease at enqueue,
worker/store/lua/enqueue_push.lua; read by :func:`message_grant`). Celery's
``send_task`` spends ~0.45 ms of the door's time building and sending that one message (a lone event's enqueue
took twice as long with it as without); an ``LPUSH`` of the bytes takes what a round trip takes, and inside the
enqueue script none at all. So :func:`drain_next_template` asks Celery for the message once, on kombu's
in-memory transport (its own serialisation, encoding and delivery fields: the virtual channel Redis's transport
shares), with :data:`MARK` for the task id and the delivery tag; :meth:`DrainMessages.render` puts an id in
its place. Made once per :class:`~worker.runtime.fair.FairQueue` (a process keeps one for its drains; a worker's
main process one each for its sweeper and its outbox relay), and used only where the broker is the store's own Redis (``FairQueue.drain_queue``,
``broker_is_store`` in worker/runtime/app.py): the list kombu reads is then one of our keys (``Keys.broker_queue``).

What differs from a ``send_task`` message: the id is ours (a fresh uuid4, ``-<n>`` appended inside the script
for its n-th message; the delivery tag equals it), ``parent_id`` is empty and ``root_id`` is the message's own
id even when a task sends it (a drain_next is nobody's child: each drains whatever scopes are ready), and no
trace context travels in its headers (the template's would be one stale span for every message). A test
compares a rendered message with the one ``send_task`` puts on a real Redis broker, field by field.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any

from kombu.connection import Connection

from worker.store.scripts import DRAIN_GRANT, DRAIN_MARK
from worker.telemetry.log_privacy import HIDDEN_TASK_ARGS

__all__ = ["GRANT_HEADER", "MARK", "DrainMessages", "MessageGrant", "drain_next_template", "message_grant"]

MARK = DRAIN_MARK
"""Where a template holds the message's id: letters and underscores only, so Lua's ``string.gsub`` reads it as
itself (no pattern character) and JSON writes it as it is. The enqueue script names the same constant."""

_PLAIN = re.compile(r"[A-Za-z_]+")
GRANT_HEADER = "grant"  # the header a message's grant travels in (a task's ``request.grant``)

log = logging.getLogger(__name__)


def drain_next_template(app: Any, task: str, queue: str) -> str:
    """The JSON a Redis broker would hold for ``app.send_task(task, args=[], queue=queue)``, with :data:`MARK`
    for its task id and delivery tag (see the module's docstring for what else is fixed)."""
    from opentelemetry.propagate import get_global_textmap

    with Connection("memory://") as conn:  # type: ignore[no-untyped-call]
        channel = conn.default_channel
        # kombu's memory channels share one class-wide dict of queues; this one gets its own (as its close()
        # does), so no other thread's capture, nor a lock held across a fork, is in its way.
        channel.queues = {}
        producer = app.amqp.Producer(channel)
        app.send_task(
            task,
            args=[],
            queue=queue,
            task_id=MARK,
            root_id=MARK,
            producer=producer,
            add_to_parent=False,
            **HIDDEN_TASK_ARGS,
        )
        message = channel.basic_get(queue, no_ack=True)
    if message is None:
        raise RuntimeError(f"kombu's memory transport kept no {task} message on {queue!r}")
    raw: dict[str, Any] = message.serializable()
    headers = raw["headers"]
    headers["parent_id"] = None  # send_task called inside a task names that task
    headers["root_id"] = MARK
    headers[GRANT_HEADER] = DRAIN_GRANT  # a JSON string in the template, replaced whole (null or the grant)
    for name in get_global_textmap().fields:  # a span of the capture's, if tracing instruments Celery
        headers.pop(name, None)
    properties = raw["properties"]
    properties["delivery_tag"] = MARK
    if headers.get("id") != MARK or properties.get("correlation_id") != MARK:
        raise RuntimeError(f"the {task} message does not carry its task id where expected")
    return json.dumps(raw)


@dataclass(frozen=True)
class DrainMessages:
    """A ``drain_next`` message template (:func:`drain_next_template`) and the broker list it goes on."""

    queue_key: str  # the Redis list kombu reads the queue from (Keys.broker_queue)
    template: str

    def __post_init__(self) -> None:
        if not _PLAIN.fullmatch(MARK) or self.template.count(MARK) < 2:
            raise ValueError("a drain_next template holds the mark (letters and underscores) for id and tag")

    def render(self, message_id: str) -> str:
        """The message with ``message_id`` as its task id and delivery tag."""
        return self.template.replace(MARK, message_id).replace(f'"{DRAIN_GRANT}"', "null")

    def fresh(self, count: int) -> list[str]:
        """``count`` messages, each with an id of its own."""
        return [self.render(str(uuid.uuid4())) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class MessageGrant:
    """A drain_next message's grant (the lease at enqueue): the lease token the enqueue script took the scope's
    lease under, when (the door's clock, ms), and what its pop found: POP_ACQUIRE's reply (false: nothing was
    ready and the message's ticket is retired; [ref]; [ref, ACQUIRE's reply])."""

    token: str
    granted_ms: int
    popped: Any


def message_grant(request: Any) -> MessageGrant | None:
    """The grant a drain_next task's message carries (its ``grant`` header, which Celery makes ``request.grant``),
    or None: none carried, a malformed one (logged: a message the enqueue script did not write), or a message
    delivered before. kombu's Redis transport puts back a message whose worker went away unacknowledged and marks
    it ``redelivered``; that message's grant may be held already, by the first delivery's drain if it still runs,
    and one lease must never have two holders: it is left to run out (a lease lost with its worker, as one
    POP_ACQUIRE took), and the message pops as any other."""
    raw = getattr(request, GRANT_HEADER, None)
    if raw is None:
        return None
    delivery = getattr(request, "delivery_info", None) or {}
    if getattr(request, "redelivered", False) or (isinstance(delivery, dict) and delivery.get("redelivered")):
        return None
    if (
        isinstance(raw, list)
        and len(raw) == 3
        and isinstance(raw[0], str)
        and raw[0]
        and isinstance(raw[1], int)
        and not isinstance(raw[1], bool)
        and (raw[2] is False or (isinstance(raw[2], list) and raw[2]))
    ):
        return MessageGrant(raw[0], raw[1], raw[2])
    log.warning("drain_next message with a malformed grant: popping instead")
    return None
