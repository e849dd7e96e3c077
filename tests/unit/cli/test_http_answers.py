"""A 200 that is not the API's (a JSON list, a string, a proxy's HTML page, an object without what the route
answers) is one line, exit 2, naming what answered: never a traceback, never printed as if it were the answer
(``status`` printed ``[]`` and exit 0). producers/cli/reach/target.py ``Api.call``, producers/cli/chain_view.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from producers.cli.main import main
from tests.unit.cli.conftest import FakeDoor

NOT_THE_API = "answered 200 without a JSON object; is that the Agent Signal API?"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert out == "", out
    return err.strip()


@pytest.mark.parametrize(
    ("verb", "name", "request_line"),
    [
        (["status", "evt_x"], "status", "GET /v1/events/evt_x"),
        (["inspect", "c1"], "inspect", "GET /v1/chains/c1"),
        (["dlq", "list"], "dlq list", "GET /v1/dlq"),
        (["dlq", "redrive", "--all"], "dlq redrive", "GET /v1/dlq"),
        (["dlq", "redrive", "evt_1"], "dlq redrive", "POST /v1/dlq/redrive"),
        (["dlq", "discard", "--all"], "dlq discard", "GET /v1/dlq"),
        (["keys", "list"], "keys list", "GET /v1/keys"),
        (["runs", "list"], "runs list", "GET /v1/events"),
        (["runs", "show", "x"], "runs show", "GET /v1/events/x"),
        (["scopes", "list"], "scopes list", "GET /v1/scopes"),
        (["scopes", "pause", "s"], "scopes pause", "POST /v1/scopes/s/pause"),
        (["events", "cancel", "x"], "events cancel", "POST /v1/events/x/cancel"),
        (["receipts", "list", "--user", "u"], "receipts list", "GET /v1/receipts"),
        (["outbox", "dead"], "outbox dead", "GET /v1/outbox/dead"),
        (["outbox", "redrive", "--all"], "outbox redrive", "GET /v1/outbox/dead"),
    ],
)
def test_a_json_list_is_not_the_api(
    door: FakeDoor, verb: list[str], name: str, request_line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every verb over HTTP, answered ``200 []``: one line naming the request, exit 2."""
    door.answer_everything(b"[]")
    assert main([*verb, "--url", door.url]) == 2
    assert _one_line(capsys) == f"agent-signal {name}: {door.url} {request_line} {NOT_THE_API}"


@pytest.mark.parametrize("body", [b'"ok"', b"42", b"null", b"<html><body>Sign in to the proxy</body></html>"])
def test_a_string_a_number_or_a_page_is_not_the_api(
    door: FakeDoor, body: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    """``status`` answered a JSON string, number or null, or HTML: the same line, exit 2, nothing on stdout."""
    door.answer_everything(body)
    assert main(["status", "evt_x", "--url", door.url]) == 2
    assert _one_line(capsys) == f"agent-signal status: {door.url} GET /v1/events/evt_x {NOT_THE_API}"


@pytest.mark.parametrize(
    "chain",
    [{}, {"record": {}}, {"envelope": [], "record": {}}],
    ids=["empty", "no-envelope", "list-envelope"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["steps", "json"])
def test_inspect_needs_an_envelope_and_a_record(
    door: FakeDoor, chain: dict[str, object], as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON object without the ``envelope`` and ``record`` objects of a stored chain: one line naming what
    answered, exit 2, with or without ``--json``."""
    door.answer("GET", "/v1/chains/c1", chain)
    assert main(["inspect", "c1", "--url", door.url, *(["--json"] if as_json else [])]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"agent-signal inspect: {door.url} GET /v1/chains/c1 answered 200 with no ")
    assert line.endswith(" object; is that the Agent Signal API?")


@pytest.mark.parametrize(
    ("chain", "what"),
    [
        ({"envelope": {}, "record": {}}, "without 'source'"),
        (
            {"envelope": {"chainId": "c1", "source": "x"}, "record": {}},
            "of another shape (TypeError: string indices must be integers",
        ),
    ],
    ids=["empty-envelope", "bad-source"],
)
def test_inspect_steps_need_a_chain_that_reads_as_one(
    door: FakeDoor, chain: dict[str, object], what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its five steps need the chain's parts: one missing or of another kind is one line saying so, exit 2
    (``--json`` prints the document as it came)."""
    door.answer("GET", "/v1/chains/c1", chain)
    assert main(["inspect", "c1", "--url", door.url]) == 2
    line = _one_line(capsys)
    assert line.startswith(
        f"agent-signal inspect: {door.url} GET /v1/chains/c1 answered 200 with a chain {what}"
    )
    assert line.endswith("; is that the Agent Signal API?")


def test_a_listing_without_its_list_is_not_the_api(
    door: FakeDoor, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{"events": "x"}``: an object whose list is no list of objects is one line too, exit 2."""
    door.answer("GET", "/v1/events", {"events": "abc"})
    assert main(["runs", "list", "--url", door.url]) == 2
    assert _one_line(capsys) == (
        f"agent-signal runs list: {door.url} GET /v1/events answered 200 with 'events' not a list of objects; "
        "is that the Agent Signal API?"
    )


def test_a_created_key_needs_its_fields(door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
    """``keys create`` answered an object without the key's fields: one line with the answer's own status."""
    door.answer("POST", "/v1/keys", {"id": "key_1"}, status=201)
    assert main(["keys", "create", "--tenant", "default", "--role", "read", "--url", door.url]) == 2
    assert _one_line(capsys) == (
        f"agent-signal keys create: {door.url} POST /v1/keys answered 201 without 'tenant', 'role', 'key'; "
        "is that the Agent Signal API?"
    )


@pytest.mark.parametrize(("verb", "name"), [(["status", "evt_x"], "status"), (["runs", "list"], "runs list")])
def test_a_404_page_of_another_server_is_not_a_missing_record(
    door: FakeDoor, verb: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CLI pointed at another service (``python -m http.server``) said ``no event 'evt_x'``, exit 1, a wrong
    answer; or printed the page's HTML as the error. A 404 without the API's error object is not the API: exit 2."""
    from tests.unit.cli.conftest import Answer

    door.default = Answer(404, b"<html><body>Nothing matches the given URI</body></html>", "text/html")
    assert main([*verb, "--url", door.url]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"agent-signal {name}: {door.url} GET /v1/events")
    assert line.endswith("answered HTTP 404 without the API's error object; is that the Agent Signal API?")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:99999", "--url has port 99999: a port is 1 to 65535"),
        ("http://127.0.0.1:0", "--url has port 0: a port is 1 to 65535"),
        (
            "http://127.0.0.1:8000/?x=1",
            "--url is the API's base URL, http://HOST:PORT[/PATH], without ?query",
        ),
    ],
)
def test_a_url_no_request_can_go_to_is_refused_naming_the_flag(
    url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port past 65535 was a raw ``ValueError: Port out of range``; port 0 was "cannot reach" without its port;
    a query was dropped without a word."""
    assert main(["runs", "list", "--url", url]) == 2
    assert _one_line(capsys).startswith(f"agent-signal runs list: {says}")


@pytest.mark.parametrize("status", [404, 405])
def test_a_route_the_api_does_not_have_says_so(
    door: FakeDoor, status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API's own answer to a path it has no route for (``--url http://host:8000/docs``, or an older server):
    it said ``HTTP 404 http_404: Not Found``, or for ``status`` that the event does not exist. Now one line naming
    the request and what to check, exit 2."""
    from tests.unit.cli.conftest import Answer

    body = b'{"error": {"code": "http_%d", "message": "Not Found"}}' % status
    door.default = Answer(status, body, "application/json")
    for verb, name in ((["status", "evt_x"], "status"), (["runs", "list"], "runs list")):
        assert main([*verb, "--url", door.url]) == 2
        line = _one_line(capsys)
        assert line.startswith(f"agent-signal {name}: {door.url} GET /v1/events"), line
        assert line.endswith(
            f"answered HTTP {status}: the API has no such route; give its base URL (http://HOST:PORT), "
            "and a server as new as this CLI"
        ), line


def test_enqueue_over_http_says_the_same_of_a_missing_route(
    door: FakeDoor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``enqueue`` sends through the SDK, not the console's client: its no-such-route line is the same, exit 2."""
    from tests.unit.cli.conftest import Answer

    door.default = Answer(404, b'{"error": {"code": "http_404", "message": "Not Found"}}', "application/json")
    events = tmp_path / "events.jsonl"
    events.write_text('{"sourceType": "app.ping", "sourceId": "p1", "payload": {}}\n')
    assert main(["enqueue", str(events), "--url", door.url]) == 2
    err = capsys.readouterr().err
    assert f"{door.url} POST /v1/events answered HTTP 404: the API has no such route" in err, err


def test_a_key_id_with_a_slash_is_no_key(door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
    """Key ids are ``key_<hex>``: one with a slash names no key (the route takes none, so the server's answer
    would be its no-such-route 404), as before: exit 1, and nothing is sent."""
    assert main(["keys", "revoke", "key_a/b", "--url", door.url]) == 1
    assert "no key 'key_a/b'" in capsys.readouterr().err
    assert door.seen == []


def test_a_missing_record_is_still_not_found(door: FakeDoor, capsys: pytest.CaptureFixture[str]) -> None:
    """A route's own 404 (``not_found``) is the record's absence, as before: exit 1."""
    door.answer(
        "GET", "/v1/events/evt_x", {"error": {"code": "not_found", "message": "no event"}}, status=404
    )
    assert main(["status", "evt_x", "--url", door.url]) == 1
    assert "no event 'evt_x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "verb",
    [
        ["runs", "list", "--url", ""],
        ["runs", "list", "--token", " "],
        ["status", "evt_x", "--url", ""],
        ["runs", "list", "--user", ""],
        ["receipts", "list", "--user", ""],
        ["inspect", "c1", "--user", ""],
        ["pseudonym", ""],
        ["events", "cancel", ""],
        ["scopes", "pause", " "],
        ["outbox", "redrive", "topic:t1", ""],
        ["dlq", "redrive", "evt_1", ""],
        ["dlq", "discard", ""],
    ],
)
def test_an_empty_value_is_refused_not_read_as_left_out(
    verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--url ''`` went to the stack, ``--token ''`` sent no credential, ``--user ''`` listed every user's and
    ``pseudonym ''`` printed one: each is a usage error now, naming the argument (exit 2, argparse's)."""
    with pytest.raises(SystemExit) as stopped:
        main(verb)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "must not be empty" in err or "empty; leave" in err, err


@pytest.mark.parametrize(
    ("token", "role", "note"), [(None, "read", True), (None, "admin", True), ("k", "read", False)]
)
def test_the_first_key_says_the_stack_needs_one_now(
    door: FakeDoor,
    token: str | None,
    role: str,
    note: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A key made without a credential is the stack's first: stderr says every call needs one now, and a key
    that is not admin says how to make one that can make more (a read key locked a user out, no word said)."""
    created = {"id": "key_1", "tenant": "default", "role": role, "key": "as_x"}
    door.answer("POST", "/v1/keys", created, status=201)
    args = ["keys", "create", "--tenant", "default", "--role", role, "--url", door.url]
    assert main([*args, *(["--token", token] if token else [])]) == 0
    err = capsys.readouterr().err
    assert ("the deployment's first key: every call needs a credential now" in err) is note, err
    assert ("--role admin --redis" in err) is (note and role != "admin"), err
