"""No blocking I/O on the event loop: an ``async def`` endpoint or dependency of the web app must be on the
allow-list below (each entry checked to do only async or in-memory work); everything else is a plain ``def``,
which FastAPI runs in its threadpool. Redis (redis-py ``Redis``), the broker, files and the router are all
blocking, so a route that touches them is a ``def``, and its body is read by one of the allowed dependencies."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from starlette.routing import BaseRoute

from producers.http.app import create_web_app
from tests.support.routes import flat_routes

ASYNC_ALLOWED = {
    # FastAPI's OpenAPI document: rendered from memory. (/docs and /redoc are ours, plain defs:
    # producers/http/docs_pages.py.)
    "fastapi.applications.FastAPI.setup.<locals>.openapi",
    # Body readers (dependencies of def routes): ``await request.body()``, then json.loads and pydantic
    # validation in memory; they hand the route the value or the 422 to return.
    "producers.http.web_common.json_object",
    "producers.http.web_common.json_body.<locals>.body_as_model",
    # ... plus the session-id regex check.
    "producers.http.routes.session_access.session_body.<locals>.checked_session_body",
    # ... any JSON value; a body that is not JSON becomes kimi's ToolError, in memory.
    "producers.http.routes.sessions.dmail_arguments",
    # ... any JSON value, after the size limit read from the settings in app.state.
    "producers.http.routes.events.event_body",
}


def _dependencies(dependant: Any) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _dependencies(sub)


def _callables(routes: Sequence[BaseRoute]) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(route path, callable) for every endpoint and every dependency FastAPI will call."""
    for route in flat_routes(routes):
        path = str(getattr(route, "path", route))
        endpoint = getattr(route, "endpoint", None)
        if endpoint is not None:
            yield path, endpoint
        dependant = getattr(route, "dependant", None)
        if dependant is not None:
            for call in _dependencies(dependant):
                yield path, call


def _is_async(call: Callable[..., Any]) -> bool:
    target = call if inspect.isroutine(call) else type(call).__call__
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)


def _name(call: Callable[..., Any]) -> str:
    owner = call if inspect.isroutine(call) else type(call)
    return f"{owner.__module__}.{owner.__qualname__}"


def _async_callables(make_settings: Any) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path, call in _callables(create_web_app(make_settings()).routes):
        if _is_async(call):
            found.setdefault(_name(call), set()).add(path)
    return found


def test_no_async_endpoint_outside_the_allow_list(make_settings: Any) -> None:
    """Every async endpoint or dependency is allow-listed; the rest run in the threadpool."""
    found = _async_callables(make_settings)
    unexpected = {name: sorted(paths) for name, paths in found.items() if name not in ASYNC_ALLOWED}
    assert unexpected == {}, (
        "async def routes run on the event loop: make these plain `def` (or move their blocking calls to "
        f"asyncio.to_thread), or allow-list them with a reason if they only do async I/O: {unexpected}"
    )


def test_allow_list_names_only_callables_in_use(make_settings: Any) -> None:
    """The allow-list stays small and true: every entry is still an async callable of the app."""
    assert ASYNC_ALLOWED - set(_async_callables(make_settings)) == set()


def test_the_walk_sees_every_api_route(make_settings: Any) -> None:
    """The walk reaches the routers' routes (not only FastAPI's own), including a body route's dependency."""
    seen = {path for path, _ in _callables(create_web_app(make_settings()).routes)}
    assert {"/v1/events", "/v1/route", "/v1/sessions/{session_id}/signal", "/openapi.json"} <= seen
