"""The API docs pages without a CDN: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, their JavaScript, CSS and
icon served from ``producers/http/docs_assets/`` (vendored upstream bundles: swagger-ui-dist 5 and redoc 2, the same
major versions FastAPI loads from jsdelivr; versions, checksums and licences in docs_assets/README.md).

``install_docs(app)`` expects an app built with ``docs_url=None, redoc_url=None`` (FastAPI's CDN pages off)
and registers:

* ``/docs`` and ``/redoc``: the pages, behind :func:`producers.http.access.ops.ops_access` (open per
  ``AGENT_SIGNAL_OPS_OPEN``, else a ``read`` key), like ``/openapi.json`` which they load.
* ``/docs-assets/{name}``: the vendored files, public (they are the same for everybody and hold no data), so
  the pages work whenever they are reachable.
* ``/favicon.ico``: the same icon (PNG), public, for browsers that ask for it on their own.

It then sets ``app.docs_url`` and ``app.redoc_url`` to the pages' paths: the auth middleware's operations paths
and the door's docs Content-Security-Policy (producers/http/access/auth.py, producers/http/door.py) read those attributes.
FastAPI registers its own pages only in its constructor, so setting them afterwards adds no route.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from producers.http.access.ops import ops_access
from producers.http.access.principal import public
from producers.http.web_common import error_response

__all__ = ["ASSETS", "ASSETS_DIR", "ASSETS_PATH", "DOCS_PATH", "FAVICON_PATH", "REDOC_PATH", "install_docs"]

ASSETS_DIR = Path(__file__).resolve().parent / "docs_assets"
ASSETS_PATH = "/docs-assets"
DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
FAVICON_PATH = "/favicon.ico"
# The files served, and their content types (nothing else in the directory is reachable).
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
# Swagger UI's online validator badge would call validator.swagger.io with our document's URL: off.
SWAGGER_PARAMETERS = {"validatorUrl": None}


def _root(request: Request) -> str:
    """The app's mount path (``root_path``) without a trailing slash: URLs in the pages start with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _openapi_url(request: Request) -> str:
    return _root(request) + str(request.app.openapi_url or "/openapi.json")


def _with_lang(page: HTMLResponse) -> HTMLResponse:
    """FastAPI's page with ``<html lang="en">``: its bare ``<html>`` names no language, so a screen reader
    guesses how to pronounce it (WCAG 3.1.1)."""
    html = bytes(page.body).decode().replace("<html>", '<html lang="en">', 1)
    return HTMLResponse(html, status_code=page.status_code)


def install_docs(app: FastAPI) -> None:
    """Register ``/docs``, ``/redoc`` and ``/docs-assets/{name}`` on ``app`` (see the module docstring)."""

    @app.get(DOCS_PATH, include_in_schema=False, dependencies=[Depends(ops_access)])
    def swagger_ui(request: Request) -> HTMLResponse:
        assets = _root(request) + ASSETS_PATH
        page = get_swagger_ui_html(
            openapi_url=_openapi_url(request),
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            oauth2_redirect_url=None,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
        return _with_lang(page)

    @app.get(REDOC_PATH, include_in_schema=False, dependencies=[Depends(ops_access)])
    def redoc(request: Request) -> HTMLResponse:
        assets = _root(request) + ASSETS_PATH
        page = get_redoc_html(
            openapi_url=_openapi_url(request),
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,
        )
        return _with_lang(page)

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False, dependencies=[Depends(public)])
    def docs_asset(name: str) -> Response:
        if name not in ASSETS:
            return error_response(404, "not_found", f"no docs asset {name!r}")
        return FileResponse(ASSETS_DIR / name, media_type=ASSETS[name])

    @app.get(FAVICON_PATH, include_in_schema=False, dependencies=[Depends(public)])
    def favicon() -> Response:
        """Browsers ask for /favicon.ico on their own (the console, the JSON answers): the packaged icon, not
        a 404 in the access log on every visit."""
        return FileResponse(ASSETS_DIR / "favicon.png", media_type="image/png")

    app.docs_url, app.redoc_url = DOCS_PATH, REDOC_PATH
