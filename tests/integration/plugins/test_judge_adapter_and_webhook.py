"""The OpenAI-compatible judge adapter and the webhook runner, against small HTTP servers the tests start
(no mock library): valid answers, a malformed answer recorded as a diagnostic, Standard Webhooks signatures,
retries."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from policies.self_iteration.agent.runners import RunnerError, RunRefused, RunRequest, WebhookRunner
from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.keys import SelfIterationKeys
from policies.webhook_signing import verify_webhook
from producers import Producer
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration


class Server:
    def __init__(self, respond: Callable[[dict[str, Any], dict[str, str], bytes], tuple[Any, ...]]) -> None:
        self.requests: list[tuple[dict[str, Any], dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((body, headers, raw))
                status, answer, *extra = respond(body, headers, raw)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def _completion(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture
def judge_server() -> Iterator[Server]:
    def respond(body: dict[str, Any], headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        name = body["response_format"]["json_schema"]["name"]
        message = json.loads(body["messages"][1]["content"])["message"]
        if "garbled" in message:
            return 200, _completion("this is not json")
        if name == "agent_signal_feedback_satisfaction":
            return 200, _completion(
                json.dumps({"result": "not_satisfied", "confidence": 0.9, "reason": "model", "evidence": []})
            )
        return 200, _completion(
            json.dumps(
                {"targets": [{"target": "memory", "confidence": 0.8, "reason": "model", "evidence": []}]}
            )
        )

    server = Server(respond)
    yield server
    server.close()


def test_judge_adapter(make_settings: Any, judge_server: Server) -> None:
    """The adapter asks for strict JSON-schema output; a malformed answer is a diagnostic and concludes the chain."""
    settings = make_settings(judge_url=judge_server.url + "/v1", judge_api_key="sk-test", judge_model="tiny")
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    runner = type("Runner", (), {"dispatch": lambda self, r: r.operation_id})()
    pipeline.deps.add(replace(pipeline.deps.get(SelfIterationDeps), runner=runner))
    base = {
        "sourceType": "agent.user.message",
        "userId": "u1",
        "scopeKey": "topic:j",
        "payload": {"agentId": "a1", "topicId": "j"},
    }
    producer.enqueue({**base, "sourceId": "ok1", "payload": {**base["payload"], "message": "hello there"}})
    producer.enqueue(
        {**base, "sourceId": "bad1", "payload": {**base["payload"], "message": "garbled please"}}
    )
    pipeline.drain_scope("topic:j")
    body, headers, _ = judge_server.requests[0]
    assert headers["authorization"] == "Bearer sk-test" and body["model"] == "tiny"
    assert body["response_format"]["json_schema"]["strict"] is True
    ok = producer.store.get_chain(producer.keys, "chain:ok1")
    assert ok is not None and ok["record"]["conclusionChain"]["dominantPath"][:3] == [
        "agent.user.message",
        "signal.feedback.satisfaction",
        "signal.feedback.domain.memory",
    ]
    bad = producer.store.get_chain(producer.keys, "chain:bad1")
    assert bad is not None
    assert (
        bad["envelope"]["metadata"]["terminal"]["concluded"]["reason"]
        == "malformed satisfaction classifier output"
    )
    (diagnostic,) = [
        json.loads(x)
        for x in producer.store.client.lrange(SelfIterationKeys(producer.keys).diagnostics, 0, -1)
    ]
    assert (
        diagnostic["stage"] == "satisfaction"
        and diagnostic["sourceId"] == "bad1"
        and "structured output" in diagnostic["error"]
    )
    producer.close()


def test_webhook_runner_signs_and_retries() -> None:
    """Requests carry a Standard Webhooks signature (id, timestamp, body); 5xx is retried, 4xx is not."""
    calls = {"n": 0}

    def respond(body: dict[str, Any], headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        calls["n"] += 1
        if body["slug"] == "refuse":
            return 400, {"error": "bad"}
        return (503, {}) if calls["n"] < 3 else (202, {"ok": True})

    server = Server(respond)
    try:
        request = RunRequest(
            "op-1", "memory-writer", {"kind": "memory", "sourceId": "s"}, "u1", "a1", "prompt"
        )
        runner = WebhookRunner(server.url, "s3cret", attempts=3, base_delay_s=0.01)
        assert runner.dispatch(request) == "op-1"
        assert calls["n"] == 3
        body, headers, raw = server.requests[-1]
        verify_webhook("s3cret", raw, headers)  # raises unless id, timestamp and body are signed
        assert headers["webhook-id"] == headers["idempotency-key"] == "op-1"
        assert body["suppressSignal"] is True and body["marker"] == {"kind": "memory", "sourceId": "s"}
        rotating = WebhookRunner(server.url, "new", previous_secrets=["s3cret"], base_delay_s=0.01)
        assert rotating.dispatch(RunRequest("op-3", "memory-writer", {}, "u1", "a1", "p")) == "op-3"
        _, headers, raw = server.requests[-1]
        verify_webhook("s3cret", raw, headers)  # a receiver not yet moved to the new secret
        verify_webhook("new", raw, headers)
        refuse = RunRequest("op-2", "refuse", {"kind": "memory"}, "u1", "a1", "p")
        before = calls["n"]
        with pytest.raises(RunRefused, match="HTTP 400"):  # a RunnerError the outbox ends at once (dead)
            runner.dispatch(refuse)
        assert calls["n"] == before + 1
    finally:
        server.close()


@pytest.mark.parametrize("status", [429, 503])
def test_a_receiver_that_says_when_is_not_called_again_at_once(status: int) -> None:
    """An outbox audit: a receiver answering 429 with ``Retry-After: 30`` got three posts in 1.6 s per outbox
    attempt, and the record was dead in a minute or two. The runner stops at the first such answer and says when
    (the outbox's next attempt waits that long: worker/outbox/relay.py); without Retry-After it retries as before."""
    asked: list[str] = []

    def respond(body: dict[str, Any], headers: dict[str, str], raw: bytes) -> tuple[Any, ...]:
        asked.append(body["operationId"])
        return (status, {}, {"Retry-After": "30"}) if body["operationId"] == "op-wait" else (status, {})

    server = Server(respond)
    try:
        runner = WebhookRunner(server.url, "s3cret", attempts=3, base_delay_s=0.01)
        with pytest.raises(RunnerError, match="Retry-After 30 s") as told:
            runner.dispatch(RunRequest("op-wait", "memory-writer", {}, "u1", "a1", "p"))
        assert told.value.retry_after_s == 30 and asked.count("op-wait") == 1
        with pytest.raises(RunnerError) as plain:
            runner.dispatch(RunRequest("op-plain", "memory-writer", {}, "u1", "a1", "p"))
        assert plain.value.retry_after_s is None and asked.count("op-plain") == 3
    finally:
        server.close()


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_timeout() -> None:
    """A fault audit: the runner's ``timeout`` capped each read, so a receiver sending its answer a byte at a time
    held the delivery (and its tenant's share of the outbox relay) for as long as it liked. Each attempt's whole
    answer is bounded now: a late one is a failed attempt, and the run a RunnerError the relay retries."""
    stop = threading.Event()

    class Trickle(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "1000")
            self.end_headers()
            while not stop.is_set():
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                stop.wait(0.05)

        def log_message(self, *_: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        runner = WebhookRunner(
            f"http://127.0.0.1:{httpd.server_address[1]}",
            "s3cret",
            attempts=2,
            base_delay_s=0.01,
            timeout_s=0.5,
        )
        # the answer never ends: only a deadline on the whole answer returns (before, this hung until the
        # suite's timeout). On a loaded machine the second attempt's connect can be what the deadline cuts
        # (ConnectTimeout): a timeout either way, never an answer and never a hang.
        with pytest.raises(RunnerError, match=r"after 2 attempts: (Read|Connect)?Timeout"):
            runner.dispatch(RunRequest("op-trickle", "memory-writer", {}, "u1", "a1", "p"))
    finally:
        stop.set()
        httpd.shutdown()
