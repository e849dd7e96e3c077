"""Scripts.run sends EVALSHA itself on a plain client and loads a script the server has forgotten (a restart,
SCRIPT FLUSH) before it sends the call again; pipelines keep redis-py's Script."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis
from redis.commands.core import Script

from tests.support.private_redis import private_redis
from worker.store.calls import Renew
from worker.store.scripts import Scripts


def test_a_forgotten_script_is_loaded_again(tmp_path: Path) -> None:
    with private_redis(tmp_path) as url:
        client = Redis.from_url(url, decode_responses=True)
        scripts = Scripts(client)
        client.set("lease", "mine")
        assert scripts.run(Renew("lease", "mine", 60_000)) == 1
        client.script_flush()  # the server forgets every script, as after a restart
        assert scripts.run(Renew("lease", "mine", 60_000)) == 1
        assert scripts.run(Renew("lease", "theirs", 60_000)) == 0
        assert 0 < client.pttl("lease") <= 60_000
        client.close()


def test_a_plain_client_does_not_go_through_redis_py_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with private_redis(tmp_path) as url:
        client = Redis.from_url(url, decode_responses=True)
        scripts = Scripts(client)
        scripts.script("renew")  # registered (a Script) before its __call__ is taken away

        def refused(*args: object, **kwargs: object) -> None:
            raise AssertionError("Script.__call__ ran")

        monkeypatch.setattr(Script, "__call__", refused)
        assert scripts.run(Renew("lease", "mine", 60_000)) == 0
        with pytest.raises(AssertionError, match=r"Script\.__call__ ran"):  # a pipeline still uses it
            scripts.run(Renew("lease", "mine", 60_000), client=client.pipeline())
        client.close()
