"""The HTTP door: the FastAPI app (``create_web_app``), what every request passes (door, auth, principal, connections, strict JSON, access log), the receipt streams, the docs pages, the routes (``routes/``), and the door's settings section (``settings.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from producers.http.app import create_web_app

__all__ = ["create_web_app"]


def __getattr__(name: str) -> object:
    """``create_web_app``, imported on first use: every worker imports this package for the door's settings
    section (worker/runtime/assembly.py ``SECTIONS``) and has no use for the FastAPI app."""
    if name == "create_web_app":
        from producers.http.app import create_web_app

        return create_web_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
