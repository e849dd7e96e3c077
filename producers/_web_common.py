"""Pieces every HTTP router shares: the error body, and reaching the app's producer and settings."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from producers._client import Producer
from worker.settings import Settings

__all__ = ["error_response", "producer_of", "settings_of"]


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
