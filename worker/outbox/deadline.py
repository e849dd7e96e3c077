"""One outbound HTTP call's deadline, its attempts and waits included (:class:`Deadline`): the SDK's and the CLI's
calls, and plugins' deliverers (through worker.plugin: a receiver that trickles its answer held a delivery, and its
tenant's share of the relay, for as long as it liked).

httpx's timeouts are per operation: a server that sends one byte a second never trips a read
timeout. A :class:`Deadline` is one call's end; while it is :meth:`~Deadline.applied`, the
:class:`DeadlineTransport` the clients make for themselves (httpx's own transport over httpcore, with a network
backend whose every connect, read and write waits at most until that end) stops the call there, as an
``httpx.TimeoutException``. A client given as ``client=`` keeps its own transport: its attempts' timeouts are capped
by the time left (:meth:`Deadline.attempt_timeout`), each read's, not the whole answer's.

Written by hand (docs/decisions.md): httpx has no whole-call timeout (its ``timeout`` is per connect, read and
write), and no option for a network backend, so :class:`DeadlineTransport` sets its pool's.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

__all__ = ["Deadline", "DeadlineTransport", "deadline_transport", "send_within"]

# the end of the call in progress in this thread (time.monotonic()), read by DeadlineTransport's streams
_CALL_ENDS_AT_S: ContextVar[float | None] = ContextVar("agent_signal_call_ends_at", default=None)
_LEAST_TIMEOUT_S = 0.001  # an attempt started with no time left still gets a timeout, not a blocking socket


class Deadline:
    """One call's end, ``timeout_s`` from now on the monotonic clock."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.ends_at_s = time.monotonic() + timeout_s

    def left_s(self) -> float:
        return self.ends_at_s - time.monotonic()

    @contextmanager
    def applied(self) -> Iterator[None]:
        """While inside, :class:`DeadlineTransport` stops this thread's requests at the deadline."""
        token = _CALL_ENDS_AT_S.set(self.ends_at_s)
        try:
            yield
        finally:
            _CALL_ENDS_AT_S.reset(token)

    def attempt_timeout(self, timeout: httpx.Timeout) -> httpx.Timeout:
        """A client's ``timeout`` with each phase (connect, read, write, pool) capped by the time left."""
        left_s = max(self.left_s(), _LEAST_TIMEOUT_S)

        def capped(phase_s: float | None) -> float:
            return left_s if phase_s is None else min(phase_s, left_s)

        return httpx.Timeout(
            connect=capped(timeout.connect),
            read=capped(timeout.read),
            write=capped(timeout.write),
            pool=capped(timeout.pool),
        )


def send_within(client: httpx.Client, request: httpx.Request, deadline: Deadline) -> httpx.Response:
    """``client.send(request)``, each of its timeouts capped by the time left (on the request's own timeout
    extension, which is what httpx's ``timeout=`` sets: starlette's TestClient warns on that argument)."""
    request.extensions["timeout"] = deadline.attempt_timeout(client.timeout).as_dict()
    return client.send(request)


def _capped_s(timeout_s: float | None, late: type[Exception]) -> float | None:
    """``timeout_s`` capped by the time left of the call in progress; ``late`` raised when none is left."""
    ends_at_s = _CALL_ENDS_AT_S.get()
    if ends_at_s is None:
        return timeout_s
    left_s = ends_at_s - time.monotonic()
    if left_s <= 0:
        raise late("no answer before the call's deadline")
    return left_s if timeout_s is None else min(timeout_s, left_s)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the deadline of the call in progress."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped_s(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped_s(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        capped = _capped_s(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, capped))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync sockets, their streams wrapped in :class:`_DeadlineStream`."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped_s(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(host, port, capped, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        capped = _capped_s(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, capped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport with httpx's default pool, over :class:`_DeadlineBackend` (httpx has no option for a
    network backend, so its pool is replaced; the exception mapping and the rest stay httpx's). ``proxy``: an
    http(s):// proxy every request goes through, over the same backend."""

    def __init__(self, proxy: httpx.Proxy | None = None) -> None:
        super().__init__()
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's defaults
        shared: dict[str, Any] = {
            "ssl_context": httpx.create_ssl_context(),
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "network_backend": _DeadlineBackend(),
        }
        if proxy is None:
            self._pool = httpcore.ConnectionPool(**shared)
            return
        target = proxy.url
        self._pool = httpcore.HTTPProxy(  # as httpx's own transport makes it: the proxy's credentials too
            proxy_url=httpcore.URL(
                scheme=target.raw_scheme, host=target.raw_host, port=target.port, target=target.raw_path
            ),
            proxy_auth=proxy.raw_auth,
            proxy_headers=proxy.headers.raw,
            proxy_ssl_context=proxy.ssl_context,
            **shared,
        )


def deadline_transport(url: str) -> httpx.BaseTransport:
    """The transport of a client of the door at ``url``: :class:`DeadlineTransport`, through the proxy the
    environment names for it (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, unless ``NO_PROXY`` names its host,
    or its host and port) when there is one, its credentials sent as httpx sends them. A client given a transport
    no longer reads those variables itself: reviews found the first version sending every request past the proxy,
    the next dropping the deadline wherever a proxy variable was set, the next dropping the proxy's credentials. A
    SOCKS proxy goes through httpx's own transport: the deadline then caps each read, not the answer."""
    parsed = httpx.URL(url)
    proxies = urllib.request.getproxies()
    given = proxies.get(parsed.scheme) or proxies.get("all")
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    # NO_PROXY may name the host and port, or the host alone (an IPv6 one without brackets: "::1")
    if not given or any(
        urllib.request.proxy_bypass(name)
        for name in (f"{host}:{parsed.port}" if parsed.port else host, parsed.host)
    ):
        return DeadlineTransport()
    try:
        proxy = httpx.Proxy(given if "://" in given else f"http://{given}")  # "proxy:3128", as httpx reads it
    except (httpx.InvalidURL, ValueError):
        raise ValueError("the environment's proxy variable for the door is not a URL (not shown)") from None
    if proxy.url.scheme in ("http", "https"):
        return DeadlineTransport(proxy)
    return httpx.HTTPTransport(proxy=proxy)
