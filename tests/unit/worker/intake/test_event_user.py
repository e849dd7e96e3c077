"""An event's user (worker/intake/source_event.py ``resolve_user``): named by its ``userId``, its payload's ``userId`` or a
field a plugin's handlers read a user from; every one of them that names a user must name the same one."""

from __future__ import annotations

from typing import Any

import pytest

from worker.intake.source_event import InvalidEvent, SourceEvent, resolve_user

PATHS = ["selfIteration.userId"]


def _event(payload: dict[str, Any], **fields: Any) -> SourceEvent:
    return SourceEvent.model_validate({"sourceType": "t", "sourceId": "s1", "payload": payload, **fields})


@pytest.mark.parametrize(
    ("payload", "fields", "user"),
    [
        ({}, {}, None),
        ({}, {"userId": "u1"}, "u1"),
        ({"userId": "u1"}, {}, "u1"),
        ({"selfIteration": {"userId": "u1"}}, {}, "u1"),
        ({"userId": "u1", "selfIteration": {"userId": "u1"}}, {"userId": "u1"}, "u1"),
        ({"selfIteration": "not an object"}, {"userId": "u1"}, "u1"),
    ],
)
def test_the_user_is_whichever_field_names_it(
    payload: dict[str, Any], fields: dict[str, Any], user: str | None
) -> None:
    assert resolve_user(_event(payload, **fields), PATHS) == user


@pytest.mark.parametrize(
    ("payload", "fields", "field"),
    [
        ({"userId": "u2"}, {"userId": "u1"}, "payload.userId"),
        ({"selfIteration": {"userId": "u2"}}, {"userId": "u1"}, "payload.selfIteration.userId"),
        ({"userId": "u1", "selfIteration": {"userId": "u2"}}, {}, "payload.selfIteration.userId"),
    ],
)
def test_a_field_naming_another_user_is_refused_by_name(
    payload: dict[str, Any], fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidEvent) as refused:
        resolve_user(_event(payload, **fields), PATHS, prefix="events[2]")
    assert refused.value.error.code == "user_mismatch"
    assert refused.value.error.field == f"events[2].{field}"


def test_a_user_field_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidEvent) as refused:
        resolve_user(_event({"selfIteration": {"userId": 7}}), PATHS)
    assert (refused.value.error.code, refused.value.error.field) == (
        "invalid_field",
        "payload.selfIteration.userId",
    )


def test_fields_a_plugin_does_not_declare_are_not_users() -> None:
    assert resolve_user(_event({"selfIteration": {"userId": "u2"}}, userId="u1"), []) == "u1"
