"""``agent-signal probe worker|web`` and ``agent-signal drain`` (producers/cli/admin/probe.py): exit codes, one line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers.cli.admin.probe import drain, probe_web, probe_worker, readyz_url
from producers.cli.main import main
from worker.runtime import heartbeat_file as hb


def _beat(path: Path, age_s: float = 0.0) -> None:
    hb.write(path, hb.Beat("agent-signal-9@pod-c", 9, int((time.time() - age_s) * 1000)))


class TestProbeWorker:
    def test_exit_codes(self, tmp_path: Path) -> None:
        """0 fresh, 1 stale, 1 missing, 1 when the setting is unset."""
        path = tmp_path / "hb.json"
        assert probe_worker(str(path), 60, time.time())[0] == 1
        _beat(path)
        assert probe_worker(str(path), 60, time.time())[0] == 0
        _beat(path, age_s=120)
        assert probe_worker(str(path), 60, time.time())[0] == 1
        code, line = probe_worker(None, 60, time.time())
        assert code == 1 and "AGENT_SIGNAL_HEARTBEAT_FILE" in line

    def test_draining_worker_is_live_but_not_ready(self, tmp_path: Path) -> None:
        """After the drain flag, readiness exits 1 and --liveness exits 0."""
        path = tmp_path / "hb.json"
        _beat(path)
        hb.mark_draining(path)
        assert probe_worker(str(path), 60, time.time())[0] == 1
        assert probe_worker(str(path), 60, time.time(), liveness=True)[0] == 0

    def test_the_command_line_prints_one_line(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``agent-signal probe worker`` reads the setting, exits 0/1 and writes one line on stderr."""
        path = tmp_path / "hb.json"
        monkeypatch.setenv("AGENT_SIGNAL_HEARTBEAT_FILE", str(path))
        assert main(["probe", "worker"]) == 1
        _beat(path, age_s=30)
        assert main(["probe", "worker"]) == 0  # default max age: 4 x the 15 s interval
        assert main(["probe", "worker", "--max-age-s", "10"]) == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 3 and "no heartbeat" in err[0] and "stale" in err[2]


class TestProbeWeb:
    def test_ready_sends_the_bearer(self) -> None:
        """200 is exit 0, and the token goes in the Authorization header."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json={"ready": True, "checks": {"redis": "ok"}})

        code, _ = probe_web(
            "http://127.0.0.1:8000/readyz", "as_key", 1.0, transport=httpx.MockTransport(handler)
        )
        assert code == 0 and seen[0].headers["authorization"] == "Bearer as_key"

    def test_not_ready_and_unreachable_exit_1_with_the_reason(self) -> None:
        """A 503 names the failing checks; a refused connection names the error."""

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(503, json={"ready": False, "checks": {"redis": "error: ConnectionError"}})

        code, line = probe_web(
            "http://127.0.0.1:8000/readyz", None, 1.0, transport=httpx.MockTransport(handler)
        )
        assert code == 1 and "503" in line and "ConnectionError" in line

        def refuse(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused", request=request)

        code, line = probe_web(
            "http://127.0.0.1:8000/readyz", None, 1.0, transport=httpx.MockTransport(refuse)
        )
        assert code == 1 and "ConnectError" in line

    def test_a_key_with_a_trailing_cr_is_sent_without_it_and_never_printed(self) -> None:
        """A bootstrap key read from a CRLF file goes without its CR; one with a CR inside is not sent, and the
        line does not quote it; a refused request's text (which quotes its headers) is left out too."""
        key = "as_bootstrap_" + "k" * 24
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json={"ready": True})

        url = "http://127.0.0.1:8000/readyz"
        code, _ = probe_web(url, key + "\r", 1.0, transport=httpx.MockTransport(handler))
        assert code == 0 and seen[0].headers["authorization"] == f"Bearer {key}"
        code, line = probe_web(url, key[:8] + "\r" + key[8:], 1.0, transport=httpx.MockTransport(handler))
        assert code == 1 and len(seen) == 1 and key[8:] not in line
        assert "AGENT_SIGNAL_TOKEN or the bootstrap key holds a space, a control character" in line

        def illegal(request: httpx.Request) -> httpx.Response:
            raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {key}'")

        code, line = probe_web(url, key, 1.0, transport=httpx.MockTransport(illegal))
        assert code == 1 and key not in line and "LocalProtocolError" in line

    def test_url_is_loopback_for_a_wildcard_bind(self) -> None:
        """0.0.0.0 and :: are probed on 127.0.0.1 (a loopback Host the app always serves); others as bound."""
        assert readyz_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/readyz"
        assert readyz_url("::", 8001) == "http://127.0.0.1:8001/readyz"
        assert readyz_url("10.0.0.5", 8000) == "http://10.0.0.5:8000/readyz"
        assert readyz_url("::1", 8000) == "http://[::1]:8000/readyz"


class TestDrain:
    def test_drain_flags_then_cancels_this_node(self, tmp_path: Path) -> None:
        """The flag is set first; the cancel goes to the node named in the heartbeat file, for the queue."""
        path = tmp_path / "hb.json"
        _beat(path)
        calls: list[tuple[str, str]] = []

        def cancel(queue: str, node: str) -> list[dict[str, Any]]:
            assert hb.is_draining(path)  # readiness is already false when the consumer goes
            calls.append((queue, node))
            return [{node: {"ok": f"no longer consuming from {queue}"}}]

        code, line = drain(str(path), "agent-signal", cancel)
        assert code == 0 and calls == [("agent-signal", "agent-signal-9@pod-c")]
        assert "no longer consuming" in line
        assert probe_worker(str(path), 60, time.time())[0] == 1

    def test_no_answer_is_exit_1_and_no_beat_is_exit_0(self, tmp_path: Path) -> None:
        """A node that does not answer is a failure (SIGTERM follows anyway); without a beat there is nothing to cancel."""
        path = tmp_path / "hb.json"

        def silent(queue: str, node: str) -> list[dict[str, Any]]:
            return []

        assert drain(str(path), "q", silent)[0] == 0 and hb.is_draining(path)
        _beat(path)
        code, line = drain(str(path), "q", silent)
        assert code == 1 and "did not confirm" in line
        assert drain(None, "q", silent)[0] == 1
