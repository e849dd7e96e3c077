"""``GET /v1/scopes`` pages by scope key: past the page size it says so (``cursor``, ``total``) and the cursor
reaches every scope, stuck or paused ones at the end of the alphabet included. The web app alone (no worker),
against a real Redis: what is sent stays queued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPES = [f"topic:paged-{n:03d}" for n in range(258)]


@pytest.fixture
def api(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as client:
        yield client


def _send_one_per_scope(client: TestClient, scopes: list[str]) -> None:
    events = [
        {"sourceType": "test.timeline", "sourceId": f"paged-{n}", "scopeKey": scope, "payload": {}}
        for n, scope in enumerate(scopes)
    ]
    answer = client.post("/v1/events", json={"events": events})
    assert answer.status_code == 202, answer.text


def _get(client: TestClient, **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/scopes", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_the_scopes_list_pages_past_its_page_size(api: TestClient) -> None:
    """258 scopes with queued events: the first page holds the default 200 by scope key with ``total`` 258 and a
    ``cursor`` (its last scope key); the cursor's page holds the other 58 and no cursor; both together are every
    scope once, in order."""
    # Given 258 scopes with a queued event each
    _send_one_per_scope(api, SCOPES)

    # When the list is read without a limit, then from its cursor
    first = _get(api)
    second = _get(api, cursor=first["cursor"])

    # Then the first page says more follow, and the cursor reaches the rest
    assert [s["scopeKey"] for s in first["scopes"]] == SCOPES[:200]
    assert first["total"] == 258 and first["cursor"] == SCOPES[199]
    assert [s["scopeKey"] for s in second["scopes"]] == SCOPES[200:]
    assert second["total"] == 258 and "cursor" not in second
    assert all(s["inboxDepth"] == 1 and s["paused"] is False for s in first["scopes"] + second["scopes"])


def test_a_filtered_list_pages_with_its_own_total(api: TestClient) -> None:
    """With ``state``, the total and the cursor count only the scopes in that state: paused scopes at the end
    of the alphabet are reached page by page (``limit`` 2)."""
    _send_one_per_scope(api, SCOPES)
    paused = SCOPES[-3:]
    for scope in paused:
        assert api.post(f"/v1/scopes/{scope}/pause").status_code == 200

    page = _get(api, state="paused", limit=2)
    assert [s["scopeKey"] for s in page["scopes"]] == paused[:2]
    assert page["total"] == 3 and page["cursor"] == paused[1]
    rest = _get(api, state="paused", limit=2, cursor=page["cursor"])
    assert [s["scopeKey"] for s in rest["scopes"]] == paused[2:] and "cursor" not in rest
    assert _get(api, limit=1000)["total"] == 258 and "cursor" not in _get(api, limit=1000)
    assert _get(api, cursor=SCOPES[-1]) == {"scopes": [], "total": 258}


def test_a_page_of_every_state_reads_its_own_scopes_only(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``state`` a page reads the states of the scopes it shows (a chunk at a time), not of every scope
    listed: a tenant of 100,000 scopes read them all on every refresh of the console's first page. ``total``
    counts the scopes listed, and a scope drained since it was listed is skipped, its place taken by the next."""
    from worker.ops import scope_control

    _send_one_per_scope(api, SCOPES)
    producer = api.app.state.producer  # type: ignore[attr-defined]
    drained = SCOPES[1]
    producer.store.client.delete(producer.keys.for_scope(drained).inbox(drained))  # still listed, inbox empty
    probed: list[int] = []
    run_batch = producer.store.scripts.run_batch

    def counted(calls: list[Any]) -> list[Any]:
        probed.extend(len(c.probes) for c in calls if isinstance(c, scope_control.ScopeStates))
        return list(run_batch(calls))

    monkeypatch.setattr(producer.store.scripts, "run_batch", counted)
    page = _get(api, limit=3)
    assert [s["scopeKey"] for s in page["scopes"]] == [SCOPES[0], *SCOPES[2:4]]
    assert page["cursor"] == SCOPES[3] and page["total"] == 258 - 1
    assert 0 < sum(probed) <= scope_control.PROBE_CHUNK  # one chunk, not 258 scopes


def test_a_scope_key_longer_than_an_id_is_a_cursor_too(api: TestClient) -> None:
    """A derived scope key (``topic:`` and a 256-character topicId) past an id's 256 characters ended a page,
    and its cursor was a 422: the scopes after it were unreachable again."""
    long_topic = "t" * 256
    events = [
        {"sourceType": "test.timeline", "sourceId": "long-1", "payload": {"topicId": long_topic}},
        {"sourceType": "test.timeline", "sourceId": "long-2", "scopeKey": "zz:after", "payload": {}},
    ]
    assert api.post("/v1/events", json={"events": events}).status_code == 202
    first = _get(api, limit=1)
    assert (
        first["scopes"][0]["scopeKey"] == f"topic:{long_topic}" and first["cursor"] == f"topic:{long_topic}"
    )
    assert [s["scopeKey"] for s in _get(api, limit=1, cursor=first["cursor"])["scopes"]] == ["zz:after"]


def test_a_scope_key_longer_than_an_id_is_paused_resumed_and_filtered(api: TestClient) -> None:
    """Its page listed it, but Pause and Resume (and the runs page's scopeKey filter) answered 422: at most 256
    characters, an id's bound, which a derived scope key passes."""
    long_key = f"topic:{'t' * 256}"
    event = {"sourceType": "test.timeline", "sourceId": "long-3", "payload": {"topicId": "t" * 256}}
    assert api.post("/v1/events", json=event).status_code == 202
    for verb in ("pause", "resume"):
        answer = api.post(f"/v1/scopes/{long_key}/{verb}")
        assert answer.status_code == 200 and answer.json()["changed"] is True, (verb, answer.text)
    listed = api.get("/v1/events", params={"scopeKey": long_key})
    assert listed.status_code == 200 and len(listed.json()["events"]) == 1, listed.text
