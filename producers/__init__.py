"""What apps call: the typed SDK and the event model.

``Producer(settings)`` enqueues straight to Redis and the broker; ``HttpProducer(url)`` goes through
``POST /v1/events``. Both offer ``enqueue(event)`` and ``enqueue_many(events)`` and raise
:class:`InvalidEvent` (with ``.error.code/.message/.field``) for bad input, enqueuing nothing, and
:class:`StoreUnavailable` when Redis is full or unreachable (a refused batch is stored not at all; retry later),
and :class:`OverLimit` for a limit or a quota (``retry_after_s`` 0 when waiting will not help);
``HttpProducer`` also raises :class:`NoAnswer` (a StoreUnavailable) when the door gives no answer within the call's
deadline, and :class:`UnexpectedAnswer` for a success that is not the door's.
``SessionClient(url)`` is the SDK for agent runtimes (the signal tool, D-Mail, context, functions).
The SDK lives in ``producers/sdk/``, the HTTP app in ``producers/http/``, the CLI in ``producers/cli/`` and
the browser UI's files in ``producers/ui/``.
"""

from producers.sdk import HttpProducer, NoAnswer, Producer, SessionClient, UnexpectedAnswer
from worker.core.errors import OverLimit
from worker.intake.source_event import EnqueueResult, EventError, InvalidEvent, SourceEvent, StoreUnavailable

__all__ = [
    "EnqueueResult",
    "EventError",
    "HttpProducer",
    "InvalidEvent",
    "NoAnswer",
    "OverLimit",
    "Producer",
    "SessionClient",
    "SourceEvent",
    "StoreUnavailable",
    "UnexpectedAnswer",
]
