"""The Python SDK's HTTP clients (``HttpProducer``, ``SessionClient``) against the web app served over real HTTP (``serve_web``).

* The credential: a key read from a CRLF file (``"$(cat key.txt)"``) is sent without its newline instead of
  failing with httpx's "Illegal header value b'Bearer <the key>\\r\\n'"; a ``SessionClient`` given its own httpx
  client still sends its token (it was dropped: 401).
* The door's rate limit is the SDK's ``OverLimit`` (with ``retry_after_s``), not a bare ``HTTPStatusError``; with
  ``max_retries`` the same call waits the answer's Retry-After and goes through.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from producers import CredentialRefused, HttpProducer, InvalidEvent, OverLimit, SessionClient

pytestmark = pytest.mark.integration

KEY = "as_bootstrap_" + "s" * 24
TRIES = 50  # requests sent until the door's 1/s rate refuses one (the second almost always is)


def _event(source_id: str) -> dict[str, Any]:
    return {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": "topic:sdk", "payload": {}}


def test_a_token_with_a_trailing_newline_is_sent_without_it(make_settings: Any, serve_web: Any) -> None:
    """``token=KEY + "\\r\\n"`` (a key read from a CRLF file) reaches the door as ``Bearer KEY``, for both clients."""
    _, url = serve_web(make_settings(bootstrap_key=KEY))
    producer = HttpProducer(url, token=KEY + "\r\n")
    assert producer.enqueue(_event("crlf-1")).status == "accepted"
    producer.close()
    sessions = SessionClient(url, token=f"  {KEY}\n")
    assert sessions.configure("sdk-crlf", dmailEnabled=True)["dmailEnabled"] is True
    sessions.close()


def test_a_session_client_given_a_client_still_sends_its_token(make_settings: Any, serve_web: Any) -> None:
    """``SessionClient(url, token=T, client=c)`` authenticates with T (the token was dropped: a 401)."""
    _, url = serve_web(make_settings(bootstrap_key=KEY))
    with httpx.Client(base_url=url) as own:
        sessions = SessionClient(url, token=KEY, client=own)
        assert sessions.configure("sdk-own-client", dmailEnabled=True)["dmailEnabled"] is True
        assert sessions.context("sdk-own-client")["messages"] == []


def test_the_door_rate_limit_is_over_limit_and_retried_after_its_wait(
    make_settings: Any, serve_web: Any
) -> None:
    """Over the credential's rate the door answers 429 ``rate_limited``: ``OverLimit`` with the answer's
    Retry-After without retries; with ``max_retries`` the call waits that long and is accepted."""
    _, url = serve_web(make_settings(bootstrap_key=KEY, rate_limit_per_s=1))
    once = HttpProducer(url, token=KEY, max_retries=0)
    with pytest.raises(OverLimit) as refused:
        for n in range(TRIES):
            once.enqueue(_event(f"rate-{n}"))
    assert refused.value.what == "rate_limited" and refused.value.retry_after_s >= 1
    once.close()
    statuses: list[int] = []
    hooks = {"response": [lambda response: statuses.append(response.status_code)]}
    patient = HttpProducer(url, token=KEY, client=httpx.Client(base_url=url, event_hooks=hooks))
    for n in range(TRIES):  # until one call met a 429: it waited and was sent again
        assert patient.enqueue(_event(f"patient-{n}")).status == "accepted"
        if 429 in statuses:
            break
    assert 429 in statuses and statuses[-1] == 202
    patient.close()


# every session route and the SessionClient call that speaks to it (docs/dmail.md: "the same calls over HTTP")
SESSION_CALLS = {
    ("PUT", "/v1/sessions/{session_id}"): "configure",
    ("GET", "/v1/sessions/{session_id}"): "settings",
    ("POST", "/v1/sessions/{session_id}/context/messages"): "append",
    ("POST", "/v1/sessions/{session_id}/context/checkpoint"): "checkpoint",
    ("POST", "/v1/sessions/{session_id}/context/revert"): "revert",
    ("POST", "/v1/sessions/{session_id}/context/clear"): "clear",
    ("POST", "/v1/sessions/{session_id}/context/compact"): "compact",
    ("GET", "/v1/sessions/{session_id}/context"): "context",
    ("POST", "/v1/sessions/{session_id}/dmail"): "send_dmail",
    ("POST", "/v1/sessions/{session_id}/steps/end"): "end_step",
    ("POST", "/v1/sessions/{session_id}/signal"): "signal",
    ("POST", "/v1/sessions/{session_id}/functions/activate"): "activate",
    ("POST", "/v1/sessions/{session_id}/functions/deactivate"): "deactivate",
    ("POST", "/v1/sessions/{session_id}/turn"): "turn",
    ("POST", "/v1/sessions/{session_id}/idle"): "idle",
    ("POST", "/v1/sessions/{session_id}/tool"): "tool_after",
    ("GET", "/v1/sessions/{session_id}/artifacts"): "artifacts",
    ("PUT", "/v1/sessions/{session_id}/artifacts/{name}"): "put_artifact",
    ("GET", "/v1/sessions/{session_id}/state"): "state",
    ("GET", "/v1/sessions/{session_id}/attention"): "attention",
}


def test_every_session_route_has_its_session_client_call(make_settings: Any) -> None:
    """An SDK audit found revert, clear, compact, deactivate, the settings, attention and artifacts missing from
    SessionClient though the routes existed; a new session route without its call fails here."""
    from fastapi.routing import APIRoute

    from producers.http.app import create_web_app
    from tests.support.routes import flat_routes

    routes = {
        (method, route.path)
        for route in flat_routes(create_web_app(make_settings()).routes)
        if isinstance(route, APIRoute) and route.path.startswith("/v1/sessions/{session_id}")
        for method in route.methods
    }
    assert routes == set(SESSION_CALLS)
    assert all(callable(getattr(SessionClient, name, None)) for name in SESSION_CALLS.values())


def test_the_context_and_artifact_calls_against_the_door(make_settings: Any, serve_web: Any) -> None:
    _, url = serve_web(make_settings(bootstrap_key=KEY))
    with SessionClient(url, token=KEY) as sessions:
        session = "sdk-calls"
        assert sessions.configure(session, dmailEnabled=False)["dmailEnabled"] is False
        assert sessions.settings(session)["dmailEnabled"] is False
        sessions.append(session, [{"role": "user", "content": "one"}])
        first = sessions.checkpoint(session)
        sessions.append(session, [{"role": "user", "content": "two"}])
        reverted = sessions.revert(session, first)
        assert [m["content"] for m in reverted["messages"]] == ["one"]
        compacted = sessions.compact(session, [{"role": "user", "content": "summary"}])
        assert [m["content"] for m in compacted["messages"]] == ["summary"]
        assert sessions.clear(session)["messages"] == []
        assert sessions.put_artifact(session, "plan", "ship it") == {"name": "plan", "content": "ship it"}
        assert sessions.artifacts(session) == {"plan": "ship it"}
        assert sessions.attention(session) == []
        # an audit: ".." reached the settings route and "." another; "a/b" a 404. Dots are names; "/" is refused
        for name in (".", ".."):
            assert sessions.put_artifact(session, name, "dots") == {"name": name, "content": "dots"}
        assert sessions.artifacts(session) == {"plan": "ship it", ".": "dots", "..": "dots"}
        for name in ("a/b", ""):
            with pytest.raises(InvalidEvent) as refused:
                sessions.put_artifact(session, name, "x")
            assert refused.value.error.field == "name"


def test_http_producer_reads_an_events_status_as_the_direct_producer_does(
    make_settings: Any, serve_web: Any
) -> None:
    """``HttpProducer.status``: the status record by event id or by source id, None for an event the tenant does
    not have, and the credential's refusal as the enqueue's (``InvalidEvent``, 401). The direct ``Producer`` had
    it; over HTTP an app had to write its own GET (a plugin developer's walk)."""
    settings = make_settings(bootstrap_key=KEY)
    _, url = serve_web(settings)
    with HttpProducer(url, token=KEY) as producer:
        sent = producer.enqueue(_event("status-1"))
        by_id = producer.status(sent.event_id)
        assert by_id is not None and by_id["eventId"] == sent.event_id and by_id["status"] == "queued"
        by_source = producer.status("status-1")
        assert by_source is not None and by_source["eventId"] == sent.event_id
        assert producer.status("evt_" + "0" * 26) is None and producer.status("no-such-source") is None
    with HttpProducer(url, token="as_wrong_" + "x" * 24) as stranger, pytest.raises(InvalidEvent) as refused:
        stranger.status(sent.event_id)
    assert refused.value.status_code == 401 and isinstance(refused.value, CredentialRefused)
