"""What a route call may carry (validate_route_input): finite numbers, confidences from 0 to 1, at most 256
external signals, a string request.model, and no key the surface does not read; each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from policies.routing import (
    MAX_EXTERNAL_SIGNALS,
    ROUTE_REQUEST_FIELDS,
    InvalidRouteInput,
    validate_route_input,
)

HUGE = 10**400  # a JSON integer beyond the float range: float() raises OverflowError


def _signal(**fields: Any) -> dict[str, Any]:
    return {"request": {"messages": []}, "externalSignals": [{"type": "domain", "name": "x", **fields}]}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_signal(value=HUGE), "externalSignals[0].value", "must be a finite number"),
        (_signal(confidence=HUGE), "externalSignals[0].confidence", "must be a finite number"),
        (_signal(value=-HUGE), "externalSignals[0].value", "must be a finite number"),
        (_signal(value=float("nan")), "externalSignals[0].value", "must be a finite number"),
        (_signal(confidence=float("inf")), "externalSignals[0].confidence", "must be a finite number"),
        (_signal(confidence=1e308), "externalSignals[0].confidence", "must be between 0 and 1"),
        (_signal(confidence=-0.1), "externalSignals[0].confidence", "must be between 0 and 1"),
        (_signal(confidence=1.5), "externalSignals[0].confidence", "must be between 0 and 1"),
        ({"request": {"model": 5}}, "request.model", "must be a string"),
        # a contract audit: each of these was routed as an empty conversation, every fact 0
        ({"request": {"messages": "hi"}}, "request.messages", "must be an array"),
        ({"request": {"messages": [1, 2]}}, "request.messages[0]", "must be an object"),
        ({"request": {"messages": [{"role": 5}]}}, "request.messages[0].role", "must be a string"),
        ({"request": {"messages": [], "tools": 5}}, "request.tools", "must be an array"),
        ({"request": {"functions": {}}}, "request.functions", "must be an array"),
        (
            {"request": {"system": 5}, "protocol": "anthropic-messages"},
            "request.system",
            "must be a string or an array",
        ),
        (
            {"request": {"messages": [{"role": "user"}, "x"]}, "protocol": "anthropic-messages"},
            "request.messages[1]",
            "must be an object",
        ),
        (
            {"request": {"input": 5}, "protocol": "openai-responses"},
            "request.input",
            "must be a string or an array",
        ),
        (
            {"request": {"input": [7]}, "protocol": "openai-responses"},
            "request.input[0]",
            "must be an object",
        ),
        # an audit (finding 5): the second entry's error was published while the first's match still decided
        (
            {
                "request": {},
                "externalSignals": [
                    {"type": "domain", "name": "math"},
                    {"type": "domain", "name": "physics"},
                    {"type": "domain", "name": "math", "error": "classifier timeout"},
                ],
            },
            "externalSignals[2].name",
            "domain:math is also externalSignals[0]",
        ),
        (
            {
                "request": {},
                "externalSignals": [{"type": "Domain", "name": "x"}, {"type": " domain ", "name": "x"}],
            },
            "externalSignals[1].name",
            "domain:x is also externalSignals[0]",
        ),
        (
            {
                "request": {},
                "externalSignals": [{"type": "d", "name": f"n{i}"} for i in range(MAX_EXTERNAL_SIGNALS + 1)],
            },
            "externalSignals",
            "at most 256",
        ),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], field: str, words: str) -> None:
    """Each refusal is an InvalidRouteInput naming the field; nothing overflows."""
    with pytest.raises(InvalidRouteInput) as refused:
        validate_route_input(body)
    assert refused.value.field == field and refused.value.code == "invalid_field"
    assert refused.value.message.startswith(f"{field}: ") and words in refused.value.message


def test_every_protocols_usual_shapes_are_accepted() -> None:
    """Content of any shape, null parts, a Responses input as a string, Anthropic's system as blocks."""
    validate_route_input(
        {"request": {"messages": [{"role": "user", "content": [{"type": "text"}]}], "tools": None}}
    )
    validate_route_input({"request": {"input": "hi", "tools": []}, "protocol": "openai-responses"})
    validate_route_input({"request": {"input": [{"type": "function_call"}]}, "protocol": "openai-responses"})
    anthropic = {"system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": "hi"}]}
    validate_route_input({"request": anthropic, "protocol": "anthropic-messages"})


def test_the_limits_themselves_are_accepted() -> None:
    """Confidence 0 and 1, a value of 1e308 (or an integer within the float range), and 256 signals pass."""
    validate_route_input(_signal(confidence=0, value=1e308))
    validate_route_input(_signal(confidence=1, value=10**300))
    many = [{"type": "d", "name": f"n{i}"} for i in range(MAX_EXTERNAL_SIGNALS)]
    assert len(validate_route_input({"request": {}, "externalSignals": many})[2]) == MAX_EXTERNAL_SIGNALS


def test_signals_that_differ_in_name_or_type_are_not_duplicates() -> None:
    """Names are compared as given (``Math`` is not ``math``), types as leaves match them; each may appear once."""
    signals = [
        {"type": "domain", "name": "math"},
        {"type": "domain", "name": "Math"},
        {"type": "topic", "name": "math"},
    ]
    assert validate_route_input({"request": {}, "externalSignals": signals})[2] == signals


def test_a_duplicate_is_named_under_the_prefix() -> None:
    """The chat.request handler names the payload's field for a duplicate too."""
    body = {"request": {}, "externalSignals": [{"type": "d", "name": "n"}, {"type": "d", "name": "n"}]}
    with pytest.raises(InvalidRouteInput) as refused:
        validate_route_input(body, prefix="payload.")
    assert refused.value.field == "payload.externalSignals[1].name"
    assert refused.value.message.startswith(
        "payload.externalSignals[1].name: d:n is also payload.externalSignals[0]"
    )


def test_unknown_keys_are_refused_only_where_asked() -> None:
    """With known_keys (POST /v1/route, the CLI) a misspelt key is refused as unknown_field; without (a
    chat.request payload, which may carry more) it is not."""
    body = {"request": {}, "externalSignal": [{"type": "a", "name": "b"}]}
    with pytest.raises(InvalidRouteInput) as refused:
        validate_route_input(body, known_keys=ROUTE_REQUEST_FIELDS)
    assert refused.value.field == "externalSignal" and refused.value.code == "unknown_field"
    assert validate_route_input(body)[2] == []


def test_the_prefix_names_the_payload_field() -> None:
    """The chat.request handler's prefix names the payload's field."""
    with pytest.raises(InvalidRouteInput) as refused:
        validate_route_input(_signal(value=HUGE), prefix="payload.")
    assert refused.value.field == "payload.externalSignals[0].value"


@pytest.mark.parametrize(
    "body",
    [
        {"request": {"messages": "hi"}},
        {"request": {"messages": [1]}},
        {"request": {"messages": [], "tools": 5}},
        {"request": {"input": 5}, "protocol": "openai-responses"},
        {"request": {"system": 5}, "protocol": "anthropic-messages"},
    ],
)
def test_a_chat_request_event_of_that_shape_is_refused_at_the_door_too(body: dict[str, Any]) -> None:
    """A review: the door's chat.request payload schema took these, and its handler then refused them: an event
    admitted and dead-lettered. The payload schema refuses what the router refuses, naming the part."""
    from pydantic import ValidationError

    from policies.conversation import ChatRequestPayload
    from worker.intake.source_event import pydantic_error

    with pytest.raises(InvalidRouteInput) as routed:
        validate_route_input(body)
    with pytest.raises(ValidationError) as admitted:
        ChatRequestPayload.model_validate(body)
    error = pydantic_error(admitted.value.errors()[0], prefix="payload")  # as the door names it
    assert error.field == "payload.request"
    assert str(routed.value.field) in error.message
