"""Serving the web app with uvicorn (``agent-signal web``).

Secure by default: on a non-loopback ``AGENT_SIGNAL_HOST`` without any credential configured (no
``AGENT_SIGNAL_BOOTSTRAP_KEY``, no key created) the command stops before serving, with one line naming the
fix; the app's lifespan checks the same for other ASGI servers (producers/http/access/auth.py). The app's boot checks
(producers/http/app.py ``check_boot``: an evicting Redis, a broken function definition) are made here too, before
uvicorn starts, so that a refusal is one line (exit 2) and not uvicorn's traceback of a failed startup; the app is
handed their result and does not make them again. Connections are capped and
a request's head and body have deadlines (producers/http/connections.py: uvicorn's own settings have neither).
"""

from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING

from producers.http.settings import DoorSettings, door_settings
from worker.runtime.assembly import load_plugins
from worker.settings import Settings, SettingsError
from worker.telemetry.logs import configure_logging

if TYPE_CHECKING:
    from producers.http.app import BootChecks

__all__ = ["serve_web"]


def serve_web(settings: Settings, *, loglevel: str = "INFO") -> int:
    settings.require_redis_url()
    door = door_settings(settings)
    sockets = bound_sockets(door.host, door.port)
    try:
        configure_logging(env=settings.env, level=loglevel, fmt=settings.log_format)
        load_plugins(settings)  # unknown settings and broken plugins stop here, as one line, before serving
        check_credentials(settings, door)
        boot = run_boot_checks(settings)
        _serve(settings, door, boot, sockets)
    finally:
        for sock in sockets:
            sock.close()
    return 0


def _serve(settings: Settings, door: DoorSettings, boot: BootChecks, sockets: list[socket.socket]) -> None:
    """Build the app's producer (its plugins' services: a factory that raises is a PluginLoadError here, one
    line, not uvicorn's traceback of a failed startup) and serve until stopped."""
    import uvicorn

    from producers.http.app import create_web_app
    from producers.http.connections import ConnectionLimits, door_protocol
    from producers.sdk.producer import Producer
    from worker.telemetry.recorder import configure_telemetry

    telemetry = configure_telemetry(settings, service_name="agent-signal-web")
    try:
        producer = Producer(settings, telemetry=telemetry)
        try:
            app = create_web_app(settings, producer=producer, door=door, boot=boot, telemetry=telemetry)
            config = uvicorn.Config(
                app,
                http=door_protocol(ConnectionLimits.from_settings(door)),
                log_level="warning",
                access_log=False,  # ours: producers/http/access_log.py
            )
            uvicorn.Server(config).run(sockets=sockets)
        finally:
            producer.close()
    finally:
        telemetry.shutdown()


def bound_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``host``:``port``, bound before the boot checks: a port in use, or a host that is no
    address of this machine, is a SettingsError naming ``PORT`` or ``AGENT_SIGNAL_HOST`` (exit 2), not uvicorn's
    log line and exit 3 after every check had run. As asyncio binds for uvicorn: every address the host resolves
    to (``localhost`` may be ``::1`` and ``127.0.0.1``), ``""`` every interface, and an IPv6 socket IPv6 only."""
    name = host.strip("[]") or None  # "" and "[::]" are every interface (producers/http/door.py)
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise SettingsError(
            f"AGENT_SIGNAL_HOST {host!r} is no address to listen on ({exc.strerror})"
        ) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this machine lacks (IPv6 off): skipped, as asyncio skips it
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)  # uvicorn's backlog
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SettingsError(
                f"PORT {port} on {host} is in use: stop what listens there, or set PORT"
            ) from None
        raise SettingsError(
            f"cannot listen on AGENT_SIGNAL_HOST {host!r}, PORT {port}: {exc.strerror}"
        ) from None
    return sockets


def check_credentials(settings: Settings, door: DoorSettings) -> None:
    """Raise SettingsError when the web app must not serve with these settings (see the module doc)."""
    from producers.http.access.auth import bootstrap_key_of, check_can_serve
    from worker.keys.layout import Keys
    from worker.ops.credentials import CredentialStore
    from worker.store.server.client import redis_from_settings

    client = redis_from_settings(settings)
    try:
        store = CredentialStore(client, Keys(settings.key_prefix), bootstrap_key=bootstrap_key_of(door))
        check_can_serve(door, store)
    finally:
        client.close()


def run_boot_checks(settings: Settings) -> BootChecks:
    """The app's boot checks (producers/http/app.py ``check_boot``), made before serving: an evicting Redis is its
    UnsafeStore (a SettingsError naming the policy and the fix), broken function definitions a SettingsError naming
    ``AGENT_SIGNAL_FUNCTIONS_DIR`` and each problem (``<file>: <field>: <problem>``)."""
    from producers.http.app import check_boot
    from sessions.functions import FunctionLoadError

    try:
        return check_boot(settings)
    except FunctionLoadError as exc:
        raise SettingsError(
            "refusing to start: AGENT_SIGNAL_FUNCTIONS_DIR: " + "; ".join(exc.errors or [str(exc)])
        ) from None
