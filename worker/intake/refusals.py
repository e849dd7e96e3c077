"""How the door refuses an event: :class:`EventError` ``{code, message, field}`` and the exceptions that carry one
(:class:`InvalidEvent`, :class:`StoreUnavailable`). Apart from the event model (worker/intake/source_event.py,
which re-exports them) so that what only reads the door's answers (producers/sdk/http_door.py, and so every CLI
verb over HTTP but ``enqueue``, which validates events before it sends them) raises them without importing the
models, the store or redis: such a command starts in half the CPU."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["EventError", "InvalidEvent", "StoreUnavailable", "as_single"]


class EventError(BaseModel):
    code: str
    message: str
    field: str | None = None


class InvalidEvent(ValueError):
    """An event (or request) was rejected; ``error`` says why and where."""

    def __init__(self, error: EventError, status_code: int = 422) -> None:
        where = error.field or "request"  # a message that names its field already is not given it twice
        super().__init__(error.message if error.message.startswith(where) else f"{where}: {error.message}")
        self.error = error
        self.status_code = status_code


def as_single(exc: InvalidEvent) -> InvalidEvent:
    """``exc`` as a request of one event (not a batch) names it: without the ``events[0].`` the store's refusals
    carry (the store does not know how the request was sent)."""
    field, message = exc.error.field or "", exc.error.message
    if not field.startswith("events[0]."):
        return exc
    error = exc.error.model_copy(
        update={"field": field.removeprefix("events[0]."), "message": message.replace("events[0].", "", 1)}
    )
    return InvalidEvent(error, exc.status_code)


class StoreUnavailable(RuntimeError):
    """The store (Redis) refused or could not take the events: full (out of memory), read-only, or unreachable.
    The message says whether anything was stored (a refused batch stores none of it) and to retry later;
    ``retry_after_s`` is the suggested wait. HTTP answers it as ``503 store_unavailable`` with Retry-After."""

    def __init__(self, message: str, *, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.error = EventError(code="store_unavailable", message=message)
        self.retry_after_s = retry_after_s
        self.status_code = 503
