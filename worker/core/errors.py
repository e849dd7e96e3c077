"""Control-flow exceptions of the pipeline.

::

    PipelineError                 root of everything a handler or stage may raise on purpose
     ├── RetryLater(delay_s)      transient: retry this event after (at least) delay_s, counts an attempt
     ├── PermanentFailure         the event can never succeed: dead-letter it now, no more attempts
     ├── SkipEvent                nothing to do: commit the event as done without running further stages
     ├── NotBatchable             (engine only) a batch's chain reached a handler that is not batch-safe
     └── LeaseLost                our scope lease expired or was taken over; stop before the next effect
                                  and never commit (the fencing check would reject it anyway)

Any other exception raised by a handler is treated as transient (retried with backoff, then dead-lettered).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "EventOfAnotherUser",
    "GuardErased",
    "LeaseLost",
    "NotBatchable",
    "OverLimit",
    "PermanentFailure",
    "PipelineError",
    "QuotaSettings",
    "RetryLater",
    "SkipEvent",
    "TenantDeleted",
]


class PipelineError(Exception):
    """Root of the pipeline's own exceptions."""


class RetryLater(PipelineError):
    """Retry the current event after ``delay_s`` seconds (at least, up to ``AGENT_SIGNAL_RETRY_CAP_MS``; backoff
    may add more). Like any retry, it counts an attempt."""

    def __init__(self, message: str = "retry requested", *, delay_s: float = 0.0) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class PermanentFailure(PipelineError):
    """Dead-letter the current event immediately."""

    def __init__(self, message: str, *, code: str = "PERMANENT_FAILURE") -> None:
        super().__init__(message)
        self.code = code


class SkipEvent(PipelineError):
    """Stop processing the event and commit it as done."""


class NotBatchable(PipelineError):
    """A chain run for a batch reached a handler that is not batch-safe: run the event on its own instead."""


class LeaseLost(PipelineError):
    """The scope lease is no longer ours (expired, or a newer holder has a higher fence)."""


class GuardErased(Exception):
    """An event admitted only while another event is no tombstone (``PreparedEvent.unless_erased``), whose guard an
    erasure reached before the enqueue script ran (``ERASED <position>``): the batch was refused before any write."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id}'s guard was erased")
        self.event_id = event_id


class EventOfAnotherUser(Exception):
    """An event whose dedupe key (scope, source type, source id) already names another user's event (the
    enqueue script's ``USERCONFLICT <eventId> <userId>``): refused whole before any write, not answered that
    event as its duplicate (issue 26's trust rule: one user's event never suppresses another's)."""

    def __init__(self, event_id: str, user_id: str) -> None:
        super().__init__(f"event {event_id} is another user's than {user_id!r}")
        self.event_id = event_id
        self.user_id = user_id


class QuotaSettings(Protocol):
    """The limits :meth:`OverLimit.from_reply` names (worker/settings.py ``Settings`` has them; the core reads
    them through this protocol, so it imports nothing above it)."""

    max_inbox_depth: int
    tenant_max_queued: int
    store_retry_after_s: int
    tenant_max_events: int
    tenant_max_bytes: int
    user_max_bytes: int
    user_max_events: int


class TenantDeleted(Exception):
    """An admission for a tenant that was deleted (worker/ops/tenant_deletion.py): nothing is stored for it until a
    key is made for its name again (the door answers 410 ``tenant_deleted`` naming ``tenant``)."""

    field = "tenant"

    def __init__(self, tenant: str) -> None:
        super().__init__(
            f"tenant {tenant!r} was deleted: nothing is stored for it until a key is made for it again"
        )
        self.tenant = tenant


class OverLimit(Exception):
    """An admission limit refused a whole batch before anything was stored (the door answers 429).

    ``what``: ``inbox`` (one scope's queued events at ``max_inbox_depth``), ``tenant`` (the tenant's queued
    events at ``tenant_max_queued``), ``events`` (its retained events at ``tenant_max_events``), ``user_events``
    (a user's share of them at ``user_max_events``) or
    ``user_bytes`` (a user's stored data at ``user_max_bytes``) or ``tenant_bytes`` (all of the tenant's stored
    user data at ``tenant_max_bytes``); ``retry_after_s``: when trying again may
    succeed (0: not by waiting); ``field``: the request field to blame, when one is."""

    def __init__(self, what: str, message: str, *, retry_after_s: int, field: str | None = None) -> None:
        super().__init__(message)
        self.what = what
        self.message = message
        self.retry_after_s = retry_after_s
        self.field = field

    @classmethod
    def from_reply(cls, reply: str, settings: QuotaSettings, users: Sequence[str] = ()) -> OverLimit:
        """From the script's ``OVERLIMIT inbox <scopeRef> <depth>`` / ``OVERLIMIT tenant <queued>`` /
        ``OVERLIMIT events <retained> <retryAfterS> [<dead> [<waiting>]]`` / ``OVERLIMIT userevents <n-th user> <retained> <retryAfterS>``
        / ``OVERLIMIT user <n-th count> <bytes> <retryAfterS>`` (the counts are each of ``users``' when
        ``user_max_bytes`` is on, then the tenant's: worker/store/quotas.py ``stored_bytes_checks``; the users are
        the batch's, sorted, for both)."""
        max_inbox, max_queued, retry_after_s = (
            settings.max_inbox_depth,
            settings.tenant_max_queued,
            settings.store_retry_after_s,
        )
        max_events, max_user_bytes = settings.tenant_max_events, settings.user_max_bytes
        parts = reply.split(" ")
        if len(parts) >= 4 and parts[1] == "inbox":
            scope = " ".join(parts[2:-1]).partition("/")[2]
            message = (
                f"scope {scope!r} already holds {parts[-1]} queued events (limit {max_inbox}); retry later"
            )
            return cls("inbox", message, retry_after_s=retry_after_s)
        if len(parts) in (4, 5, 6) and parts[1] == "events":
            message = _retained_message(parts, max_events)
            return cls("events", message, retry_after_s=int(parts[3]))
        if len(parts) == 5 and parts[1] == "userevents":
            place = int(parts[2]) - 1
            who = repr(users[place]) if 0 <= place < len(users) else "of this batch"
            message = (
                f"user {who} already has {parts[3]} events of the dedupe window (the quota is "
                f"{settings.user_max_events}, AGENT_SIGNAL_USER_MAX_EVENTS, a share of the tenant's; a large event "
                f"counts once per started share of its size, docs/settings.md); {_when_retained(int(parts[4]))}"
            )
            return cls("user_events", message, retry_after_s=int(parts[4]), field="userId")
        if len(parts) == 5 and parts[1] == "user":
            index, wait = int(parts[2]) - 1, int(parts[4])
            when = "retry once some of it expires" if wait else "erase or delete some of it first"
            if index >= len(users) or not settings.user_max_bytes:  # the count after the users': the tenant's
                message = (
                    f"this tenant's users and sessions already store {parts[3]} bytes (its quota is "
                    f"{settings.tenant_max_bytes}, AGENT_SIGNAL_TENANT_MAX_BYTES); {when}"
                )
                return cls("tenant_bytes", message, retry_after_s=wait)
            message = (
                f"user {users[index]!r} already stores {parts[3]} bytes (the quota is {max_user_bytes}, "
                f"AGENT_SIGNAL_USER_MAX_BYTES); {when}"
            )
            return cls("user_bytes", message, retry_after_s=wait, field="userId")
        queued = parts[2] if len(parts) > 2 else "?"
        message = f"this tenant already has {queued} queued events (limit {max_queued}); retry later"
        return cls("tenant", message, retry_after_s=retry_after_s)


def _retained_message(parts: Sequence[str], max_events: int) -> str:
    """``OVERLIMIT events <retained> <retryAfterS> [<dead> [<waiting>]]`` in words: what the tenant keeps (its
    window's, its dead past the window, its backlog past the window) and what to do."""
    dead = int(parts[4]) if len(parts) > 4 else 0
    waiting = int(parts[5]) if len(parts) > 5 else 0
    older = []
    if dead:
        older.append(f"{dead} dead ones, which count until they are redriven or discarded (GET /v1/dlq)")
    if waiting:
        older.append(
            f"{waiting} still queued or running, which count until workers finish them (or, in a paused scope, "
            "until it is resumed or they are cancelled)"
        )
    held = (
        f"{parts[2]} events: {int(parts[2]) - dead - waiting} of its dedupe window, and older: {'; '.join(older)}"
        if older
        else f"{parts[2]} events of its dedupe window"
    )
    return (
        f"this tenant already keeps {held} (its quota is {max_events}, AGENT_SIGNAL_TENANT_MAX_EVENTS; a "
        "large event counts once per started share of its size, docs/settings.md); "
        f"{_when_retained(int(parts[3]), dead, waiting)}"
    )


def _when_retained(retry_after_s: int, dead: int = 0, waiting: int = 0) -> str:
    """What a retained-events refusal tells the caller to do: wait, make room among the dead, or (nothing counted
    yet) send less."""
    if retry_after_s:
        return "retry once workers finish some of them" if waiting else "retry once older ones expire"
    if dead:
        return "waiting frees no room while the dead keep it: redrive or discard some first"
    return "this request alone is over it: send fewer or smaller events"
