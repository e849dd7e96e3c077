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

from typing import TYPE_CHECKING as _TYPE_CHECKING

from producers.lazy_names import install as _install

if _TYPE_CHECKING:
    from producers.sdk.http_door import CredentialRefused, NoAnswer, UnexpectedAnswer
    from producers.sdk.producer import HttpProducer, Producer
    from producers.sdk.session_client import SessionClient
    from worker.core.errors import OverLimit
    from worker.intake.refusals import EventError, InvalidEvent, StoreUnavailable
    from worker.intake.source_event import EnqueueResult, SourceEvent

__all__ = [
    "CredentialRefused",
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

# Each name's module, imported when the name is first asked for (producers/lazy_names.py): every CLI command
# and worker imported the SDK's modules (the Redis producer, the session client) whether it used them or not,
# about 0.1 s of CPU each.
_HOMES = {
    "CredentialRefused": "producers.sdk.http_door",
    "EnqueueResult": "worker.intake.source_event",
    "EventError": "worker.intake.refusals",
    "HttpProducer": "producers.sdk.producer",
    "InvalidEvent": "worker.intake.refusals",
    "NoAnswer": "producers.sdk.http_door",
    "OverLimit": "worker.core.errors",
    "Producer": "producers.sdk.producer",
    "SessionClient": "producers.sdk.session_client",
    "SourceEvent": "worker.intake.source_event",
    "StoreUnavailable": "worker.intake.refusals",
    "UnexpectedAnswer": "producers.sdk.http_door",
}


_install(globals(), _HOMES)
