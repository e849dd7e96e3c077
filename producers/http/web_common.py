"""Pieces every HTTP router shares: the one error body, the one JSON-body reader, the one mapper from a
pydantic error to ``{code, message, field}`` (the decoder itself is
producers/http/strict_json.py's ``decode_json``), and reaching the app's producer and settings.

Routes that touch Redis, the broker, files or the router are plain ``def`` (FastAPI runs them in its
threadpool, off the event loop). A ``def`` route cannot ``await request.body()``, so the body is read on the
event loop by the async dependencies made here (:func:`json_body`, :func:`json_object`): they await the body
and nothing else, and hand the route either the decoded value or the 422 to answer.

Body rules, for every route: an empty body reads as ``{}``; malformed JSON, or a non-object where an object
is required, is ``422 invalid_json`` with ``field: null``; a pydantic error is a 422 naming the first
offending field as a dotted path (``messages.0.role``) under an optional prefix (``events[3].sourceId``).

A route that declares its body as a FastAPI body parameter (its model then appears by reference in
``/openapi.json``, as the TypeScript client's types expect) belongs to a router with
``route_class=StrictJsonRoute``: FastAPI then decodes the body with the same decoder (:class:`StrictJsonRequest`),
and its refusals are the same 422s instead of FastAPI's ``400 There was an error parsing the body``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from producers.http.settings import DoorSettings
from producers.http.strict_json import (
    FieldError,
    InvalidBody,
    NotStrictBody,
    decode_json,
    nested_deeper_than,
)
from worker.intake.source_event import field_path
from worker.intake.source_event import pydantic_error as intake_pydantic_error
from worker.settings import Settings

if TYPE_CHECKING:  # annotations only: producers/sdk/producer.py may import this module without a cycle
    from producers.sdk.producer import Producer

__all__ = [
    "FieldError",
    "InvalidBody",
    "JsonObject",
    "NotStrictBody",
    "RefusedBody",
    "StrictJsonRequest",
    "StrictJsonRoute",
    "decode_json",
    "door_of",
    "error_response",
    "field_path",
    "field_response",
    "json_body",
    "json_object",
    "nested_deeper_than",
    "parse_body",
    "producer_of",
    "pydantic_error",
    "read_json",
    "request_validation_error",
    "settings_of",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
OFF_LOOP_BYTES = 64 * 1024  # bodies larger than this are decoded and validated in the threadpool


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    """``{"error": {"code", "message", "field"}}`` with the status code; ``field`` is null when no field."""
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status)


def field_response(error: FieldError, status: int = 422) -> JSONResponse:
    return error_response(status, error.code, error.message, error.field)


def pydantic_error(
    details: Mapping[str, Any], *, prefix: str = "", model_name: str | None = None
) -> FieldError:
    """The engine's one mapper (:func:`worker.intake.source_event.pydantic_error`), as a FieldError."""
    error = intake_pydantic_error(details, prefix=prefix, model_name=model_name)
    return FieldError(error.code, error.message, error.field)


async def request_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """Exception handler for FastAPI's own parameter checks (query, path): the same 422 as a body error. A
    path parameter is named as the API names it (``user_id`` in ``/v1/users/{user_id}`` is ``userId``)."""
    first = dict(exc.errors()[0])
    source, *loc = tuple(first.get("loc", ()))  # the source: "query", "path", "body"
    if source == "body" and not loc:  # the body as a whole (``[]``, ``5``, none): as every route answers it
        return field_response(FieldError("invalid_json", "request body must be a JSON object"))
    if source == "path" and loc and isinstance(loc[0], str):
        loc[0] = _camel(loc[0])
    first["loc"] = tuple(loc)
    return field_response(pydantic_error(first))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


async def read_json(request: Request, *, require_object: bool = True, max_bytes: int | None = None) -> Any:
    """The decoded body, or the error response to answer (413 over ``max_bytes``, 422 ``invalid_json``).

    A decoded JSON value is never a JSONResponse, so callers tell the two apart with ``isinstance``."""
    raw = await request.body()
    if max_bytes is not None and len(raw) > max_bytes:
        return error_response(
            413, "request_too_large", f"request body is {len(raw)} bytes; the limit is {max_bytes}"
        )
    try:
        return await _off_loop(raw, partial(decode_json, raw, require_object=require_object))
    except InvalidBody as exc:
        return field_response(exc.error)


async def _off_loop(raw: bytes, work: Callable[[], T]) -> T:
    """``work()`` on the event loop for a small body, in the threadpool for a large one: decoding and
    checking megabytes of JSON must not stall every other request of the process."""
    if len(raw) <= OFF_LOOP_BYTES:
        return work()
    return await anyio.to_thread.run_sync(work)


async def parse_body(request: Request, model: type[M]) -> M | JSONResponse:
    """The body validated as ``model``, or the 422 naming what is wrong (see :func:`pydantic_error`)."""
    data = await read_json(request)
    if isinstance(data, JSONResponse):
        return data
    try:
        return await _off_loop(await request.body(), partial(model.model_validate, data))
    except ValidationError as exc:
        return field_response(pydantic_error(exc.errors(include_url=False)[0]))


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M | JSONResponse]]:
    """A FastAPI dependency: the body as ``model``, or the 422 response (the route returns it as is)."""

    async def body_as_model(request: Request) -> M | JSONResponse:
        return await parse_body(request, model)

    return body_as_model


async def json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """A FastAPI dependency: the body as a JSON object, or the 422 ``invalid_json`` response."""
    data: dict[str, Any] | JSONResponse = await read_json(request)
    return data


JsonObject = Annotated[dict[str, Any] | JSONResponse, Depends(json_object)]
"""A route parameter: the body as a JSON object, or the 422 response to return as is."""


class RefusedBody(HTTPException):
    """A body :func:`decode_json` refused, raised out of FastAPI's body parsing: FastAPI passes an HTTPException
    through as it is (any other error there becomes its ``400 There was an error parsing the body``), and
    :class:`StrictJsonRoute` answers it as the door's 422."""

    def __init__(self, error: FieldError) -> None:
        super().__init__(422, error.message)
        self.error = error


class StrictJsonRequest(Request):
    """A request whose ``json()`` (what FastAPI decodes a body parameter with) is :func:`decode_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            try:
                self._json = await _off_loop(raw, partial(decode_json, raw, require_object=False))
            except InvalidBody as exc:
                raise RefusedBody(exc.error) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose FastAPI body parameter is decoded by :class:`StrictJsonRequest`, its refusals answered
    :func:`field_response` (see the module docstring); its OpenAPI document is FastAPI's own."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            try:
                return await handler(StrictJsonRequest(request.scope, request.receive))
            except RefusedBody as exc:
                return field_response(exc.error)

        return strict_handler


def producer_of(request: Request) -> Producer:
    producer: Producer = request.app.state.producer
    return producer


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def door_of(request: Request) -> DoorSettings:
    """The door's settings (producers/http/settings.py), set when the app is created."""
    door: DoorSettings = request.app.state.door
    return door
