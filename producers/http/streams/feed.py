"""One Redis subscriber per web process, shared by every receipts stream (``GET /v1/receipts/stream``).

Each stream used to hold its own pub/sub connection, so about a hundred streams used up the process's Redis
connections and every route answered 500. Now a :class:`Feed` owns one ``redis.asyncio`` PubSub connection:

* channels are subscribed on demand and reference-counted: SUBSCRIBE when the first listener of a channel
  arrives, UNSUBSCRIBE when its last listener leaves;
* each listener (one per open stream) has a bounded queue; a slow client loses its *oldest* messages and
  gets a :data:`RESYNC` hint (the browser re-reads the list) instead of holding up anyone else;
* open streams are capped per credential and in total (:class:`TooManyStreams`, answered as 429), and per
  tenant across every web process (producers/http/streams/slots.py, ``AGENT_SIGNAL_TENANT_MAX_STREAMS``);
* the process's total is shared fairly between tenants: when it is reached, a tenant holding fewer streams here
  than another (by two or more) takes the newest stream of the one holding the most, which ends (its client
  reconnects and catches up, and is refused while its tenant holds its share). Two tenants could fill a
  process, and one alone where the tenant cap is off or above the total, and every other tenant got 429;
* the reader reconnects with capped exponential backoff (a plain loop, no library) when Redis drops and
  resubscribes every channel that has listeners; they get a RESYNC hint (messages sent meanwhile are gone);
* concurrent lookups of one record (500 streams of a channel reading one receipt) run once (:meth:`Feed.once`).

The app creates the Feed in its lifespan and closes it at shutdown; the connection and reader task start with
the first listener. SUBSCRIBE/UNSUBSCRIBE are written under a lock by the caller's task, only the reader task
reads; ``listen()`` returns once Redis confirmed the channel, so a message published after that reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar, cast

import anyio
from redis.asyncio.client import PubSub
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from producers.http.settings import DoorSettings
from producers.http.streams.slots import StreamSlots, TenantStreamsFull
from worker.settings import Settings
from worker.store.server.client import async_redis_from_settings
from worker.telemetry.log_privacy import describe_error

__all__ = ["RESYNC", "Feed", "FeedUnavailable", "Listener", "TooManyStreams"]

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_SIZE: Final = 256  # messages a listener may fall behind by before its oldest are dropped
SUBSCRIBE_TIMEOUT_S: Final = 5.0  # how long listen() waits for Redis to confirm a SUBSCRIBE
RETRY_AFTER_S: Final = 10  # Retry-After of a 429 too_many_streams (streams are long-lived)
MAX_REMEMBERED_TENANTS: Final = 1024  # past this, tenants whose last eviction is older than the interval go
READ_TIMEOUT_S: Final = 15.0  # the reader wakes this often when idle (redis-py's health check PINGs then)
BACKOFF_INITIAL_S: Final = 0.1  # reconnect delay after the first failure, doubled up to the cap
BACKOFF_CAP_S: Final = 5.0


class Resync:
    """The marker a listener receives after it lost messages (a slow client, or a Redis reconnect)."""

    def __repr__(self) -> str:
        return "RESYNC"


RESYNC: Final = Resync()


class TooManyStreams(Exception):
    """The credential (or the process) already holds as many streams as allowed: answer 429."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class FeedUnavailable(Exception):
    """Redis did not confirm the subscription in time (it is down or reconnecting): answer 503."""


class Listener:
    """One stream's view of a channel: iterate it for message payloads (str) and RESYNC hints.

    The iteration ends when the feed closes. :meth:`aclose` gives the slot back (idempotent)."""

    def __init__(
        self, feed: Feed, channel: str, credential_id: str, queue_size: int, tenant: str = ""
    ) -> None:
        self.feed = feed
        self.channel = channel
        self.credential_id = credential_id
        self.tenant = tenant
        self.slot: tuple[str, str] | None = None  # (tenant, member): its slot in the tenant's count
        self.evicted = False  # its place in the process's counts was given to another tenant's stream
        self.live = False  # listen() returned it: only such a stream is ever ended for another
        self.promised_at_s: float | None = None  # when a place was promised to it (time.monotonic())
        self._queue: asyncio.Queue[str | Resync | None] = asyncio.Queue(maxsize=max(queue_size, 2))
        self._closed = False

    def offer(self, item: str | Resync | None) -> None:
        """Enqueue without waiting. When the queue is full the backlog (the oldest messages) is dropped and
        replaced by one RESYNC hint: re-reading the list covers everything dropped."""
        if self._queue.full():
            while not self._queue.empty():
                self._queue.get_nowait()
            if item is not None:
                self._queue.put_nowait(RESYNC)
                if item is RESYNC:
                    return
        self._queue.put_nowait(item)

    def __aiter__(self) -> AsyncIterator[str | Resync]:
        return self._items()

    async def _items(self) -> AsyncIterator[str | Resync]:
        while (item := await self.get()) is not None:
            yield item

    async def get(self, timeout_s: float | None = None) -> str | Resync | None:
        """The next message or RESYNC hint; None once the feed closed (or the listener did); TimeoutError when
        nothing arrived within ``timeout_s`` (None: wait as long as it takes)."""
        if self._closed:
            return None
        return await asyncio.wait_for(self._queue.get(), timeout_s)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.feed.release(self)


class Feed:
    """The process's one subscriber (see the module docstring). Create it once; ``await aclose()`` at exit."""

    def __init__(
        self,
        settings: Settings,
        *,
        max_streams: int,
        max_streams_per_credential: int,
        tenant_max_streams: int = 0,
        queue_size: int = QUEUE_SIZE,
        subscribe_timeout_s: float = SUBSCRIBE_TIMEOUT_S,
        eviction_interval_s: float = RETRY_AFTER_S,
    ) -> None:
        self.settings = settings
        self.max_streams = max_streams
        self.max_streams_per_credential = max_streams_per_credential
        self.slots = StreamSlots(settings, tenant_max_streams)
        self.queue_size = queue_size
        self.subscribe_timeout_s = subscribe_timeout_s
        self.eviction_interval_s = eviction_interval_s  # a tenant ends at most one other stream this often
        self.sessions = 0  # connections made (a reconnect makes one more)
        self.reconnects = 0  # sessions that ended in an error
        self._listeners: dict[str, set[Listener]] = {}
        self._per_credential: Counter[str] = Counter()
        self._per_tenant: dict[str, list[Listener]] = {}  # each tenant's counted listeners here, oldest first
        self._evicting: set[Listener] = set()  # counted out for a newcomer not yet holding its tenant's slot
        self._last_eviction_s: dict[
            str, float
        ] = {}  # when each tenant last ended another's stream (monotonic)
        self._total = 0
        self._pending: Counter[str] = Counter()  # SUBSCRIBEs sent on this connection and not yet confirmed
        self._live: dict[str, asyncio.Event] = {}  # set once Redis confirmed the channel's last SUBSCRIBE
        self._pubsub: PubSub | None = None
        self._send_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: dict[str, asyncio.Future[Any]] = {}

    @classmethod
    def from_settings(cls, settings: Settings, door: DoorSettings) -> Feed:
        """The feed of the engine's Redis, with the door's stream limits."""
        return cls(
            settings,
            max_streams=door.max_streams,
            max_streams_per_credential=door.max_streams_per_credential,
            tenant_max_streams=door.tenant_max_streams,
        )

    @property
    def open_streams(self) -> int:
        return self._total

    # --- listeners ---

    async def listen(self, channel: str, credential_id: str, tenant: str | None = None) -> Listener:
        """A listener on ``channel`` once Redis confirmed the subscription; TooManyStreams over a cap (the
        tenant's, across processes, when ``tenant`` is given), FeedUnavailable when Redis does not confirm
        within ``subscribe_timeout_s``."""
        if self._stop.is_set():
            raise FeedUnavailable("the server is shutting down")
        listener = Listener(self, channel, credential_id, self.queue_size, tenant or "")
        victim = self._reserve(listener)
        try:
            if tenant is not None and self.slots.enabled:
                listener.slot = (tenant, await self.slots.take(tenant))
            if victim is not None:  # once the newcomer holds its tenant's slot: a refused one ends nobody
                self._evict(victim)
                victim = None
            self._start()
            listeners = self._listeners.setdefault(channel, set())
            listeners.add(listener)
            live = self._live.setdefault(channel, asyncio.Event())
            if len(listeners) == 1:
                await self._send("SUBSCRIBE", channel)
            with anyio.fail_after(self.subscribe_timeout_s):
                await live.wait()
        except (TimeoutError, RedisError, TenantStreamsFull) as exc:
            self._restore(victim, listener)
            await listener.aclose()
            if isinstance(exc, TenantStreamsFull):
                raise TooManyStreams(str(exc)) from None
            raise FeedUnavailable("the store did not confirm the subscription; retry later") from None
        except BaseException:
            self._restore(victim, listener)
            await listener.aclose()
            raise
        listener.live = True
        return listener

    def _reserve(self, listener: Listener) -> Listener | None:
        """Count ``listener`` in; at the total, the stream it is to take the place of (evicted by the caller once
        the newcomer holds its tenant's slot; counted out here, so a newcomer racing it cannot take the place)."""
        credential_id = listener.credential_id
        if self._per_credential[credential_id] >= self.max_streams_per_credential:
            raise TooManyStreams(
                f"this credential already holds {self.max_streams_per_credential} open streams (the limit);"
                " close one or retry later"
            )
        victim = None
        if self._total >= self.max_streams:
            victim = self._fair_victim(listener.tenant)
            if victim is None:
                raise TooManyStreams(
                    f"this server already serves {self._total} streams (the limit); retry later"
                )
            self._evicting.add(victim)
            self._uncount(victim)
            listener.promised_at_s = self._promised(listener.tenant)
        self._total += 1
        self._per_credential[credential_id] += 1
        self._per_tenant.setdefault(listener.tenant, []).append(listener)
        return victim

    def _fair_victim(self, tenant: str) -> Listener | None:
        """At the process's total: the newest stream of the tenant holding the most here, when it holds at
        least two more than ``tenant`` (it still holds as many as ``tenant`` after giving one), and ``tenant``
        ended none within ``eviction_interval_s`` (a tenant that opens and closes streams does not end one per
        request); else None. Only a stream whose ``listen()`` returned is ended: a newcomer still waiting for its
        own slot is never another's victim (a review found the count passing the total that way)."""
        last_s = self._last_eviction_s.get(tenant)
        if not self._per_tenant or (
            last_s is not None and time.monotonic() - last_s < self.eviction_interval_s
        ):
            return None
        most = max(self._per_tenant, key=lambda name: len(self._per_tenant[name]))
        held = self._per_tenant.get(tenant, [])
        if most == tenant or len(self._per_tenant[most]) < len(held) + 2:
            return None
        return next((listener for listener in reversed(self._per_tenant[most]) if listener.live), None)

    def _promised(self, tenant: str) -> float:
        """``tenant`` was promised a stream's place now: it ends no other within ``eviction_interval_s`` (noted at
        the promise, so newcomers of one tenant waiting at once cannot each end one)."""
        now_s = time.monotonic()
        if len(self._last_eviction_s) > MAX_REMEMBERED_TENANTS:
            self._last_eviction_s = {
                name: at_s
                for name, at_s in self._last_eviction_s.items()
                if now_s - at_s < self.eviction_interval_s
            }
        self._last_eviction_s[tenant] = now_s
        return now_s

    def _evict(self, victim: Listener) -> None:
        """End ``victim``'s stream, counted out by :meth:`_reserve` (its slot in its tenant's count across
        processes is given back when the stream has ended). Nothing when it ended meanwhile."""
        if victim not in self._evicting:
            return
        self._evicting.discard(victim)
        victim.evicted = True
        log.info(
            "a receipts stream ended to give its place to another tenant's (the process is at its total)"
        )
        victim.offer(None)

    def _restore(self, victim: Listener | None, newcomer: Listener) -> None:
        """A stream promised to ``newcomer`` that was then refused (its tenant's slot) or failed: it goes on,
        counted again (unless it ended meanwhile), and the tenant may be promised another (unless a later promise
        of its own was noted since: that one stands)."""
        if victim is None:
            return
        if self._last_eviction_s.get(newcomer.tenant) == newcomer.promised_at_s:
            del self._last_eviction_s[newcomer.tenant]
        if victim not in self._evicting:
            return
        self._evicting.discard(victim)
        self._total += 1
        self._per_credential[victim.credential_id] += 1
        self._per_tenant.setdefault(victim.tenant, []).append(victim)

    def _uncount(self, listener: Listener) -> None:
        self._total -= 1
        self._per_credential[listener.credential_id] -= 1
        if self._per_credential[listener.credential_id] <= 0:
            del self._per_credential[listener.credential_id]
        held = self._per_tenant.get(listener.tenant, [])
        if listener in held:
            held.remove(listener)
        if not held:
            self._per_tenant.pop(listener.tenant, None)

    async def release(self, listener: Listener) -> None:
        """Give a listener's slot back; UNSUBSCRIBE when it was its channel's last (Listener.aclose calls this)."""
        if listener in self._evicting:  # promised to a newcomer, and counted out then: it ended first
            self._evicting.discard(listener)
        elif not listener.evicted:  # an evicted one left the counts when it was evicted
            self._uncount(listener)
        if listener.slot is not None:
            with anyio.CancelScope(shield=True):
                await self.slots.give_back(*listener.slot)
        listeners = self._listeners.get(listener.channel)
        if listeners is None or listener not in listeners:
            return
        listeners.discard(listener)
        if not listeners:
            del self._listeners[listener.channel]
            self._live.pop(listener.channel, None)
            with anyio.CancelScope(shield=True):  # a stream torn down by a disconnect still unsubscribes
                await self._send("UNSUBSCRIBE", listener.channel)

    # --- shared lookups ---

    async def once(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """``await fetch()``, shared by every caller asking for ``key`` while the first call runs."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(fetch())
            self._inflight[key] = task

            def done(finished: asyncio.Future[Any]) -> None:
                self._inflight.pop(key, None)
                if not finished.cancelled():
                    finished.exception()  # retrieved here too: every caller may have gone meanwhile

            task.add_done_callback(done)
        result: T = await asyncio.shield(task)
        return result

    # --- the connection ---

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="agent-signal-feed")

    async def _send(self, *command: str) -> None:
        async with self._send_lock:
            await self._write(*command)

    async def _write(self, *command: str) -> None:
        """Write SUBSCRIBE/UNSUBSCRIBE on the live connection (hold ``_send_lock``); when there is none, the
        next session subscribes every channel that has listeners."""
        pubsub = self._pubsub
        connection = _connection_of(pubsub) if pubsub is not None else None
        if connection is None or not connection.is_connected:
            return
        try:
            await connection.send_command(*command, check_health=False)
        except (RedisError, OSError) as exc:  # the reader sees the broken connection and reconnects
            log.warning("receipts feed: %s failed: %s", command[0], describe_error(exc))
            return
        if command[0] == "SUBSCRIBE":
            self._pending.update(command[1:])

    async def _run(self) -> None:
        """Sessions until closed; after a failure wait (0.1 s, doubling up to 5 s; back to 0.1 s once a
        session had connected) and reconnect. Listeners get a RESYNC: messages sent meanwhile are gone."""
        delay, sessions = BACKOFF_INITIAL_S, self.sessions
        while not self._stop.is_set():
            try:
                await self._session()
                continue  # the session only returns when it was told to stop
            except (RedisError, OSError) as exc:
                error = f"Redis connection lost ({exc})"
            except Exception as exc:  # a bug must not end the feed for the life of the process
                log.exception("receipts feed: unexpected failure")
                error = f"unexpected {type(exc).__name__}"
            self.reconnects += 1
            if self.sessions != sessions:
                delay, sessions = BACKOFF_INITIAL_S, self.sessions
            log.warning("receipts feed: %s; reconnecting in %.1f s", error, delay)
            for listeners in self._listeners.values():
                for listener in listeners:
                    listener.offer(RESYNC)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(delay * 2, BACKOFF_CAP_S)

    async def _session(self) -> None:
        client = async_redis_from_settings(self.settings, pubsub=True)
        pubsub = client.pubsub()
        try:
            await pubsub.connect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            # No silent reconnects inside redis-py: they would come back subscribed to nothing (the channels
            # are tracked here, not in the PubSub); an error ends the session and the next one resubscribes.
            connection = _connection_of(pubsub)
            if connection is not None:
                connection.retry = Retry(NoBackoff(), 0)
            async with self._send_lock:  # no SUBSCRIBE/UNSUBSCRIBE of a listener can come in between
                self.sessions += 1
                self._pubsub = pubsub
                self._pending.clear()
                for live in self._live.values():
                    live.clear()
                if self._listeners:
                    await self._write("SUBSCRIBE", *sorted(self._listeners))
            await self._read(pubsub)
        finally:
            self._pubsub = None
            with anyio.CancelScope(shield=True):
                # redis-py annotates PubSub.aclose from 8.2 on: typed here, so no ignore that one version finds unused
                close_pubsub: Callable[[], Awaitable[None]] = pubsub.aclose
                await close_pubsub()
                await client.aclose()

    async def _read(self, pubsub: PubSub) -> None:
        while not self._stop.is_set():
            connection = _connection_of(pubsub)
            if connection is None or not connection.is_connected:  # a failed SUBSCRIBE write dropped it
                raise RedisConnectionError("the feed's connection was closed")
            message = await pubsub.get_message(timeout=READ_TIMEOUT_S)
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind, channel = message.get("type"), str(message.get("channel"))
        if kind == "message":
            for listener in self._listeners.get(channel, ()):
                listener.offer(str(message["data"]))
        elif kind == "subscribe":
            self._pending[channel] -= 1
            if self._pending[channel] <= 0:
                del self._pending[channel]
                live = self._live.get(channel)
                if live is not None and channel in self._listeners:
                    live.set()

    async def aclose(self) -> None:
        """Stop the reader, end every stream's iteration and close the connection."""
        self._stop.set()
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.offer(None)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.slots.aclose()


def _connection_of(pubsub: PubSub) -> AbstractConnection | None:
    """The PubSub's connection (redis-py leaves the attribute unannotated)."""
    return cast("AbstractConnection | None", pubsub.connection)
