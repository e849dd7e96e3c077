"""Sibling verbs print alike (docs/cli.md "Output"): a table by the shared rule (tab-separated off a terminal) or
``--json`` through the shared ``print_json`` (UTF-8, not ``\\uXXXX``); a listing cut at ``--limit`` says so on
stderr; ``probe web`` words an error answer as every verb does. Against a fake HTTP API."""

from __future__ import annotations

import json

import httpx
import pytest

from producers.cli.admin.probe import probe_web
from producers.cli.main import main
from tests.unit.cli.conftest import FakeDoor

CHINESE = "以后回答简短一些"
DEAD = {
    "eventId": "evt_1",
    "status": "dead",
    "attempts": 1,
    "scopeKey": "topic:t1",
    "sourceType": "test.flaky",
    "sourceId": "to-9",
    "deadAt": 1_700_000_000_000,
    "error": f"flaky handler is broken: {CHINESE}",
    "event": {"sourceType": "test.flaky", "sourceId": "to-9", "payload": {}},
}


class TestDlqRedrive:
    def test_a_table_by_default(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """One row per id, ``redriven`` or ``not dead``, as ``dlq discard`` prints; exit 1 when one was not dead."""
        door.answer("POST", "/v1/dlq/redrive", {"redriven": ["evt_1"], "notDead": ["evt_2"]})
        assert main(["dlq", "redrive", "evt_1", "evt_2", "--url", door.url]) == 1
        assert capsys.readouterr().out == (
            "EVENT ID\tRESULT\nevt_1\tredriven\nevt_2\tnot dead: left as it is\n"
        )
        assert door.seen == [("POST", "/v1/dlq/redrive", {"eventIds": ["evt_1", "evt_2"]})]

    def test_json_keeps_its_shape(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """``--json``: ``{"redriven": [...], "notDead": [...]}`` as before, exit 0 when every one was dead."""
        door.answer("POST", "/v1/dlq/redrive", {"redriven": ["evt_1"], "notDead": []})
        assert main(["dlq", "redrive", "evt_1", "--json", "--url", door.url]) == 0
        assert json.loads(capsys.readouterr().out) == {"redriven": ["evt_1"], "notDead": []}


class TestDlqList:
    def test_a_table_off_a_terminal_is_tab_separated(
        self, door: FakeDoor, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A header and a row per dead event, cells in full, for ``cut``; the next page's cursor on stderr."""
        door.answer("GET", "/v1/dlq", {"events": [DEAD], "total": 2, "cursor": "1700000000000:evt_1"})
        assert main(["dlq", "list", "--url", door.url]) == 0
        out, err = capsys.readouterr()
        header, row = (line.split("\t") for line in out.splitlines())
        assert header == ["EVENT ID", "DIED (UTC)", "SOURCE TYPE", "SOURCE ID", "SCOPE", "TRIES", "ERROR"]
        assert row == [
            "evt_1",
            "2023-11-14 22:13:20",
            "test.flaky",
            "to-9",
            "topic:t1",
            "1",
            f"flaky handler is broken: {CHINESE}",
        ]
        assert err == "more follow: --cursor 1700000000000:evt_1\n"

    def test_json_is_the_page_in_utf8(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """``--json`` prints the page as it came, its text as UTF-8."""
        page = {"events": [DEAD], "total": 1}
        door.answer("GET", "/v1/dlq", page)
        assert main(["dlq", "list", "--json", "--url", door.url]) == 0
        out = capsys.readouterr().out
        assert CHINESE in out and "\\u" not in out and json.loads(out) == page


class TestJsonIsUtf8:
    def test_status(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """``status`` prints its record as ``runs show --json`` does: indented, UTF-8."""
        record = {"eventId": "evt_1", "status": "done", "error": CHINESE}
        door.answer("GET", "/v1/events/evt_1", record)
        assert main(["status", "evt_1", "--url", door.url]) == 0
        out = capsys.readouterr().out
        assert out == json.dumps(record, indent=2, ensure_ascii=False) + "\n"

    def test_inspect_json(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """``inspect --json`` too."""
        chain = {"envelope": {"chainId": "chain:c1", "note": CHINESE}, "record": {"chainId": "chain:c1"}}
        door.answer("GET", "/v1/chains/chain:c1", chain)
        assert main(["inspect", "chain:c1", "--json", "--url", door.url]) == 0
        assert capsys.readouterr().out == json.dumps(chain, indent=2, ensure_ascii=False) + "\n"

    def test_keys_list(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """``keys list`` prints its one JSON array through the same printer."""
        keys = [{"id": "key_1", "tenant": "default", "role": "read", "name": CHINESE}]
        door.answer("GET", "/v1/keys", {"keys": keys})
        assert main(["keys", "list", "--url", door.url]) == 0
        assert capsys.readouterr().out == json.dumps(keys, indent=2, ensure_ascii=False) + "\n"


class TestMoreFollow:
    @pytest.mark.parametrize(
        ("verb", "path", "key", "noun"),
        [
            (["runs", "list"], "/v1/events", "events", "run shown (newest first)"),
            (
                ["receipts", "list", "--user", "u1"],
                "/v1/receipts",
                "receipts",
                "receipt shown (newest first)",
            ),
            (["scopes", "list"], "/v1/scopes", "scopes", "scope shown (by scope key)"),
            (["outbox", "dead"], "/v1/outbox/dead", "records", "record shown (latest first)"),
        ],
    )
    @pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
    def test_a_listing_cut_at_its_limit_says_so(
        self,
        door: FakeDoor,
        verb: list[str],
        path: str,
        key: str,
        noun: str,
        as_json: bool,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """``--limit 1`` of a list with more: the one item, and stderr says more follow and how to see them (in
        the singular: one run shown)."""
        door.answer("GET", path, {key: [{"eventId": "evt_1", "scopeKey": "s1"}], "cursor": "c1"})
        assert main([*verb, "--limit", "1", "--url", door.url, *(["--json"] if as_json else [])]) == 0
        err = capsys.readouterr().err
        assert err == f"1 {noun}; more follow: raise --limit (now 1) to list them\n"

    def test_more_than_one_shown_is_plural(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        door.answer(
            "GET", "/v1/events", {"events": [{"eventId": "evt_1"}, {"eventId": "evt_2"}], "cursor": "c"}
        )
        assert main(["runs", "list", "--limit", "2", "--url", door.url]) == 0
        assert capsys.readouterr().err.startswith("2 runs shown (newest first); more follow")

    def test_nothing_more_says_nothing(self, door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
        """The last page (no cursor): stderr stays empty."""
        door.answer("GET", "/v1/events", {"events": [{"eventId": "evt_1"}]})
        assert main(["runs", "list", "--limit", "1", "--url", door.url]) == 0
        assert capsys.readouterr().err == ""


class TestListingJson:
    @pytest.mark.parametrize(
        ("verb", "path", "page"),
        [
            (["scopes", "list"], "/v1/scopes", {"scopes": [{"scopeKey": "s1", "state": "busy"}], "total": 7}),
            (["outbox", "dead"], "/v1/outbox/dead", {"records": [], "total": 0}),
            (["runs", "list"], "/v1/events", {"events": [{"eventId": "evt_1"}]}),
        ],
        ids=["scopes list", "outbox dead", "runs list"],
    )
    def test_json_is_the_apis_page(
        self,
        door: FakeDoor,
        verb: list[str],
        path: str,
        page: dict[str, object],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """``--json`` prints the API's JSON (docs/cli.md): an audit found ``scopes list`` and ``outbox dead`` dropped
        the page's ``total``, printing only the items and the cursor."""
        door.answer("GET", path, page)
        assert main([*verb, "--json", "--url", door.url]) == 0
        assert json.loads(capsys.readouterr().out) == page


class TestProbeWebErrors:
    URL = "http://127.0.0.1:8000/readyz"

    def _probe(self, status: int, body: object, *, without_broker: bool = False) -> tuple[int, str]:
        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(status, json=body)

        transport = httpx.MockTransport(handler)
        return probe_web(self.URL, None, 1.0, transport=transport, without_broker=without_broker)

    def test_an_error_answer_is_worded_as_every_verb_words_it(self) -> None:
        """A 401's ``{"error": {...}}``: ``HTTP 401 unauthorized: message``, not a Python dict (and no hint to
        give ``--token``, which the probe does not take)."""
        error = {"error": {"code": "unauthorized", "message": "a credential is required", "field": None}}
        assert self._probe(401, error) == (
            1,
            f"{self.URL}: HTTP 401 unauthorized: a credential is required",
        )

    def test_not_ready_names_its_checks(self) -> None:
        """A 503 with checks lists them as ``name: value``; one without says not ready."""
        checks = {"ready": False, "checks": {"redis": "error: ConnectionError", "broker": "ok"}}
        assert self._probe(503, checks) == (
            1,
            f"{self.URL}: HTTP 503: not ready (redis: error: ConnectionError, broker: ok)",
        )
        assert self._probe(503, {"ready": False}) == (1, f"{self.URL}: HTTP 503: not ready")

    def test_without_the_broker_only_the_broker_may_fail(self) -> None:
        """``probe web --without-broker`` (the Kubernetes readiness probe): a 503 whose checks fail on the broker
        alone is ready (the door stores events meanwhile); Redis failing, a store check failing, or no checks to
        read (no credential) is not."""
        broker_away = {"ready": False, "checks": {"redis": "ok", "broker": "error: OperationalError"}}
        assert self._probe(503, broker_away, without_broker=True) == (
            0,
            f"{self.URL}: ready without the broker (HTTP 503: not ready (redis: ok, broker: error: "
            "OperationalError)): events are stored meanwhile",
        )
        assert self._probe(503, broker_away)[0] == 1  # the flag is what allows it
        both = {
            "ready": False,
            "checks": {"redis": "error: ConnectionError", "broker": "error: OperationalError"},
        }
        evicting = {
            "ready": False,
            "checks": {"redis": "ok", "broker": "error: X", "eviction": "error: allkeys-lru"},
        }
        for body in (both, evicting, {"ready": False}):
            assert self._probe(503, body, without_broker=True)[0] == 1, body
