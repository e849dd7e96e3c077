"""Routing through its surfaces: POST /v1/route (with config reload), `agent-signal route`, and chat.request
events through real workers."""

from __future__ import annotations

import json
import logging
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from policies.routing import load_router
from producers import Producer
from producers.http.app import create_web_app
from tests.conftest import ROOT, wait_for
from worker.intake.source_event import InvalidEvent
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

CONFIG = ROOT / "bench" / "data" / "router.yaml"
TOOL_LOOP = {
    "model": "auto",
    "messages": [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ],
    "tools": [{"type": "function"}] * 3,
}


# The benchmark config plus a decision on a signal type the config does not compute (external signals bring it):
# an external signal may not stand in for one of the config's own conversation or keyword rules.
CODING_DECISION = """    - name: coding
      priority: 70
      rules: { type: domain, name: code }
      modelRefs: [ { model: code-model } ]
    - name: fallback
"""


def with_coding_decision(path: Path) -> Path:
    """Write the benchmark config with the ``coding`` decision (``domain:code``) to ``path``."""
    path.write_text(CONFIG.read_text().replace("    - name: fallback\n", CODING_DECISION))
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "router.yaml"
    shutil.copy(CONFIG, path)
    return path


@pytest.fixture
def client(make_settings: Any, config_path: Path) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings(router_config=str(config_path)))) as c:
        yield c


class TestHttp:
    def test_route(self, client: TestClient) -> None:
        """POST /v1/route answers the RouteResult of the library."""
        response = client.post("/v1/route", json={"request": TOOL_LOOP, "protocol": "openai-chat"})
        assert response.status_code == 200
        body = response.json()
        assert body == load_router(CONFIG).route(TOOL_LOOP)
        assert body["decision"]["name"] == "agentic_routing" and body["model"] == "gpt-4o"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"protocol": "openai-chat"}, "request"),
            ({"request": TOOL_LOOP, "protocol": "gemini"}, "protocol"),
            ({"request": TOOL_LOOP, "externalSignals": [{"type": "domain"}]}, "externalSignals[0].name"),
            (
                {"request": TOOL_LOOP, "externalSignals": [{"type": "a", "name": "b", "confidence": "high"}]},
                "externalSignals[0].confidence",
            ),
            ({"request": TOOL_LOOP, "externalSignals": {}}, "externalSignals"),
            # the caller's ids were dropped unseen when not strings, and a misspelt key was ignored
            ({"request": TOOL_LOOP, "requestId": 12345}, "requestId"),
            ({"request": TOOL_LOOP, "requestId": ""}, "requestId"),
            ({"request": TOOL_LOOP, "userId": ["u1"]}, "userId"),
            ({"request": TOOL_LOOP, "agentId": {"a": 1}}, "agentId"),
            ({"request": TOOL_LOOP, "scopeKey": 7}, "scopeKey"),
            ({"request": TOOL_LOOP, "userId": "a:b"}, "userId"),  # the record would refuse these
            ({"request": TOOL_LOOP, "userId": "org/alice"}, "userId"),
            ({"request": TOOL_LOOP, "workspaceId": "w:1"}, "workspaceId"),
            ({"request": TOOL_LOOP, "externalSignal": [{"type": "a", "name": "b"}]}, "externalSignal"),
        ],
    )
    def test_invalid_input_names_the_field(
        self, client: TestClient, body: dict[str, Any], field: str
    ) -> None:
        """Bad input is a 422 naming the field."""
        response = client.post("/v1/route", json=body)
        assert response.status_code == 422
        assert response.json()["error"]["field"] == field

    def test_external_signals(self, make_settings: Any, tmp_path: Path) -> None:
        """External signals take part in decisions (and are published)."""
        config = with_coding_decision(tmp_path / "coding.yaml")
        body = {
            "request": {"messages": [{"role": "user", "content": "hi"}]},
            "externalSignals": [{"type": "domain", "name": "code", "confidence": 0.5}],
        }
        with TestClient(create_web_app(make_settings(router_config=str(config)))) as c:
            result = c.post("/v1/route", json=body).json()
        assert result["decision"]["name"] == "coding" and result["decision"]["confidence"] == 0.5
        assert result["signals"]["domain:code"] == {"matched": True, "confidence": 0.5}

    def test_config_reloads_on_change(
        self, client: TestClient, config_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Editing the config file changes answers without restarting; a broken edit keeps the last good one."""
        assert client.post("/v1/route", json={"request": TOOL_LOOP}).json()["model"] == "gpt-4o"
        config_path.write_text(config_path.read_text().replace("model: gpt-4o", "model: gpt-5"))
        wait_for(
            lambda: client.post("/v1/route", json={"request": TOOL_LOOP}).json()["model"] == "gpt-5",
            timeout_s=10,
        )
        caplog.set_level(logging.ERROR)
        config_path.write_text("routing: [broken\n")
        # Wait until the app has read the broken version and refused it (it logs the refusal with the
        # file's path), then check it kept serving the last good one; every answer on the way too.
        models: list[str] = []

        def refused() -> bool:
            models.append(client.post("/v1/route", json={"request": TOOL_LOOP}).json()["model"])
            return any(
                str(config_path) in r.getMessage() and "rejected" in r.getMessage() for r in caplog.records
            )

        wait_for(refused, timeout_s=10, interval_s=0.1, what="the broken config to be refused")
        assert set(models) == {"gpt-5"}
        assert client.post("/v1/route", json={"request": TOOL_LOOP}).json()["model"] == "gpt-5"

    def test_not_configured(self, make_settings: Any) -> None:
        """Without AGENT_SIGNAL_ROUTER_CONFIG the endpoint says what to set."""
        with TestClient(create_web_app(make_settings())) as c:
            response = c.post("/v1/route", json={"request": TOOL_LOOP})
        assert response.status_code == 503
        assert "AGENT_SIGNAL_ROUTER_CONFIG" in response.json()["error"]["message"]


def _random_request(rng: random.Random) -> dict[str, Any]:
    roles = ["user", "assistant", "system", "developer", "tool"]
    messages: list[dict[str, Any]] = []
    for _ in range(rng.randint(0, 12)):
        role = rng.choice(roles)
        message: dict[str, Any] = {
            "role": role,
            "content": rng.choice(["hi", "urgent!", "asap please", "ok"]),
        }
        if role == "assistant" and rng.random() < 0.5:
            message["tool_calls"] = [{"id": f"c{i}"} for i in range(rng.randint(1, 3))]
        if role == "tool":
            message["tool_call_id"] = rng.choice(["c0", "flowtool_s1__c0"])
        if role == "user" and rng.random() < 0.2:
            message["content"] = [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "x"}},
            ]
        messages.append(message)
    request: dict[str, Any] = {"messages": messages, "tools": [{}] * rng.randint(0, 5)}
    choice = rng.choice([None, "auto", "required", "none", {"type": "function", "function": {"name": "f"}}])
    if choice is not None:
        request["tool_choice"] = choice
    if rng.random() < 0.3:
        request["model"] = rng.choice(["auto", "my-model"])
    return request


class TestCli:
    def test_batch_of_1000_matches_the_library(self, tmp_path: Path) -> None:
        """`agent-signal route --batch` over 1,000 requests prints what the library answers, line for line."""
        config = with_coding_decision(tmp_path / "coding.yaml")
        rng = random.Random(1234)
        envelopes = []
        for _ in range(1000):
            envelope: dict[str, Any] = {"request": _random_request(rng)}
            if rng.random() < 0.2:
                envelope["externalSignals"] = [{"type": "domain", "name": "code", "confidence": rng.random()}]
            envelopes.append(envelope)
        path = tmp_path / "requests.jsonl"
        path.write_text("\n".join(json.dumps(e) for e in envelopes) + "\n")
        out = subprocess.run(
            [sys.executable, "-m", "producers.cli", "route", "--config", str(config), "--batch", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        router = load_router(config)
        expected = [
            router.route(e["request"], "openai-chat", e.get("externalSignals", [])) for e in envelopes
        ]
        assert lines == expected
        assert len({json.dumps(r["decision"] and r["decision"]["name"]) for r in lines}) >= 4, (
            "the sample should exercise several decisions"
        )

    def test_check_and_errors(self, tmp_path: Path) -> None:
        """--check: exit 0 for a good config; exit 2 and one error per line for a bad one; bad batch lines are reported."""

        def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "producers.cli", "route", *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                input=stdin,
                timeout=60,
                check=False,
            )

        assert run("--config", str(CONFIG), "--check").returncode == 0
        bad = tmp_path / "bad.yaml"
        bad.write_text(
            "routing:\n  signals:\n    conversation:\n"
            "      - name: a\n        feature: {type: count, source: {type: message, role: bot}}\n"
            "      - name: a\n        feature: {type: exists, source: {type: image_content}}\n"
        )
        result = run("--config", str(bad), "--check")
        assert result.returncode == 2
        assert result.stdout.splitlines() == [
            'conversation rule [0] "a": unsupported source.role "bot"; valid roles: user, assistant, system, developer, tool, non_user',
            'conversation rule [1]: duplicate name "a"',
        ]
        single = run("--config", str(CONFIG), "-", stdin=json.dumps(TOOL_LOOP))
        assert json.loads(single.stdout)["model"] == "gpt-4o"
        batch = tmp_path / "b.jsonl"
        batch.write_text(
            json.dumps({"request": TOOL_LOOP})
            + "\n{nope\n"
            + json.dumps({"request": TOOL_LOOP, "protocol": "x"})
            + "\n"
        )
        result = run("--config", str(CONFIG), "--batch", str(batch))
        assert result.returncode == 1
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert rows[0]["model"] == "gpt-4o"
        assert rows[1]["line"] == 2 and "not valid JSON" in rows[1]["error"]["message"]
        assert rows[2]["error"]["field"] == "protocol"


class TestPipeline:
    def test_chat_request_event_emits_conversation_signals(
        self, make_settings: Any, start_worker: Any, config_path: Path
    ) -> None:
        """A chat.request source runs through a real worker; its chain has signal.conversation.* and the decision."""
        settings = make_settings(router_config=str(config_path))
        start_worker(settings)
        producer = Producer(settings)
        result = producer.enqueue(
            {
                "sourceType": "chat.request",
                "sourceId": "req-1",
                "scopeKey": "session:s1",
                "payload": {"request": TOOL_LOOP, "protocol": "openai-chat"},
            }
        )
        wait_for(
            lambda: (producer.status(result.event_id) or {}).get("status") == "done", what="the routing chain"
        )
        chain = producer.store.get_chain(producer.keys, "chain:req-1")
        assert chain is not None
        types = [s["signalType"] for s in chain["envelope"]["signals"]]
        assert "signal.conversation.tool_heavy" in types and types[-1] == "signal.routing.decided"
        decided = chain["envelope"]["signals"][-1]["payload"]
        assert decided["decision"]["name"] == "agentic_routing" and decided["model"] == "gpt-4o"
        tool_heavy = next(
            s for s in chain["envelope"]["signals"] if s["signalType"] == "signal.conversation.tool_heavy"
        )
        assert tool_heavy["payload"] == {
            "rule": "tool_heavy",
            "value": 3.0,
            "matched": True,
            "confidence": 1.0,
        }
        # A request the router could never route is refused at the door (the conversation plugin's payload
        # schema), naming the field, instead of dying in the worker.
        bad = {"sourceType": "chat.request", "sourceId": "req-2", "scopeKey": "session:s1"}
        with pytest.raises(InvalidEvent) as refused:
            producer.enqueue({**bad, "payload": {"protocol": "openai-chat"}})
        assert refused.value.error.field == "payload.request"
        producer.close()

    def test_post_route_records_a_chat_request(
        self, make_settings: Any, config_path: Path, redis_client: Any
    ) -> None:
        """POST /v1/route also enqueues a chat.request event (requestId as its source id)."""
        settings = make_settings(router_config=str(config_path))
        with TestClient(create_web_app(settings)) as c:
            c.post("/v1/route", json={"request": TOOL_LOOP, "requestId": "rq-9", "scopeKey": "session:s9"})
            status = c.app.state.producer.store.stats(c.app.state.producer.keys)  # type: ignore[attr-defined]
        assert status["accepted"] == 1
        assert redis_client.llen(BucketKeys(settings.key_prefix).inbox("session:s9")) == 1
