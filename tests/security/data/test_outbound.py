"""What leaves the service, and what it reads from its own files (issue 12): one regression test per finding.

Webhooks are signed per Standard Webhooks and checked against a small HTTP server the test starts (no mock
library); logging goes through the processes' own ``configure_logging``; function definitions and plans are
real files under ``tmp_path``.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from standardwebhooks import Webhook

from policies.routing import ConfigError, load_router
from policies.self_iteration.agent.runners import RunRequest, WebhookRunner
from policies.webhook_signing import WebhookRejected, verify_webhook, webhook_headers
from sessions.conditions import CondEnv, ConditionRegistry
from sessions.fsm import FnState
from sessions.functions import FunctionLoadError, load_function_dir
from tests.conftest import ROOT
from worker.telemetry.logs import configure_logging


class Receiver:
    """A local HTTP server that records each POST's headers and raw body and answers 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                self._answer()

            def do_GET(self) -> None:
                self._answer()

            def _answer(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_webhook_signature_covers_id_and_timestamp(receiver: Receiver) -> None:
    """The agent-run webhook is signed over id, timestamp and body (Standard Webhooks): changing any one of
    them, or replaying it after the tolerance window, fails verification; other libraries verify it too."""
    request = RunRequest("op-1", "memory-writer", {"kind": "memory", "sourceId": "s"}, "u1", "a1", "prompt")
    WebhookRunner(receiver.url + "/runs?sig=abc", "s3cret").dispatch(request)
    ((headers, body),) = receiver.requests
    assert headers["webhook-id"] == "op-1" and abs(int(headers["webhook-timestamp"]) - time.time()) < 300
    assert "x-agent-signal-signature" not in headers  # the old body-only (replayable) signature is gone
    verify_webhook("s3cret", body, headers)
    Webhook("whsec_" + base64.b64encode(b"s3cret").decode()).verify(body, headers)  # any receiver agrees
    for changed in (
        {"webhook-id": "op-2"},
        {"webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)},
    ):
        with pytest.raises(WebhookRejected):
            verify_webhook("s3cret", body, {**headers, **changed})
    with pytest.raises(WebhookRejected):
        verify_webhook("s3cret", body.replace(b"memory-writer", b"skill-management"), headers)
    with pytest.raises(WebhookRejected):
        verify_webhook("wrong", body, headers)
    replay = webhook_headers("s3cret", "op-1", body, timestamp_s=int(time.time()) - 600)
    with pytest.raises(WebhookRejected, match="tolerance window"):
        verify_webhook("s3cret", body, replay)  # correctly signed, but captured ten minutes ago
    recent = webhook_headers("s3cret", "op-1", body, timestamp_s=int(time.time()) - 120)
    verify_webhook("s3cret", body, recent)
    with pytest.raises(WebhookRejected, match="60 s"):
        verify_webhook("s3cret", body, recent, tolerance_s=60)
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()  # the spec's secret form
    verify_webhook(secret, body, webhook_headers(secret, "op-3", body))


def test_httpx_does_not_log_urls_at_info(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    """With the processes' logging at INFO, an outbound call's URL (and the secret in its query) is not
    logged, while our own INFO lines still are."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, {n: logging.getLogger(n).level for n in ("httpx", "httpcore")})
    try:
        configure_logging(env="production", level="INFO", fmt="json")
        assert logging.getLogger("httpx").level == logging.getLogger("httpcore").level == logging.WARNING
        httpx.get(receiver.url + "/hook?api_key=query-s3cret-value", timeout=5)
        httpx.post(receiver.url + "/hook?token=another-s3cret", json={}, timeout=5)
        logging.getLogger("agent_signal.probe").info("probe line at info")
        err = capsys.readouterr().err
    finally:
        root.handlers[:], levels = saved[0], saved[2]
        root.setLevel(saved[1])
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        structlog.reset_defaults()
    assert "probe line at info" in err
    assert "s3cret" not in err and "/hook" not in err


BOMB = """---
name: bomb
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: [*h, *h, *h, *h, *h, *h, *h, *h, *h]
---
"""


def test_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    """A function definition with anchors and aliases (nine levels: 387 million strings if expanded) is
    refused at its first anchor with an error naming the file; router configs refuse aliases too."""
    (tmp_path / "bomb.md").write_text(BOMB)
    (tmp_path / "ok.md").write_text("---\nname: fine\non: 1\n---\nbody\n")
    with pytest.raises(FunctionLoadError) as caught:
        load_function_dir(tmp_path)
    (error,) = caught.value.errors
    assert error.startswith(str(tmp_path / "bomb.md") + ":")
    assert "anchors and aliases are not allowed (found &a)" in error
    (tmp_path / "bomb.md").unlink()
    assert set(load_function_dir(tmp_path)[0]) == {"fine"}
    config = tmp_path / "router.yaml"
    config.write_text((ROOT / "bench" / "data" / "router.yaml").read_text() + "\nx: &x [1]\ny: *x\n")
    with pytest.raises(ConfigError, match="anchors and aliases are not allowed"):
        load_router(config)


def test_plan_path_leaving_directory_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``plan_incomplete`` never reads outside ``.rolebox/plans``: a definition naming ``../x`` or an absolute
    path fails to load, naming the file; at run time such a name, or a symlink out, is false (and logged)."""
    definitions = tmp_path / "functions"
    definitions.mkdir()
    for name, arg in (("up", "../../secret"), ("absolute", str(tmp_path / "secret"))):
        (definitions / f"{name}.md").write_text(
            f"---\nname: {name}\ncontinue_until: plan_incomplete({arg})\n---\n"
        )
    with pytest.raises(FunctionLoadError) as caught:
        load_function_dir(definitions)
    assert sorted(caught.value.errors) == [
        f"{definitions / 'absolute.md'}: continue_until: plan name {str(tmp_path / 'secret')!r} is an absolute path",
        f"{definitions / 'up.md'}: continue_until: plan name '../../secret' leaves the plans directory",
    ]
    workspace = tmp_path / "workspace"
    plans = workspace / ".rolebox" / "plans"
    plans.mkdir(parents=True)
    (tmp_path / "secret.md").write_text("- [ ] an unchecked item outside the plans directory\n")
    (plans / "link.md").symlink_to(tmp_path / "secret.md")
    env = CondEnv(session_id="s", fn_name="f", state=FnState(), artifacts={}, workspace_dir=workspace)
    registry = ConditionRegistry()
    caplog.set_level(logging.WARNING, logger="sessions.conditions")
    for condition in (
        "plan_incomplete(../../secret)",
        f"plan_incomplete({tmp_path / 'secret'})",
        "plan_incomplete(link)",
        "plan_incomplete",
    ):
        assert registry.evaluate(condition, env) is False, condition
    assert sum("not read" in r.getMessage() for r in caplog.records) == 4
    (plans / "inside.md").write_text("- [ ] inside\n")
    assert registry.evaluate("plan_incomplete(inside)", env) is True
