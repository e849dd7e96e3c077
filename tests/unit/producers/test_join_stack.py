"""`agent-signal worker` (and `migrate`, `pseudonym`) joins the `make run` stack of its checkout
(producers/cli/reach/stack.py: join_stack) when this terminal names no Redis: the stack's embedded Redis as store and broker, its key prefix and queue; a stack on
URLs of its own, which its file never records, is a one-line SettingsError naming what to set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from producers.cli.main import main
from producers.cli.reach.stack import StackInfo, join_stack, read_stack, write_stack
from tests.unit.cli.conftest import Answer, FakeDoor, serving
from worker.keys.layout import Keys
from worker.settings import Settings, SettingsError
from worker.telemetry.pseudonyms import load_pseudonyms

EMBEDDED = "unix:///tmp/tmpab12/redis.socket"
NAMES = ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL", "AGENT_SIGNAL_KEY_PREFIX", "AGENT_SIGNAL_QUEUE_NAME")


@pytest.fixture(autouse=True)
def no_redis_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second terminal: none of the variables that name a Redis, a broker, a prefix or a queue."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"AGENT_SIGNAL_{name}", raising=False)


def _stack(tmp_path: Path, pid: int, **fields: object) -> Path:
    info = StackInfo(pid=pid, url="http://127.0.0.1:8000", **fields)  # type: ignore[arg-type]
    path = tmp_path / ".agent-signal" / "stack.json"
    assert write_stack(info, path) == path
    return path


def test_joins_the_embedded_redis_with_its_prefix_and_queue(tmp_path: Path, run_pid: int) -> None:
    """Store and broker are the stack's Redis; prefix and queue are the stack's; the line says all of it."""
    path = _stack(tmp_path, run_pid, redis_url=EMBEDDED, key_prefix="t-1:", queue_name="t-1")
    settings, line = join_stack(Settings(), path)
    assert (settings.redis_url, settings.key_prefix, settings.queue_name) == (EMBEDDED, "t-1:", "t-1")
    assert settings.effective_broker_url().startswith("redis+socket:///tmp/tmpab12/redis.socket")
    assert line == (
        f"joining the stack of this checkout ({path}, pid {run_pid}): Redis {EMBEDDED}, broker the same Redis, "
        "key prefix 't-1:', queue 't-1'"
    )


def test_names_set_here_win(tmp_path: Path, run_pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENT_SIGNAL_KEY_PREFIX and BROKER_URL of this terminal are kept; only the Redis comes from the stack."""
    monkeypatch.setenv("AGENT_SIGNAL_KEY_PREFIX", "mine:")
    monkeypatch.setenv("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
    path = _stack(tmp_path, run_pid, redis_url=EMBEDDED, key_prefix="t-1:", queue_name="t-1", own_broker=True)
    settings, line = join_stack(Settings(), path)
    assert (settings.redis_url, settings.key_prefix, settings.queue_name) == (EMBEDDED, "mine:", "t-1")
    assert line is not None and "broker BROKER_URL" in line and "guest" not in line


def test_a_redis_named_here_or_no_live_stack_changes_nothing(tmp_path: Path, run_pid: int) -> None:
    """REDIS_URL set, no stack file, or a stale one (its process gone): the settings as they were, no line."""
    path = _stack(tmp_path, run_pid, redis_url=EMBEDDED)
    own = Settings(redis_url="redis://127.0.0.1:6379/0")
    assert join_stack(own, path) == (own, None)
    plain = Settings()
    assert join_stack(plain, tmp_path / "none" / "stack.json") == (plain, None)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())", "run"], capture_output=True)
    stale = _stack(tmp_path / "stale", int(gone.stdout), redis_url=EMBEDDED)
    assert join_stack(plain, stale) == (plain, None)


def test_a_stack_on_urls_of_its_own_says_what_to_set(tmp_path: Path, run_pid: int) -> None:
    """A stack whose Redis (or broker) came from its own REDIS_URL (BROKER_URL) cannot be joined from the file."""
    with pytest.raises(SettingsError, match=r"runs on a Redis of its own.*set REDIS_URL"):
        join_stack(Settings(), _stack(tmp_path, run_pid))
    path = _stack(tmp_path / "b", run_pid, redis_url=EMBEDDED, own_broker=True)
    with pytest.raises(SettingsError, match=r"uses a broker of its own.*set BROKER_URL"):
        join_stack(Settings(), path)
    joined, _ = join_stack(Settings(), path, need_broker=False)  # migrate, pseudonym: they send no task
    assert joined.redis_url == EMBEDDED


def test_the_stack_file_keeps_the_new_fields(tmp_path: Path, run_pid: int) -> None:
    """ownBroker, keyPrefix and queueName survive a write and a read; an old file without them reads as defaults."""
    path = _stack(tmp_path, run_pid, redis_url=EMBEDDED, own_broker=True, key_prefix="p:", queue_name="q")
    info = read_stack(path)
    assert info is not None and (info.own_broker, info.key_prefix, info.queue_name) == (True, "p:", "q")
    old = StackInfo.from_json({"version": 1, "pid": run_pid, "url": "http://127.0.0.1:8000"})
    assert old is not None and (old.own_broker, old.key_prefix, old.queue_name) == (False, None, None)


@pytest.fixture
def checkout_with_stack(
    tmp_path: Path, run_pid: int, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """A checkout (``pyproject.toml``) as the working directory, whose ``make run`` stack runs on the test's Redis
    under the test's key prefix; this terminal names neither (the settings of that stack are returned)."""
    settings = make_settings()
    (tmp_path / "pyproject.toml").write_text("")
    _stack(tmp_path, run_pid, redis_url=settings.redis_url, key_prefix=settings.key_prefix)
    monkeypatch.delenv("AGENT_SIGNAL_PSEUDONYM_SECRET", raising=False)
    monkeypatch.chdir(tmp_path)
    return settings


def test_migrate_joins_the_stack(
    checkout_with_stack: Settings, redis_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``migrate`` with no REDIS_URL finds the stack's Redis and prefix (it talks to Redis, never to --url): its
    tenants are the stack's, and a line says whose Redis it joined."""
    settings = checkout_with_stack
    redis_client.sadd(Keys(settings.key_prefix).tenants, "acme")
    assert main(["migrate", "runs", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"runs": {"acme": 0, "default": 0}, "dryRun": True}
    assert err.splitlines()[0].startswith("agent-signal migrate: joining the stack of this checkout")


def test_migrate_says_how_it_reaches_redis(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate --help`` says it works straight in Redis, so --url and --token do not apply."""
    with pytest.raises(SystemExit):
        main(["migrate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--url and --token do not apply" in text and "make run" in text


def test_pseudonym_uses_the_stack_key_prefix(
    checkout_with_stack: Settings, redis_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pseudonym`` with no REDIS_URL keys its hash with the secret under the stack's prefix, the one its
    processes log with (not the default prefix's)."""
    settings = checkout_with_stack
    expected = load_pseudonyms(redis_client, settings).of("u1")
    assert main(["pseudonym", "u1"]) == 0
    assert capsys.readouterr().out == f"u1\t{expected}\n"


def test_run_finds_its_examples_from_a_subdirectory_and_refuses_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit: ``run --examples`` with a mistyped path, or ``run`` started in a subdirectory, skipped the replay
    without a word. A path given that does not exist is an error before anything starts; the default is also
    looked for at the checkout's root, and said when it is nowhere."""
    from producers.cli.reach.target import CliError
    from producers.cli.run import DEFAULT_EXAMPLES, _examples_path

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(CliError, match=r"--examples evnets\.jsonl: no such file"):
        _examples_path("evnets.jsonl")
    assert _examples_path(DEFAULT_EXAMPLES) is None
    assert "nothing replayed" in capsys.readouterr().out
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "events.jsonl").write_text("{}\n")
    assert _examples_path(DEFAULT_EXAMPLES) == tmp_path / DEFAULT_EXAMPLES


def test_once_a_stack_needs_a_key_the_cli_says_how_to_make_one_and_keys_redis_makes_it(
    checkout_with_stack: Settings, redis_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's audit: the first `keys create` on a `make run` stack turned authentication on, every verb then
    answered 401 asking for a key nobody had, and inside the checkout REDIS_URL was not used. A 401 from the
    stack without a token names the way back; `keys create --redis` makes an admin key in the stack's Redis."""

    from worker.ops.credentials import CredentialStore

    locked = FakeDoor(default=Answer(401, _error("unauthorized", "missing bearer credential")))
    with serving(locked):
        settings = checkout_with_stack
        stack = read_stack(Path(".agent-signal/stack.json"))
        assert stack is not None
        write_stack(StackInfo(**{**stack.__dict__, "url": locked.url}), Path(".agent-signal/stack.json"))
        assert main(["runs", "list"]) == 1
        assert "keys create --tenant default --role admin --redis" in capsys.readouterr().err
    assert main(["keys", "create", "--tenant", "default", "--role", "admin", "--redis"]) == 0
    made = json.loads(capsys.readouterr().out)
    store = CredentialStore(redis_client, Keys(settings.key_prefix))
    assert store.verify(made["key"]) is not None  # in the stack's Redis, under its prefix


def test_probe_web_without_a_port_asks_the_stack_of_this_checkout(
    checkout_with_stack: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``PORT`` (a pod always sets it) ``probe web`` asked port 8000, whatever port the stack took (a
    walk's stack on 18766 read "connection refused"); it asks the stack's own ``/readyz`` now."""

    for name in ("PORT", "AGENT_SIGNAL_PORT"):
        monkeypatch.delenv(name, raising=False)
    ready = FakeDoor()
    ready.answer("GET", "/readyz", {"status": "ok", "checks": {}})
    with serving(ready):
        stack = read_stack(Path(".agent-signal/stack.json"))
        assert stack is not None
        write_stack(StackInfo(**{**stack.__dict__, "url": ready.url}), Path(".agent-signal/stack.json"))
        assert main(["probe", "web", "--without-broker"]) == 0, capsys.readouterr().err
        assert f"{ready.url}/readyz" in capsys.readouterr().err


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()
