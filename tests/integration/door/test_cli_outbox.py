"""``agent-signal outbox dead`` and ``outbox redrive`` (producers/cli/console/outbox.py) over the real web app (in
process) and a real Redis: a dead record is listed, redriven, and then answered not dead."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.cli.console import outbox as outbox_cli
from producers.cli.reach.target import Api, Target
from producers.http.app import create_web_app
from worker.chain.context import EffectBuffer, HandlerContext
from worker.keys.layout import BucketKeys
from worker.outbox.relay import OutboxRelay
from worker.store.events import EventStore

pytestmark = pytest.mark.integration

SCOPE = "topic:cli-outbox"


class _KeptOpen(Api):
    """The CLI's Api over the in-process app, which each command's ``with`` must not close."""

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def api(
    make_settings: Any, redis_client: Any, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Api]:
    """The web app in process, with one dead outbox record (a kind no worker delivers, one attempt allowed)."""
    settings = make_settings()
    store = EventStore(redis_client, settings)
    buffer = EffectBuffer(keys=keys)
    for n in (1, 2, 3):
        HandlerContext(scope_key=SCOPE, node_timestamp=1, keys=keys, effects=buffer).outbox(
            "hook", {}, key=f"k{n}"
        )
    pipe = redis_client.pipeline(transaction=True)
    for command in buffer.to_json_list():
        pipe.execute_command(*command)
    pipe.execute()
    OutboxRelay(store, {"hook": _refused}, max_attempts=1).run_once()
    client = _KeptOpen(Target(url="http://testserver"))
    with TestClient(create_web_app(settings)) as web:
        client.client.close()
        client.client = web
        monkeypatch.setattr(outbox_cli, "open_api", lambda args: client)
        yield client


def _args(**given: Any) -> argparse.Namespace:
    base = {"json": True, "limit": 100, "all": False, "scope": None, "record_id": None}
    return argparse.Namespace(**{**base, **given})


def test_dead_then_redrive_then_not_dead(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert outbox_cli.cmd_outbox_dead(_args()) == 0
    records = json.loads(capsys.readouterr().out)["records"]
    assert sorted(r["recordId"] for r in records) == ["hook:k1", "hook:k2", "hook:k3"]
    (listed,) = [r for r in records if r["recordId"] == "hook:k1"]
    assert (listed["scopeKey"], listed["attempts"]) == (SCOPE, 1)
    assert "the receiver is down" in listed["lastError"]
    one = _args(scope=SCOPE, record_id="hook:k1")
    assert outbox_cli.cmd_outbox_redrive(one) == 0
    assert json.loads(capsys.readouterr().out)["redriven"] == [{"scopeKey": SCOPE, "recordId": "hook:k1"}]
    assert outbox_cli.cmd_outbox_redrive(one) == 1  # pending now: not dead
    assert outbox_cli.cmd_outbox_redrive(_args(scope=SCOPE)) == 2  # a scope without its record id
    assert outbox_cli.cmd_outbox_redrive(_args(all=True, scope=SCOPE, record_id="hook:k1")) == 2
    capsys.readouterr()
    monkeypatch.setattr(outbox_cli, "PAGE_MAX", 1)  # --all goes a page at a time: two pages here
    assert outbox_cli.cmd_outbox_redrive(_args(all=True)) == 0
    out = capsys.readouterr()
    assert sorted(r["recordId"] for r in json.loads(out.out)["redriven"]) == ["hook:k2", "hook:k3"]
    assert out.err.splitlines() == ["redriven 1 of 2", "redriven 2 of 2"]


def _refused(record: Any) -> None:
    raise ConnectionError("the receiver is down")
