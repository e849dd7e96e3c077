"""The frames of a receipts stream (``GET /v1/receipts/stream``, producers/http/routes/self_iteration.py): what one
user's stream sends over its listener of the feed (producers/http/streams/feed.py).

* ``: connected`` once the subscription is live; then ``event: resync`` at once when the request carries
  ``Last-Event-ID`` (a reconnect: what was written while it was away was never announced to it, so the client
  re-reads the list, as it does after any resync);
* ``event: receipt`` (``id:`` the receipt's id, ``data:`` its JSON) per new receipt that matches the stream's
  filter; an id never puts a control character on its ``id:`` line (:func:`event_id` drops them: the JSON in
  ``data:``, where JSON escapes them, keeps the id whole);
* ``event: resync`` when the listener lost messages or the store did not answer;
* the stream ends when its credential fails a re-check or its token expires
  (producers/http/streams/credential.py), after a ``: credential no longer valid`` comment; and when its user is
  erased (``DELETE /v1/users/{userId}`` announces :data:`~worker.store.receipts.ERASED` on the user's channel),
  after ``: user erased``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Final

import anyio
from redis.exceptions import RedisError

from producers.http.streams.credential import StreamCredential
from producers.http.streams.feed import Listener, Resync
from worker.store.receipts import ERASED, ReceiptStore, matches

__all__ = ["CONNECTED", "RESYNC_FRAME", "ReceiptFilter", "event_id", "receipt_events"]

CONNECTED: Final = b": connected\n\n"
RESYNC_FRAME: Final = b"event: resync\ndata: {}\n\n"
ENDED: Final = b": credential no longer valid\n\n"
ERASED_FRAME: Final = b": user erased\n\n"
SENT_IDS: Final = 1024  # the last ids sent, remembered to drop a repeat (Redis may announce one twice)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ReceiptFilter:
    """Which of the user's receipts a stream sends: every one, or one agent's and/or one topic's."""

    user_id: str
    agent_id: str | None
    topic_id: str | None


def event_id(receipt_id: str) -> str:
    """A receipt id as an SSE ``id:`` value: without control characters (a line break would end the field
    and start a line of the id's making; a NUL makes a browser ignore the field)."""
    return CONTROL.sub("", receipt_id)


def _receipt_frame(receipt_id: str, receipt: dict[str, object]) -> bytes:
    data = json.dumps(receipt, ensure_ascii=False)  # one line: JSON escapes every control character
    return f"event: receipt\nid: {event_id(receipt_id)}\ndata: {data}\n\n".encode()


async def receipt_events(
    listener: Listener,
    receipts: ReceiptStore,
    wanted: ReceiptFilter,
    credential: StreamCredential,
    *,
    reconnected: bool = False,
) -> AsyncIterator[bytes]:
    """The stream's frames (see the module docstring); a receipt is read once however many streams announce
    it at the same time."""
    sent: dict[str, None] = {}  # the last ids sent (insertion-ordered, bounded)
    try:
        yield CONNECTED
        if reconnected:
            yield RESYNC_FRAME
        while True:
            try:
                item = await listener.get(credential.wait_s())
            except TimeoutError:
                item = ""  # nothing arrived: time for the credential's check
            if item == ERASED:  # the user was erased (DELETE /v1/users/{userId}): nothing of theirs is left
                # before the credential's check: the erasure ends the user's tokens too, and the stream says why
                yield ERASED_FRAME
                return
            if not await credential.still_valid():
                yield ENDED
                return
            if item is None:
                return
            if isinstance(item, Resync):
                yield RESYNC_FRAME
            elif item and item not in sent:
                frame = await _frame(listener, receipts, wanted, item)
                if frame is None:
                    continue
                if frame is not RESYNC_FRAME:  # sent: a repeat of its announcement is dropped
                    sent[item] = None
                    if len(sent) > SENT_IDS:
                        del sent[next(iter(sent))]
                yield frame
    finally:
        with anyio.CancelScope(shield=True):  # a client that goes away cancels the stream; still release
            await listener.aclose()


async def _frame(
    listener: Listener, receipts: ReceiptStore, wanted: ReceiptFilter, item: str
) -> bytes | None:
    """The frame of announced receipt ``item``: None when it is gone or not the stream's, a resync when the
    store did not answer (the client re-reads the list when the store is back)."""
    try:
        receipt = await listener.feed.once(
            receipts.keys.receipt(wanted.user_id, item),
            partial(anyio.to_thread.run_sync, receipts.get, wanted.user_id, item),
        )
    except RedisError:
        return RESYNC_FRAME
    if receipt is None or not matches(receipt, wanted.user_id, wanted.agent_id, wanted.topic_id):
        return None
    return _receipt_frame(item, receipt)
