"""What the CLI is given, refused before it acts in one line naming what is wrong, never a traceback
(producers/cli/inputs.py and its callers): ``-`` with stdin closed; flags a number cannot fill (``--concurrency -1``,
``--timeout-s inf``, ``--max-age-s nan`` or ``0``, ``PORT=99999``); arguments that are not UTF-8 text, named by
flag or argument (file names excepted); a ``--tenant`` that is no tenant, before any line of the file is
reported (and before ``keys`` reads or writes a key); and what a script line that is not UTF-8 does to ``functions simulate`` (that line's error only).
Against real processes: Celery's own flags after ``worker --`` that its parser refuses (one line naming the flag),
the ids ``.`` and ``..`` at a real web app (its clean 404, not the events list), and ``run``'s replay of a line
nested too deep (that line's rejection, through ``enqueue``'s line reader; no RecursionError)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from producers.cli import run
from producers.cli.main import build_parser, main
from producers.cli.reach.target import quote_id
from tests.conftest import ROOT, settings_env

FUNCTIONS = ROOT / "examples" / "functions"
ROUTER = ROOT / "bench" / "data" / "router.yaml"
NAMES = ("AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN", "REDIS_URL", "AGENT_SIGNAL_REDIS_URL", "PORT")
TURN = '{"turn": {"userMessaged": false}}'


@pytest.fixture(autouse=True)
def second_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL, credential, Redis or port from this environment, and a working directory with no stack file."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """argparse's exit 2 for ``argv``; its last line (``agent-signal …: error: argument --flag: …``)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


class TestClosedStdin:
    @pytest.mark.parametrize(
        ("argv", "verb"),
        [
            (["enqueue", "-"], "enqueue"),
            (["route", "--config", str(ROUTER), "-"], "route"),
            (["route", "--config", str(ROUTER), "--batch", "-"], "route"),
            (["functions", "simulate", "--functions", str(FUNCTIONS), "--script", "-"], "functions simulate"),
        ],
        ids=["enqueue", "route", "route --batch", "functions simulate"],
    )
    def test_dash_with_stdin_closed_is_one_line(self, make_settings: Any, argv: list[str], verb: str) -> None:
        """``… - <&-``: exit 2 and one line saying stdin is closed (Python's sys.stdin is then None)."""
        result = subprocess.run(
            [sys.executable, "-m", "producers.cli", *argv],
            cwd="/",
            env=settings_env(make_settings()),
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(0),
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == (
            f"agent-signal {verb}: stdin is closed, so '-' has nothing to read: give a file, or pipe the input in"
        )


class TestNumbers:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["worker", "--concurrency", "-1"], "argument --concurrency: -1 is less than 1"),
            (["worker", "--concurrency", "0"], "argument --concurrency: 0 is less than 1"),
            (["probe", "web", "--timeout-s", "inf"], "argument --timeout-s: inf is not a number of seconds"),
            (["probe", "web", "--timeout-s", "nan"], "argument --timeout-s: nan is not a number of seconds"),
            (
                ["probe", "web", "--timeout-s", "1e300"],
                "argument --timeout-s: 1e300 is not a number of seconds",
            ),
            (["drain", "--timeout-s", "-1"], "argument --timeout-s: -1 is not a number of seconds"),
            (["keys", "revoke", ""], "argument ID: an id must not be empty"),  # was DELETE /v1/keys/: a 307
            (["keys", "revoke", " "], "argument ID: an id must not be empty"),
            (
                ["probe", "worker", "--max-age-s", "nan"],
                "argument --max-age-s: nan is not a number of seconds",
            ),
            (["probe", "worker", "--max-age-s", "0"], "argument --max-age-s: 0 is not a number of seconds"),
            (
                ["probe", "worker", "--max-age-s", "soon"],
                "argument --max-age-s: 'soon' is not a number of seconds",
            ),
        ],
    )
    def test_a_flag_out_of_bounds_is_a_usage_error_naming_it(
        self, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Bounded before anything runs: a NaN max age no longer passes every beat as fresh, an infinite timeout no
        longer overflows the clock, a negative concurrency no longer reaches Celery's parser."""
        assert message in _usage_error(argv, capsys)

    def test_a_port_out_of_range_names_port(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``PORT=99999 agent-signal web`` (and ``probe web``, ``run``): one line naming PORT, exit 2, no
        OverflowError (``run`` met one binding its free-port check)."""
        monkeypatch.setenv("PORT", "99999")
        refusal = "SettingsError: refusing to start: DoorSettings: PORT: Input should be less than or equal to 65535"
        for argv in (["web"], ["probe", "web"], ["run"]):
            assert main(argv) == 2
            assert _one_line(capsys) == f"agent-signal {' '.join(argv)}: {refusal}"

    def test_a_port_in_use_or_a_host_not_here_names_the_setting(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_url: str
    ) -> None:
        """An audit: ``agent-signal web`` on a port in use printed uvicorn's ``[Errno 98] … address already in use``
        and exited 3, after every boot check; a host that is no address here, ``Name or service not known``. Now
        the socket is bound first: one line naming PORT or AGENT_SIGNAL_HOST, exit 2."""
        monkeypatch.setenv("REDIS_URL", redis_url)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            monkeypatch.setenv("PORT", str(taken.getsockname()[1]))
            assert main(["web"]) == 2
            assert _one_line(capsys).endswith(
                f"PORT {taken.getsockname()[1]} on 127.0.0.1 is in use: stop what listens there, or set PORT"
            )
        monkeypatch.setenv("AGENT_SIGNAL_HOST", "192.0.2.1")  # TEST-NET-1: an address, not this machine's
        assert main(["web"]) == 2
        assert "cannot listen on AGENT_SIGNAL_HOST '192.0.2.1'" in _one_line(capsys)


class TestLogLevel:
    @pytest.mark.parametrize("verb", ["worker", "web"])
    def test_a_bad_level_is_a_usage_error_naming_the_flag(
        self, verb: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An audit: ``--loglevel BOGUS`` ended the command with ``ValueError: Unknown level: 'BOGUS'`` from logging,
        no usage line and no flag named. Now argparse's usage error names ``--loglevel`` and the levels."""
        assert _usage_error([verb, "--loglevel", "BOGUS"], capsys) == (
            f"agent-signal {verb}: error: argument --loglevel: 'BOGUS' is not a log level: "
            "give DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )

    @pytest.mark.parametrize(
        ("given", "passed_on"),
        [
            ("debug", "DEBUG"),
            ("Info", "INFO"),
            ("warn", "WARNING"),
            ("fatal", "FATAL"),
            ("CRITICAL", "CRITICAL"),
        ],
    )
    def test_the_levels_taken_before_are_taken_in_any_case(self, given: str, passed_on: str) -> None:
        """What logging and Celery took (any case; WARN, FATAL) is still taken, passed on upper-cased; INFO by default."""
        parser = build_parser()
        for verb in ("worker", "web"):
            assert parser.parse_args([verb, "--loglevel", given]).loglevel == passed_on
            assert parser.parse_args([verb]).loglevel == "INFO"


class TestArgumentsNotText:
    @pytest.mark.parametrize(
        ("argv", "line"),
        [
            (
                ["status", "a\udcffb", "--url", "http://127.0.0.1:1"],
                "agent-signal status: ID is not UTF-8 text",
            ),
            (
                ["inspect", "\udcff", "--url", "http://127.0.0.1:1"],
                "agent-signal inspect: CHAIN_ID is not UTF-8",
            ),
            (
                ["runs", "list", "--scope", "\udcff", "--url", "http://127.0.0.1:1"],
                "agent-signal runs list: --scope is not UTF-8 text",
            ),
            (
                ["status", "x", "--url", "http://127.0.0.1:1/\udcff"],
                "agent-signal status: --url is not UTF-8 text",
            ),
            (
                ["dlq", "list", "--url", "http://127.0.0.1:1", "--token", "as_\udcffsecret"],
                "agent-signal dlq list: --token is not UTF-8 text",
            ),
        ],
        ids=["status ID", "inspect CHAIN_ID", "runs --scope", "--url", "--token"],
    )
    def test_bytes_that_are_not_utf8_name_their_flag_or_argument(
        self, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``status $'a\\xffb'``: one line naming the argument (the value unprinted: it may be a secret), exit 2,
        before anything is sent; no UnicodeEncodeError naming nothing."""
        assert main(argv) == 2
        said = _one_line(capsys)
        assert said.startswith(line) and "secret" not in said and "\\udcff" not in said

    def test_a_file_name_may_hold_any_bytes(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A script whose name is not UTF-8 (a file system allows it) is read as any other."""
        script = tmp_path / "steps-\udcff.jsonl"
        script.write_text(TURN + "\n")
        assert main(["functions", "simulate", "--functions", str(FUNCTIONS), "--script", str(script)]) == 0
        assert json.loads(capsys.readouterr().out)["step"] == 0


def test_dot_ids_are_sent_encoded_not_as_path_segments() -> None:
    """``.`` and ``..`` as an id would be read by the URL as "this" and "the parent" segment (``status .`` listed
    every event): they go as %2E, which the server looks up as the id (its 404)."""
    assert (quote_id("."), quote_id(".."), quote_id("a.b"), quote_id("chain:m1")) == (
        "%2E",
        "%2E%2E",
        "a.b",
        "chain:m1",
    )


def test_a_bad_tenant_is_the_only_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``enqueue bad.jsonl --tenant ../x``: the tenant is refused before the file is read, so its line is the only
    one (not after each bad line's rejection), exit 2."""
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # never reached: the tenant is checked first
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"not json\n[1]\n\xff\n")
    assert main(["enqueue", str(path), "--tenant", "../x"]) == 2
    assert _one_line(capsys) == (
        "agent-signal enqueue: --tenant: tenant must match ^[a-z0-9][a-z0-9_-]{0,62}$ (got '../x')"
    )
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "list", "--tenant", "x y", "--redis"],
        ["keys", "list", "--tenant", "Acme", "--redis"],
        ["keys", "list", "--tenant", "Acme"],  # REDIS_URL the target: straight to Redis too
        ["keys", "create", "--tenant", "Acme", "--role", "read", "--redis"],
    ],
)
def test_keys_with_a_bad_tenant_is_one_line(
    argv: list[str], make_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``keys list --tenant Acme --redis`` printed ``[]`` and exited 0 (as if the tenant had no keys), ``keys
    create`` named the error's type: each is the line every verb prints for such a ``--tenant``, exit 2."""
    for name, value in settings_env(make_settings()).items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    tenant = argv[argv.index("--tenant") + 1]
    assert _one_line(capsys) == (
        f"agent-signal keys {argv[1]}: --tenant: tenant must match ^[a-z0-9][a-z0-9_-]{{0,62}}$ (got {tenant!r})"
    )
    assert capsys.readouterr().out == ""


def test_keys_create_with_a_name_too_long_names_the_flag(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A walk: ``keys create --name <500 characters> --redis`` printed ``CredentialError: name must be …``, the
    exception's class and not the flag. It is the flag now, exit 2, and no key made."""
    for name, value in settings_env(make_settings()).items():
        monkeypatch.setenv(name, value)
    argv = ["keys", "create", "--tenant", "acme", "--role", "read", "--name", "x" * 500, "--redis"]
    assert main(argv) == 2
    assert (
        _one_line(capsys) == "agent-signal keys create: --name: name must be at most 100 printable characters"
    )
    assert capsys.readouterr().out == ""


def test_a_script_line_not_utf8_is_that_lines_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``functions simulate``: a line of bytes that are not UTF-8 is that step's error, named as ``enqueue`` names
    it; the steps before and after it still print (one JSON line per input line), exit 1."""
    script = tmp_path / "steps.jsonl"
    script.write_bytes(
        TURN.encode() + b"\n" + b'{"turn": "caf\xe9"}\r\n' + TURN.encode() + b"\r" + TURN.encode()
    )
    assert main(["functions", "simulate", "--functions", str(FUNCTIONS), "--script", str(script)]) == 1
    out, err = capsys.readouterr()
    steps = [json.loads(line) for line in out.splitlines()]
    assert [step["step"] for step in steps] == [0, 1, 2, 3]
    assert steps[1]["result"] == {"error": "not UTF-8 (byte 0xe9 at column 14)"}
    assert [step["result"] for step in (steps[0], steps[2], steps[3])] == [None, None, None]
    assert err.splitlines() == ["line 2: not UTF-8 (byte 0xe9 at column 14)"]


# ---- against real processes and a real Redis ----------------------------------------------------------


def _cli(settings: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI on the test's Redis, run outside any checkout (no stack file of this one is picked up)."""
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd="/",
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--bogus-flag"], "agent-signal worker: celery worker: No such option '--bogus-flag'."),
        (
            ["--concurrency", "-1"],
            "agent-signal worker: celery worker: Invalid value for '-c' / '--concurrency'",
        ),
    ],
    ids=["unknown", "out of range"],
)
def test_a_celery_flag_refused_is_one_line(make_settings: Any, flags: list[str], line: str) -> None:
    """``agent-signal worker -- --bogus-flag``: exit 2 with Celery's own message naming the flag, no traceback."""
    result = _cli(make_settings(), "worker", "--", *flags)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(line), result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("dots", [".", ".."])
def test_a_dot_id_is_an_id(make_settings: Any, serve_web: Any, dots: str) -> None:
    """``status .`` and ``runs show ..`` ask the web app for that id (a 404), never for ``/v1/events`` (the list)."""
    settings = make_settings()
    _, url = serve_web(settings)
    status = _cli(settings, "status", dots, "--url", url)
    assert (status.returncode, status.stdout) == (1, ""), status.stdout
    assert status.stderr.strip() == f"agent-signal status: no event {dots!r}"
    show = _cli(settings, "runs", "show", dots, "--url", url)
    assert (show.returncode, show.stdout) == (1, "")
    assert show.stderr.strip().startswith(f"agent-signal runs show: HTTP 404 not_found: no event {dots!r}")


@pytest.mark.integration
def test_run_replays_a_line_nested_too_deep_as_its_rejection(
    make_settings: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run --examples deep.json``: a line of 100,000 nested arrays and a line that is no event are each rejected
    naming their line, as ``enqueue`` rejects them; the replay goes on to its summary."""
    examples = tmp_path / "deep.json"
    examples.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps({"sourceType": "x"}) + "\n")
    run._replay(make_settings(), str(examples))
    out = capsys.readouterr().out
    assert "line 1: rejected: nested deeper than 62 levels" in out
    assert "line 2: rejected:" in out
    assert '{"accepted":0,"duplicate":0,"rejected":2}' in out


def test_enqueue_into_a_store_it_cannot_reach_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No line is to blame for a store that cannot be reached: exit 2, as every verb that cannot reach its target,
    not 1 (a rejected line); the summary still comes last."""
    from tests.conftest import free_port

    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    path = tmp_path / "one.jsonl"
    path.write_text(
        '{"sourceType": "agent.user.message", "sourceId": "m1", "scopeKey": "topic:t", "payload": {}}\n'
    )
    assert main(["enqueue", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "the store is unavailable" in err and out.strip().startswith('{"accepted":0')


@pytest.mark.parametrize("host", ["", "0.0.0.0", "localhost", "127.0.0.1"])
def test_the_hosts_uvicorn_took_are_bound(host: str) -> None:
    """A review: ``AGENT_SIGNAL_HOST=""`` (every interface, as asyncio reads it for uvicorn) was refused as no
    address, and a name bound its first address only; each address the host resolves to is bound now."""
    from producers.http.serve import bound_sockets
    from tests.conftest import free_port

    port = free_port()
    sockets = bound_sockets(host, port)
    try:
        assert sockets and {sock.getsockname()[1] for sock in sockets} == {port}
        if host == "":
            assert "0.0.0.0" in {sock.getsockname()[0] for sock in sockets}
    finally:
        for sock in sockets:
            sock.close()


def test_a_store_that_cannot_be_reached_names_redis_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CLI audit: a verb straight to Redis said ``ConnectionError: Error 111 …`` without naming the setting."""
    from tests.conftest import free_port

    port = free_port()
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{port}/0")
    assert main(["status", "evt_x"]) == 2
    line = _one_line(capsys)
    assert line.startswith("agent-signal status: cannot reach the store: ") and line.endswith(
        "; check REDIS_URL"
    )
    assert f"127.0.0.1:{port}" in line


def test_a_dlq_cursor_no_page_gave_names_the_flag_on_the_direct_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_url: str, prefix: str
) -> None:
    """A CLI audit: straight to Redis, ``dlq list --cursor garbage`` said ``BadDlqCursor: …``; over HTTP the 422
    names the field."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("AGENT_SIGNAL_KEY_PREFIX", prefix)
    assert main(["dlq", "list", "--cursor", "garbage"]) == 2
    assert (
        _one_line(capsys)
        == "agent-signal dlq list: --cursor must be a cursor a page printed (<ms>:<eventId>)"
    )


def test_enqueue_says_its_rejections_in_line_order(
    tmp_path: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A walk: a file whose first line the store refused (an unknown source type) and whose next two were no JSON
    printed lines 2, 3, then 1: lines refused as read went out at once, the batch's after it was sent. They are
    said with the batch around them now, in line order."""
    for name, value in settings_env(make_settings()).items():
        monkeypatch.setenv(name, value)
    event = '{"sourceType": "%s", "sourceId": "m%d", "scopeKey": "topic:t", "payload": {}}'
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join([event % ("no.such.type", 1), "{not json", "[1,", event % ("agent.user.message", 4), "}"])
        + "\n"
    )
    assert main(["enqueue", str(path)]) == 1
    out, err = capsys.readouterr()
    numbers = [int(line.split(":")[0].split()[1]) for line in err.splitlines() if line.startswith("line ")]
    assert numbers == [1, 2, 3, 5], err
    assert json.loads(out.strip().splitlines()[-1])["accepted"] == 1
