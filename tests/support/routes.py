"""The app's route table, flattened (the async-route check and the security walk both read every route)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from starlette.routing import BaseRoute

__all__ = ["flat_routes"]


def flat_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route, with included routers opened (FastAPI >= 0.16x keeps them as ``_IncludedRouter``)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        nested = included.routes if included is not None else getattr(route, "routes", None)
        if nested is not None:
            yield from flat_routes(nested)
        else:
            yield route
