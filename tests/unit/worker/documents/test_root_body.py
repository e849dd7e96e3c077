"""root_body writes a root event's stored body from its parts: byte for byte what stored_body makes of the Source's
JSON dict (the path the door took before), for any JSON payload and any of the optional fields; a nan or inf
(which JSON cannot hold) is left to the Source's serialiser."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.nodes import ChainRef, Source
from worker.documents.event_body import full_body, root_body, stored_body
from worker.intake.source_event import SourceEvent, payload_text, prepare

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
OPTIONAL = st.none() | st.text(min_size=1, max_size=12)


def _through_source(timestamp: int, payload: dict[str, Any], **ids: str | None) -> str:
    source = Source(
        source_id="s-1",
        source_type="bot.message.merged",
        scope_key="topic:t",
        timestamp=timestamp,
        payload=payload,
        chain=ChainRef(chain_id="chain:s-1", root_source_id="s-1"),
        event_id="evt_1",
        **ids,
    )
    return stored_body(source.to_json_dict())


@settings(max_examples=300, deadline=None)
@given(
    timestamp=st.integers(min_value=0, max_value=2**53),
    payload=st.dictionaries(st.text(max_size=10), JSON, max_size=5),
    user_id=OPTIONAL,
    agent_id=OPTIONAL,
    workspace_id=OPTIONAL,
    traceparent=OPTIONAL,
)
def test_the_same_bytes_as_through_the_source(
    timestamp: int,
    payload: dict[str, Any],
    user_id: str | None,
    agent_id: str | None,
    workspace_id: str | None,
    traceparent: str | None,
) -> None:
    ids = {"user_id": user_id, "agent_id": agent_id, "workspace_id": workspace_id, "traceparent": traceparent}
    text = payload_text(payload)
    assert text is not None
    assert root_body(timestamp, text, **ids) == _through_source(timestamp, payload, **ids)


def test_a_float_json_cannot_hold_takes_the_source_path() -> None:
    for value in (math.nan, math.inf, -math.inf):
        assert payload_text({"x": [value]}) is None
    prepared = prepare(
        SourceEvent.model_validate(
            {
                "sourceType": "bot.message.merged",
                "sourceId": "n",
                "scopeKey": "topic:n",
                "payload": {"x": math.inf},
            }
        ),
        now_ms=5,
    )
    assert prepared.body == '{"timestamp":5,"payload":{"x":null}}'


def test_the_worker_reads_back_the_whole_source() -> None:
    body = root_body(7, '{"message":"hé"}', user_id="u1", traceparent="00-ab-cd-01")
    whole = full_body(
        body, event_id="evt_1", scope_key="topic:t", source_type="bot.message.merged", source_id="s-1"
    )
    assert Source.model_validate_json(whole) == Source(
        source_id="s-1",
        source_type="bot.message.merged",
        scope_key="topic:t",
        timestamp=7,
        payload={"message": "hé"},
        chain=ChainRef(chain_id="chain:s-1", root_source_id="s-1"),
        event_id="evt_1",
        user_id="u1",
        traceparent="00-ab-cd-01",
    )


KEYS_OF_ANY_KIND = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)


@settings(max_examples=200, deadline=None)
@given(inner=st.dictionaries(KEYS_OF_ANY_KIND, JSON, max_size=4))
def test_a_nested_key_not_a_str_is_stored_as_the_source_writes_it(inner: dict[Any, Any]) -> None:
    """Only a Python caller can nest such a key (the top level is refused by the SourceEvent): json writes None as
    "null" where the Source's serialiser writes "None", so such a payload takes the Source's path."""
    event = SourceEvent.model_validate(
        {
            "sourceType": "bot.message.merged",
            "sourceId": "s-1",
            "scopeKey": "topic:t",
            "payload": {"x": inner},
        }
    )
    prepared = prepare(event, now_ms=5, payload_json=payload_text(event.payload))
    assert prepared.body == _through_source(5, event.payload)
