"""``GET /v1/dlq`` pages by cursor: an event that dies or leaves between two pages neither repeats nor skips one
(``offset`` does both). The web app alone against a real Redis, the dead events written as the store keeps them
(a record and its DLQ entry), several of them dying in the same millisecond; with 4 scope buckets too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from worker.keys.layout import Keys

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

DIED_MS = 1_700_000_000_000


@pytest.fixture
def api(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as client:
        yield client


def _bury(redis_client: Redis, tenant_keys: Keys, names: list[str], died_ms: int) -> None:
    """Dead events ``evt_<name>`` in scopes of their own (so, with buckets, in several buckets), all dying at
    ``died_ms``: one millisecond, ordered by id within it."""
    pipe = redis_client.pipeline(transaction=False)
    for name in names:
        b = tenant_keys.for_scope(f"topic:{name}")
        record = {"state": "dead", "scopeKey": f"topic:{name}", "sourceType": "test.flaky", "sourceId": name}
        pipe.hset(b.event(f"evt_{name}"), mapping={**record, "attempts": 1, "error": "x", "deadAt": died_ms})
        pipe.zadd(b.dlq, {f"evt_{name}": died_ms})
    pipe.execute()


def _page(api: TestClient, **params: Any) -> dict[str, Any]:
    answer = api.get("/v1/dlq", params={"limit": 3, **params})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_death_between_two_pages_neither_repeats_nor_skips_an_event(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    # Given six dead events, three of them in one millisecond
    _bury(redis_client, tenant_keys, ["a", "b", "c"], DIED_MS)
    _bury(redis_client, tenant_keys, ["d", "e", "f"], DIED_MS + 1)

    # When the first page is read, another event dies, and the cursor's page is read
    first = _page(api)
    _bury(redis_client, tenant_keys, ["late"], DIED_MS + 2)
    second = _page(api, cursor=first["cursor"])

    # Then the two pages hold the six, latest first, each once; the newcomer is on neither (it is newer)
    ids = [e["eventId"] for e in first["events"] + second["events"]]
    assert ids == ["evt_f", "evt_e", "evt_d", "evt_c", "evt_b", "evt_a"]
    assert "cursor" not in second and second["total"] == 7


def test_a_page_continues_inside_one_millisecond_and_past_an_event_that_left(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    _bury(redis_client, tenant_keys, ["a", "b", "c", "d", "e"], DIED_MS)
    first = _page(api)
    assert [e["eventId"] for e in first["events"]] == ["evt_e", "evt_d", "evt_c"]
    # the page's last event is redriven (it leaves the list) before the next page is read
    redis_client.zrem(tenant_keys.for_scope("topic:c").dlq, "evt_c")
    second = _page(api, cursor=first["cursor"])
    assert [e["eventId"] for e in second["events"]] == ["evt_b", "evt_a"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "nope"}, "cursor"),
        ({"cursor": "\u00b2:evt_a"}, "cursor"),  # a digit to str.isdigit, not to float(): it answered 500
        ({"cursor": "1:evt_a", "offset": 3}, "cursor"),
        ({"cursor": "x" * 401}, "cursor"),
    ],
)
def test_a_cursor_that_is_not_one_is_a_422_naming_it(
    api: TestClient, params: dict[str, Any], field: str
) -> None:
    answer = api.get("/v1/dlq", params=params)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text


def test_the_discarded_list_pages_by_cursor_too(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    _bury(redis_client, tenant_keys, ["a", "b", "c", "d"], DIED_MS)
    for name in ("a", "b", "c", "d"):
        answer = api.post("/v1/dlq/discard", json={"eventIds": [f"evt_{name}"], "reason": "test"})
        assert answer.json()["discarded"] == [f"evt_{name}"], answer.text
    first = _page(api, state="discarded")
    second = _page(api, state="discarded", cursor=first["cursor"])
    ids = [e["eventId"] for e in first["events"] + second["events"]]
    assert sorted(ids) == ["evt_a", "evt_b", "evt_c", "evt_d"] and len(set(ids)) == 4
    assert "cursor" not in second


def test_a_page_whose_events_are_all_gone_still_says_more_follow(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    """The cursor came from the last event shown: a page whose entries' events were all gone (erased, expired)
    had none, and said nothing followed it. It comes from the last entry read now."""
    _bury(redis_client, tenant_keys, ["a", "b", "c", "d", "e"], DIED_MS)
    for name in ("e", "d", "c"):  # their records are gone, their entries not yet
        redis_client.delete(tenant_keys.for_scope(f"topic:{name}").event(f"evt_{name}"))
    first = _page(api)
    assert first["events"] == [] and first["total"] == 5 and "cursor" in first
    assert [e["eventId"] for e in _page(api, cursor=first["cursor"])["events"]] == ["evt_b", "evt_a"]
