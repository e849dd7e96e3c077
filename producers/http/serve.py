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

from typing import TYPE_CHECKING

from producers.http.settings import DoorSettings, door_settings
from worker.runtime.assembly import load_plugins
from worker.settings import Settings, SettingsError
from worker.telemetry.logs import configure_logging

if TYPE_CHECKING:
    from producers.http.app import BootChecks

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
    boot = run_boot_checks(settings)
    uvicorn.run(
        create_web_app(settings, door=door, boot=boot),
        host=door.host,
        port=door.port,
        http=door_protocol(ConnectionLimits.from_settings(door)),
        log_level="warning",
        access_log=False,  # ours: producers/http/access_log.py
    )
    return 0


def check_credentials(settings: Settings, door: DoorSettings) -> None:
    """Raise SettingsError when the web app must not serve with these settings (see the module doc)."""
    from producers.http.access.auth import bootstrap_key_of, check_can_serve
    from worker.keys.layout import Keys
    from worker.ops.credentials import CredentialStore
    from worker.store.client import redis_from_settings

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
