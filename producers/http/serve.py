"""Serving the web app with uvicorn (``agent-signal web``).

Secure by default: on a non-loopback ``AGENT_SIGNAL_HOST`` without any credential configured (no
``AGENT_SIGNAL_BOOTSTRAP_KEY``, no key created) the command stops before serving, with one line naming the
fix; the app's lifespan checks the same for other ASGI servers (producers/http/auth.py). Connections are capped and
a request's head and body have deadlines (producers/http/connections.py: uvicorn's own settings have neither).
"""

from __future__ import annotations

from producers.http.settings import DoorSettings, door_settings
from worker.runtime.assembly import load_plugins
from worker.settings import Settings
from worker.telemetry.logs import configure_logging

__all__ = ["serve_web"]


def serve_web(settings: Settings, *, loglevel: str = "INFO") -> int:
    import uvicorn

    from producers.http.app import create_web_app
    from producers.http.connections import ConnectionLimits, door_protocol

    configure_logging(env=settings.env, level=loglevel, fmt=settings.log_format)
    settings.require_redis_url()
    load_plugins(settings)  # unknown settings and broken plugins stop here, as one line, before serving
    door = door_settings(settings)
    check_credentials(settings, door)
    uvicorn.run(
        create_web_app(settings, door=door),
        host=door.host,
        port=door.port,
        http=door_protocol(ConnectionLimits.from_settings(door)),
        log_level="warning",
        access_log=False,  # ours: producers/http/access_log.py
    )
    return 0


def check_credentials(settings: Settings, door: DoorSettings) -> None:
    """Raise SettingsError when the web app must not serve with these settings (see the module doc)."""
    from producers.http.auth import bootstrap_key_of, check_can_serve
    from worker.keys.layout import Keys
    from worker.ops.credentials import CredentialStore
    from worker.store.client import redis_from_settings

    client = redis_from_settings(settings)
    try:
        store = CredentialStore(client, Keys(settings.key_prefix), bootstrap_key=bootstrap_key_of(door))
        check_can_serve(door, store)
    finally:
        client.close()
