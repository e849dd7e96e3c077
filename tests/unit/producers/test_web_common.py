"""The one body rule of the HTTP routes (producers/http/web_common.py): JSON decoding, the pydantic-error mapper
with its dotted field paths, FastAPI's own parameter errors, and the error body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from producers.http.web_common import (
    FieldError,
    InvalidBody,
    decode_json,
    error_response,
    field_path,
    pydantic_error,
    request_validation_error,
)


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(min_length=1)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Item]
    count: int = Field(default=0, strict=True, ge=0)
    payload: dict[str, Any] | None = None


def _first(data: Any) -> dict[str, Any]:
    with pytest.raises(ValidationError) as caught:
        Body.model_validate(data)
    return dict(caught.value.errors(include_url=False)[0])


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, FieldError("missing_field", "items is required", "items")),
        (
            {"items": [], "extra": 1},
            FieldError("unknown_field", "extra is not a field of this request", "extra"),
        ),
        (
            {"items": [{"role": ""}]},
            FieldError(
                "invalid_field", "items.0.role: String should have at least 1 character", "items.0.role"
            ),
        ),
        ({"items": [3]}, FieldError("invalid_type", "items.0 must be a JSON object", "items.0")),
        (
            {"items": [], "payload": [1]},
            FieldError("invalid_type", "payload must be a JSON object", "payload"),
        ),
        (
            {"items": [], "count": -1},
            FieldError("invalid_field", "count: Input should be greater than or equal to 0", "count"),
        ),
    ],
)
def test_pydantic_error_names_the_field(data: Any, expected: FieldError) -> None:
    """Each kind of pydantic error maps to one code, a message naming the field, and its dotted path."""
    assert pydantic_error(_first(data)) == expected


def test_pydantic_error_under_a_prefix_and_model_name() -> None:
    """A prefix (a batch item) leads the path; a model name words the unknown-field message."""
    error = pydantic_error(_first({"items": [], "sorceId": 1}), prefix="events[3]", model_name="SourceEvent")
    assert error == FieldError(
        "unknown_field", "events[3].sorceId is not a SourceEvent field", "events[3].sorceId"
    )


def test_field_path() -> None:
    """Dotted, integers included; empty is None."""
    assert field_path(("messages", 0, "role")) == "messages.0.role"
    assert field_path(("sourceId",), "events[2]") == "events[2].sourceId"
    assert field_path(()) is None


@pytest.mark.parametrize(
    ("raw", "require_object", "message"),
    [
        (b'{"a": ', True, "request body is not valid JSON: "),
        (b"\xff", True, "request body is not valid JSON: "),
        (b"[1, 2]", True, "request body must be a JSON object"),
        (b'"text"', True, "request body must be a JSON object"),
    ],
)
def test_decode_json_rejects(raw: bytes, require_object: bool, message: str) -> None:
    """Malformed JSON, or a non-object where an object is required, is invalid_json with no field."""
    with pytest.raises(InvalidBody) as caught:
        decode_json(raw, require_object=require_object)
    assert caught.value.error.code == "invalid_json" and caught.value.error.field is None
    assert caught.value.error.message.startswith(message)


def test_decode_json_accepts() -> None:
    """An empty body reads as {}; any JSON value passes when no object is required."""
    assert decode_json(b"") == {}
    assert decode_json(b'{"a": 1}') == {"a": 1}
    assert decode_json(b"[1, 2]", require_object=False) == [1, 2]


def test_error_response_always_has_a_field() -> None:
    """The error body is always {code, message, field}; field is null when the error is not about one."""
    response = error_response(422, "invalid_json", "request body is not valid JSON: x")
    assert response.status_code == 422
    assert json.loads(bytes(response.body)) == {
        "error": {"code": "invalid_json", "message": "request body is not valid JSON: x", "field": None}
    }


def test_request_validation_error_uses_the_same_mapper() -> None:
    """FastAPI's own query-parameter errors answer the same 422 shape, the field without its source."""
    app = FastAPI()
    app.add_exception_handler(RequestValidationError, request_validation_error)  # type: ignore[arg-type]

    @app.get("/items")
    def items(limit: int = 5) -> dict[str, int]:
        return {"limit": limit}

    with TestClient(app) as client:
        response = client.get("/items", params={"limit": "many"})
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_field",
        "message": "limit: Input should be a valid integer, unable to parse string as an integer",
        "field": "limit",
    }
