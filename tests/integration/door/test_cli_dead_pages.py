"""``dlq redrive --all`` and ``dlq discard --all`` over HTTP (producers/cli/console/dead_letters.py): one request
for every dead event outlasted the CLI's 30 s timeout near a hundred thousand of them; they now go a page of
``GET /v1/dlq`` at a time, followed by its cursor, the count on stderr. Real Redis, the real web app (in process),
dead events made by a real drain; the page size made small so that five events take three pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers import Producer
from producers.cli.console import dead_letters
from producers.cli.reach.target import Api, Target
from producers.http.app import create_web_app
from tests.support.drains import dead_by_drain
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration


@pytest.fixture
def dead_and_api(make_settings: Any) -> Iterator[tuple[list[str], Api]]:
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    dead = dead_by_drain(producer, pipeline, "dead-pages", 5)
    assert all(producer.status(e)["status"] == "dead" for e in dead)  # type: ignore[index]
    api = Api(Target(url="http://testserver"))
    with TestClient(create_web_app(settings)) as client:
        api.client.close()
        api.client = client
        yield dead, api
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize(
    ("path", "done_key"), [("/v1/dlq/redrive", "redriven"), ("/v1/dlq/discard", "discarded")]
)
def test_every_dead_event_goes_a_page_at_a_time(
    dead_and_api: tuple[list[str], Api],
    path: str,
    done_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead, api = dead_and_api
    monkeypatch.setattr(dead_letters, "DEAD_PAGE_MAX", 2)
    sent: list[int] = []
    call = api.call

    def counting(method: str, route: str, **kwargs: Any) -> Any:
        if method == "POST":
            sent.append(len(kwargs["body"]["eventIds"]))
        return call(method, route, **kwargs)

    monkeypatch.setattr(api, "call", counting)
    result = dead_letters.act_on_every_dead(api, path, done_key)
    assert sorted(result[done_key]) == sorted(dead) and result["notDead"] == []
    assert sent == [2, 2, 1]
    assert capsys.readouterr().err.splitlines() == [f"{done_key} {n} of 5" for n in (2, 4, 5)]
    assert call("GET", "/v1/dlq")["total"] == 0


def test_an_empty_list_is_one_look_and_no_count(
    dead_and_api: tuple[list[str], Api], capsys: pytest.CaptureFixture[str]
) -> None:
    dead, api = dead_and_api
    api.call("POST", "/v1/dlq/discard", body={"eventIds": dead})
    result = dead_letters.act_on_every_dead(api, "/v1/dlq/redrive", "redriven")
    assert result == {"redriven": [], "notDead": []} and capsys.readouterr().err == ""
