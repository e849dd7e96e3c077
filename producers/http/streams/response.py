"""The SSE response of a receipts stream over the process's :class:`~producers.http.streams.feed.Feed` (split from
producers/http/streams/feed.py, which owns the subscriber): it takes its listener when it starts and gives it back however
it ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import Request
from sse_starlette import EventSourceResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from producers.http.streams.feed import Feed, FeedUnavailable, Listener, TooManyStreams
from producers.http.web_common import error_response

__all__ = ["FeedResponse", "feed_of"]


def feed_of(request: Request) -> Feed:
    """The app's Feed (made in the lifespan of ``create_web_app``)."""
    feed: Feed = request.app.state.feed
    return feed


class FeedResponse(Response):
    """The SSE response of a stream over the feed. It takes its listener when it starts (so the route stays a
    plain ``def``, like every route that is not allow-listed as async): over a cap it answers 429
    ``too_many_streams`` with Retry-After, when Redis does not confirm the subscription 503
    ``store_unavailable``; otherwise it streams ``events(listener)`` with sse-starlette (``options`` go to
    EventSourceResponse) and gives the listener's slot back however the response ends."""

    def __init__(
        self,
        feed: Feed,
        channel: str,
        credential_id: str,
        events: Callable[[Listener], AsyncIterator[bytes]],
        *,
        unavailable_retry_after_s: int,
        tenant: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(media_type="text/event-stream")
        self.feed = feed
        self.channel = channel
        self.credential_id = credential_id
        self.tenant = tenant
        self.events = events
        self.unavailable_retry_after_s = unavailable_retry_after_s
        self.options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            listener = await self.feed.listen(self.channel, self.credential_id, self.tenant)
        except TooManyStreams as exc:
            refused = error_response(429, "too_many_streams", str(exc))
            refused.headers["Retry-After"] = str(exc.retry_after_s)
            await refused(scope, receive, send)
            return
        except FeedUnavailable as exc:
            refused = error_response(503, "store_unavailable", str(exc))
            refused.headers["Retry-After"] = str(self.unavailable_retry_after_s)
            await refused(scope, receive, send)
            return
        try:
            await EventSourceResponse(self.events(listener), **self.options)(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
