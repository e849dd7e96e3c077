"""Pieces every HTTP router shares: the error body, and reaching the app's producer and settings."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from producers._client import Producer
from worker.settings import Settings

__all__ = ["error_response", "parse_body", "producer_of", "settings_of"]

M = TypeVar("M", bound=BaseModel)


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    """``{"error": {"code", "message", "field"?}}`` with the status code."""
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status)


def producer_of(request: Request) -> Producer:
    producer: Producer = request.app.state.producer
    return producer


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def parse_body(request: Request, model: type[M]) -> M | JSONResponse:
    """Decode and validate a JSON body; an error response (422 naming the field) instead of raising."""
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(422, "invalid_json", f"request body is not valid JSON: {exc}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or None
        kind = first.get("type", "")
        if kind == "missing":
            return error_response(422, "missing_field", f"{field} is required", field)
        if kind == "extra_forbidden":
            return error_response(422, "unknown_field", f"{field} is not a field of this request", field)
        return error_response(422, "invalid_field", f"{field}: {first.get('msg')}", field)
