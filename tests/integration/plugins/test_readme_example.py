"""README's plugin example is ``examples/welcome.py``, word for word, and it runs: loaded by name through
AGENT_SIGNAL_PLUGINS into a real worker process, its source type admitted at the door because the plugin declares
it, its payload checked there, and its action's staged write applied once per event however often the event is
sent. If the plugin API moves, this fails before a reader copies code that no longer works."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import InvalidEvent, Producer
from tests.conftest import wait_for
from worker.keys.layout import Keys

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "welcome.py"
PLUGIN = ["examples.welcome:plugin"]  # how README says to load it (the worker imports it by name)


def _without_docstring(source: str) -> str:
    """The module's code after its docstring."""
    first = ast.parse(source).body[0]
    assert isinstance(first, ast.Expr) and first.end_lineno is not None, "the example opens with a docstring"
    return "\n".join(source.splitlines()[first.end_lineno :]).strip()


def _readme_example() -> str:
    """The README's Python block that defines the plugin factory."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if "def plugin() -> Plugin:" in block]
    assert len(found) == 1, "README shows one plugin example"
    return str(found[0]).strip()


def _signup(source_id: str, user: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"sourceType": "app.user.signed_up", "sourceId": source_id, "userId": user, "payload": payload}


def test_readme_shows_the_example_file_word_for_word() -> None:
    """The code block in README is examples/welcome.py without its docstring."""
    assert _readme_example() == _without_docstring(EXAMPLE.read_text(encoding="utf-8"))


def test_the_readme_example_runs_through_the_engine(
    make_settings: Any, start_worker: Any, redis_client: Redis
) -> None:
    """Two sign-ups (one sent twice) each end done with one welcome; a sign-up without a name is refused."""
    settings = make_settings(plugins=PLUGIN)
    start_worker(settings)
    producer = Producer(settings)
    with pytest.raises(InvalidEvent) as caught:
        producer.enqueue(_signup("s0", "u1", {}))
    assert caught.value.error.field == "payload.name"
    ada = producer.enqueue(_signup("s1", "u1", {"name": "Ada"}))
    grace = producer.enqueue(_signup("s2", "u2", {"name": "Grace"}))
    assert (ada.status, grace.status) == ("accepted", "accepted")
    assert producer.enqueue(_signup("s1", "u1", {"name": "Ada"})).status == "duplicate"
    wait_for(
        lambda: all(producer.status(r.event_id)["status"] == "done" for r in (ada, grace)),
        what="both sign-ups",
    )
    keys = Keys(settings.key_prefix)
    assert redis_client.lrange(keys.plugin("user:u1", "welcomed"), 0, -1) == ["Ada"]
    assert redis_client.lrange(keys.plugin("user:u2", "welcomed"), 0, -1) == ["Grace"]
    producer.close()
