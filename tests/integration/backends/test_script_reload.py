"""Scripts.run sends EVALSHA itself on a plain client and loads a script the server has forgotten (a restart,
SCRIPT FLUSH) before it sends the call again; pipelines keep redis-py's Script. Scripts.send sends a call and
reads its reply later, its connection out of the pool until then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.commands.core import Script
from redis.exceptions import ResponseError

from tests.support.private_redis import private_redis
from worker.store.calls import Release, Renew
from worker.store.scripts import Scripts


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Redis]:
    """A client of a private server (its scripts may be flushed)."""
    with private_redis(tmp_path) as url:
        client = Redis.from_url(url, decode_responses=True)
        yield client
        client.close()


def test_a_forgotten_script_is_loaded_again(client: Redis) -> None:
    scripts = Scripts(client)
    client.set("lease", "mine")
    assert scripts.run(Renew("lease", "mine", 60_000)) == 1
    client.script_flush()  # the server forgets every script, as after a restart
    assert scripts.run(Renew("lease", "mine", 60_000)) == 1
    assert scripts.run(Renew("lease", "theirs", 60_000)) == 0
    assert 0 < client.pttl("lease") <= 60_000


def test_a_plain_client_does_not_go_through_redis_py_script(
    client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = Scripts(client)
    scripts.script("renew")  # registered (a Script) before its __call__ is taken away

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("Script.__call__ ran")

    monkeypatch.setattr(Script, "__call__", refused)
    assert scripts.run(Renew("lease", "mine", 60_000)) == 0
    with pytest.raises(AssertionError, match=r"Script\.__call__ ran"):  # a pipeline still uses it
        scripts.run(Renew("lease", "mine", 60_000), client=client.pipeline())


def test_a_sent_call_is_read_later_while_other_calls_go_on(client: Redis) -> None:
    scripts = Scripts(client)
    pool = client.connection_pool
    client.set("lease", "mine")
    sent = scripts.send(Renew("lease", "mine", 60_000))
    assert len(pool._in_use_connections) == 1  # the sent call's, until its reply is read
    assert client.get("lease") == "mine"  # another connection meanwhile
    assert scripts.run(Release("lease", "theirs")) is not None
    assert sent.reply() == 1
    assert len(pool._in_use_connections) == 0
    assert 0 < client.pttl("lease") <= 60_000


def test_a_sent_call_the_server_forgot_is_loaded_and_run_again(client: Redis) -> None:
    scripts = Scripts(client)
    client.set("lease", "mine")
    assert scripts.run(Renew("lease", "mine", 60_000)) == 1
    client.script_flush()
    sent = scripts.send(Renew("lease", "mine", 60_000))
    assert sent.reply() == 1  # NOSCRIPT at the read: loaded, then run again
    assert len(client.connection_pool._in_use_connections) == 0


def test_a_sent_calls_error_reply_is_raised_and_its_connection_kept(client: Redis) -> None:
    scripts = Scripts(client)
    client.rpush("lease", "a list, not a string")  # RENEW's GET meets the wrong type: an error reply
    sent = scripts.send(Renew("lease", "mine", 60_000))
    (conn,) = client.connection_pool._in_use_connections
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        sent.reply()
    assert conn in client.connection_pool._available_connections  # back in the pool, still connected
    assert conn._sock is not None
    with pytest.raises(RuntimeError, match="read \\(or abandoned\\) already"):
        sent.reply()


def test_send_refuses_a_pipeline() -> None:
    scripts = Scripts(Redis().pipeline())
    with pytest.raises(TypeError, match="client of one Redis"):
        scripts.send(Renew("lease", "mine", 60_000))


def test_an_abandoned_call_gives_its_connection_back_disconnected(client: Redis) -> None:
    scripts = Scripts(client)
    sent = scripts.send(Renew("lease", "mine", 60_000))
    (conn,) = client.connection_pool._in_use_connections
    sent.abandon()
    assert conn in client.connection_pool._available_connections and conn._sock is None
    sent.abandon()  # twice: nothing more
    assert client.ping()  # the pool serves on: the reply left unread is gone with its socket
