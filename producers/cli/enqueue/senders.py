"""Where ``enqueue`` sends its batches. ``send(chunk)`` takes ``(line number, event)`` pairs and answers one
:data:`Sent` per line, in line order: the line's result, or its rejection. A failure that no line is to blame
for (a bad credential, the server or store gone, a limit) is a :class:`Stopped`: the verb stops there, and
reports what the batch had already sent or rejected (a split batch's first half is stored by then).

- :class:`DirectSender`: the engine's Producer on ``REDIS_URL``. Each event is validated on its own (an invalid
  one is its line's rejection), the others are enqueued together.
- :class:`HttpSender`: ``POST /v1/events``. A 422 or 413 naming ``events[i]`` rejects that line and the rest
  is sent again. A 413 naming no line (the body is over the server's ``AGENT_SIGNAL_MAX_REQUEST_BYTES``, or
  holds more events than it takes at once) halves the batch and sends each half, down to single events; a
  single event still refused is its line's rejection, with the server's message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from producers.cli.enqueue.lines import Rejection
from producers.cli.reach.direct import direct_producer
from producers.cli.reach.target import (
    HTTP_TIMEOUT_S,
    CliError,
    Target,
    display_url,
    format_http_error,
    http_error_message,
    no_such_route,
    unreachable,
)
from producers.sdk.http_door import NoAnswer, UnexpectedAnswer, error_code

if TYPE_CHECKING:
    from worker.intake.source_event import EnqueueResult, InvalidEvent
    from worker.store.records import PreparedEvent

__all__ = ["DirectSender", "HttpSender", "Pending", "Sent", "Stopped"]

Pending = tuple[int, dict[str, Any]]  # (line number, event)
Sent = tuple[int, "EnqueueResult | None", Rejection | None]  # (line number, result, or why not)

_NAMED_LINE = re.compile(r"events\[(\d+)\]\.?(.*)")


class Stopped(CliError):
    """The failure that stopped a batch, with what of it was settled before (``done``: stored or rejected);
    ``maybe_stored``: the rest of the batch was on its way and may be stored."""

    def __init__(self, error: CliError, done: list[Sent]) -> None:
        super().__init__(str(error), error.exit_code, maybe_stored=error.maybe_stored)
        self.done = sorted(done, key=lambda r: r[0])
        self.unsettled: list[int] = []  # the lines of the batch neither stored nor rejected (set by the verb)


class DirectSender:
    """Straight to Redis, as the operator of ``tenant``."""

    def __init__(self, tenant: str = "default") -> None:
        self.producer = direct_producer(tenant)

    def send(self, chunk: Sequence[Pending]) -> list[Sent]:
        from worker.intake.source_event import InvalidEvent

        out: list[Sent] = []
        prepared, numbers = [], []
        for number, event in chunk:
            try:
                prepared.append(self.producer.validate(event))
                numbers.append(number)
            except InvalidEvent as exc:
                out.append((number, None, Rejection(exc.error.message, exc.error.field)))
        if out:
            self.producer.count_rejected(len(out))
        while True:
            try:
                results = self._enqueue(prepared, out)
                break
            except (
                InvalidEvent
            ) as exc:  # one event the store refused (another user's dedupe key): the rest again
                named = HttpSender._named_line(exc)
                if named is None or named[0] >= len(prepared):
                    raise Stopped(CliError(exc.error.message, 1), out) from None
                index, rejection = named
                prepared.pop(index)
                out.append((numbers.pop(index), None, rejection))
                self.producer.count_rejected(1)
        out.extend((n, r, None) for n, r in zip(numbers, results, strict=True))
        return sorted(out, key=lambda r: r[0])

    def _enqueue(self, prepared: list[PreparedEvent], out: list[Sent]) -> list[EnqueueResult]:
        """The batch's results; InvalidEvent for an event the store refused, Stopped for the rest."""
        from redis.exceptions import RedisError

        from worker.core.errors import OverLimit
        from worker.intake.source_event import StoreUnavailable
        from worker.telemetry.log_privacy import describe_error

        try:
            results: list[EnqueueResult] = self.producer.enqueue_prepared(prepared)
            return results
        except StoreUnavailable as exc:  # nothing of the batch was stored; its rejections stand
            # exit 2 as every verb that cannot reach its target: no line is to blame (exit 1 is a rejected line)
            raise Stopped(CliError(f"the store is unavailable: {exc}", 2), out) from None
        except OverLimit as exc:  # the whole batch was refused, as the HTTP door's 429
            raise Stopped(CliError(f"over a limit ({exc.what}): {exc.message}", 1), out) from None
        except RedisError as exc:  # outside the enqueue script (an admission hook's read): the store failed
            raise Stopped(CliError(f"the store failed: {describe_error(exc)}", 2), out) from None

    def close(self) -> None:
        self.producer.close()


class HttpSender:
    """Over ``POST /v1/events`` at ``target`` (module doc: what a 422 or a 413 does)."""

    def __init__(self, target: Target) -> None:
        from producers.sdk.producer import HttpProducer

        assert target.url is not None
        self.url = target.url
        try:
            self.http = HttpProducer(target.url, token=target.token, timeout_s=HTTP_TIMEOUT_S)
        except ValueError as exc:  # the URL (checked by resolve_target too); the message never quotes it
            raise CliError(f"{target.via}: {exc}") from None
        # sourceType -> the door's rejection of it: the answer depends on the value alone, so further lines of
        # that type are rejected here (a file with one mistyped sourceType on every line cost one request per line)
        self.unknown_types: dict[str, Rejection] = {}

    def send(self, chunk: Sequence[Pending]) -> list[Sent]:
        out: list[Sent] = []
        try:
            self._send(list(chunk), out)
        except CliError as exc:
            raise Stopped(exc, out) from None
        return sorted(out, key=lambda r: r[0])

    def _send(self, pending: list[Pending], out: list[Sent]) -> None:
        """Send ``pending`` (which this changes), each line's outcome to ``out``."""
        from worker.intake.source_event import InvalidEvent

        while pending:
            pending = self._without_unknown_types(pending, out)
            if not pending:
                return
            try:
                results = self._post(pending)
            except InvalidEvent as exc:
                named = self._named_line(exc)
                if named is not None:  # that line's rejection; the others again
                    index, rejection = named
                    number, event = pending.pop(index)
                    out.append((number, None, rejection))
                    if exc.error.code == "unknown_source_type" and isinstance(event.get("sourceType"), str):
                        self.unknown_types[event["sourceType"]] = rejection
                elif len(pending) > 1:  # too large as a whole: each half on its own
                    half = len(pending) // 2
                    self._send(pending[:half], out)
                    self._send(pending[half:], out)
                    return
                else:
                    out.append((pending[0][0], None, Rejection(self._error_line(exc))))
                    return
            else:
                out.extend((n, r, None) for (n, _), r in zip(pending, results, strict=True))
                return

    def _without_unknown_types(self, pending: list[Pending], out: list[Sent]) -> list[Pending]:
        """``pending`` less the lines of a sourceType the door already refused as unknown (each rejected so)."""
        if not self.unknown_types:
            return pending
        kept: list[Pending] = []
        for number, event in pending:
            source_type = event.get("sourceType")
            refused = self.unknown_types.get(source_type) if isinstance(source_type, str) else None
            if refused is None:
                kept.append((number, event))
            else:
                out.append((number, None, refused))
        return kept

    def _post(self, pending: list[Pending]) -> list[EnqueueResult]:
        """The batch's results; InvalidEvent for a 422 or 413 the caller handles, CliError for the rest."""
        from worker.core.errors import OverLimit
        from worker.intake.source_event import InvalidEvent, StoreUnavailable

        try:
            return self.http.enqueue_many([event for _, event in pending])
        except NoAnswer as exc:  # the SDK's retries are spent (a StoreUnavailable: caught first)
            raise self._no_answer(exc) from None
        except UnexpectedAnswer as exc:  # a 2xx that is not the door's: something else at that URL
            message = f"{display_url(self.url)} is not the Agent Signal API: {exc.answer}"
            raise CliError(message, maybe_stored=True) from None
        except httpx.TransportError as exc:  # one the SDK does not retry
            raise unreachable(self.url, exc) from None
        except httpx.HTTPStatusError as exc:  # a status the SDK has no type for: 404, 405, 500…
            response = exc.response
            path, code = response.request.url.path, error_code(response)
            if (no_route := no_such_route(self.url, "POST", path, response.status_code, code)) is not None:
                raise no_route from None
            raise CliError(http_error_message(exc.response, had_token=self.http.has_token), 1) from None
        except StoreUnavailable as exc:
            raise CliError(f"the server's store is unavailable: {exc}; retry later", 1) from None
        except OverLimit as exc:  # a 429 the SDK did not wait out: a quota, a full inbox, its retries spent
            error_line = format_http_error(
                429, exc.what, exc.message, exc.field, had_token=self.http.has_token
            )
            raise CliError(error_line, 1) from None
        except InvalidEvent as exc:
            if exc.status_code == 413 or self._named_line(exc) is not None:
                raise
            raise CliError(self._error_line(exc), 1) from None

    def _no_answer(self, exc: NoAnswer) -> CliError:
        """ "no answer … within N s" for a batch sent and timed out, else the "cannot reach" line."""
        if exc.timed_out:
            message = f"no answer from {display_url(self.url)} within {self.http.timeout_s:g} s"
            return CliError(message, maybe_stored=exc.maybe_stored)  # a connect the deadline cut sent nothing
        cause = exc.__cause__
        if isinstance(cause, httpx.TransportError):
            error = unreachable(self.url, cause)
            return CliError(str(error), maybe_stored=exc.maybe_stored)
        return CliError(str(exc), maybe_stored=exc.maybe_stored)  # pragma: no cover - NoAnswer has its cause

    @staticmethod
    def _named_line(exc: InvalidEvent) -> tuple[int, Rejection] | None:
        """The index of the event a 422/413 names (``events[i].field``) and its rejection, else None."""
        match = _NAMED_LINE.fullmatch(exc.error.field or "")
        if exc.status_code in (401, 403) or match is None:
            return None
        index = int(match.group(1))
        message = exc.error.message.replace(f"events[{index}].", "")
        return index, Rejection(message, match.group(2) or None)

    def _error_line(self, exc: InvalidEvent) -> str:
        """``HTTP 413 request_too_large: message``, as every HTTP error of the CLI."""
        error = exc.error
        return format_http_error(
            exc.status_code, error.code, error.message, error.field, had_token=self.http.has_token
        )

    def close(self) -> None:
        self.http.close()
