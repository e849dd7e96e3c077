"""The HTTP door: the FastAPI app (``create_web_app``), what every request passes (door, auth, principal, connections, strict JSON, access log), the receipt streams, the docs pages, and the routes (``routes/``)."""

from producers.http.app import create_web_app

__all__ = ["create_web_app"]
