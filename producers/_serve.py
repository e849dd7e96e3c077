"""Serving the web app with uvicorn (``agent-signal web``)."""

from __future__ import annotations

from worker.logs import configure_logging
from worker.plugins import load_plugins
from worker.settings import Settings

__all__ = ["serve_web"]


def serve_web(settings: Settings) -> int:
    import uvicorn

    from producers._http import create_web_app

    configure_logging(env=settings.env, fmt=settings.log_format)
    settings.require_redis_url()
    load_plugins(settings)  # unknown settings and broken plugins stop here, as one line, before serving
    uvicorn.run(create_web_app(settings), host=settings.host, port=settings.port, log_level="warning")
    return 0
