"""The event that records a ``POST /v1/route`` call without a scope key gets a scope of its own: ``route:`` and
the request id, or the made-up source id (``route:<uuid>``) as it is, not ``route:route:<uuid>``."""

from __future__ import annotations

from producers.http.routes.routing import _event


def test_a_request_id_names_its_scope() -> None:
    event = _event({"requestId": "req-1"}, {"messages": []})
    assert (event["sourceId"], event["scopeKey"]) == ("req-1", "route:req-1")


def test_a_made_up_id_is_its_own_scope() -> None:
    event = _event({}, {"messages": []})
    source_id = str(event["sourceId"])
    assert source_id.startswith("route:") and len(source_id) == len("route:") + 32
    assert event["scopeKey"] == source_id


def test_a_given_scope_key_wins() -> None:
    assert _event({"scopeKey": "session:s1"}, {"messages": []})["scopeKey"] == "session:s1"
