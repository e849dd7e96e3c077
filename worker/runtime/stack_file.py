"""The stack file: how ``agent-signal run`` (``make run``) tells processes in a second terminal where it is, and how
they join it (:func:`join_stack`): ``agent-signal worker`` and the other CLI verbs (producers/cli/reach/stack.py),
and Celery's own tools (worker/runtime/celery_app.py), which cannot import the CLI.

``run`` writes ``<checkout>/.agent-signal/stack.json`` once the web app is ready and removes it when it stops
(SIGINT or SIGTERM). The checkout is the nearest directory at or above the working directory holding ``.git``
or ``pyproject.toml`` (else the working directory itself); readers look in the same place, so any directory of
the checkout finds the stack. Format (``version`` 1, one JSON object, mode 0600)::

    {"version": 1, "pid": 4242, "url": "http://127.0.0.1:8000",
     "redisUrl": "unix:///tmp/tmpab12/redis.socket", "redisPid": 4250,
     "tempDirs": ["/tmp/tmpab12", "/tmp/agent-signal-redis-cd34"], "ownBroker": false,
     "keyPrefix": "agent-signal:", "queueName": "agent-signal", "startedAt": 1718000000000}

``pid`` is the ``run`` process; ``redisUrl``, ``redisPid`` and ``tempDirs`` describe the embedded Redis and are
null / empty when ``REDIS_URL`` was set (a server of your own: its URL may hold a password, so it is not written).
``ownBroker`` is true when ``BROKER_URL`` was set (its URL is not written either; false: the broker is the Redis).
``keyPrefix`` and ``queueName`` are the stack's ``AGENT_SIGNAL_KEY_PREFIX`` and ``AGENT_SIGNAL_QUEUE_NAME``.
The file holds no secret.

A process that joins the stack, with no ``REDIS_URL`` of its own, takes the stack's embedded Redis as its store and
broker, and its key prefix and queue (unless set here). A file whose ``pid`` is not a running ``run`` (the stack was
killed) is stale: it is ignored, and the next ``run`` replaces it. Writing it is ``run``'s
(producers/cli/reach/stack.py ``write_stack``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.runtime.embedded import pid_alive

if TYPE_CHECKING:  # the CLI reads stack files without the settings' models; join_stack's callers hold them
    from worker.settings import Settings

__all__ = ["STACK_FILE", "StackInfo", "checkout_root", "join_stack", "read_stack", "stack_path"]

STACK_FILE = Path(".agent-signal") / "stack.json"
VERSION = 1
_MARKERS = (".git", "pyproject.toml")


@dataclass(frozen=True)
class StackInfo:
    """What one ``agent-signal run`` started (see the module doc for the JSON names)."""

    pid: int
    url: str
    redis_url: str | None = None
    redis_pid: int | None = None
    temp_dirs: list[str] = field(default_factory=list)
    started_at_ms: int = 0
    own_broker: bool = False
    key_prefix: str | None = None
    queue_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "pid": self.pid,
            "url": self.url,
            "redisUrl": self.redis_url,
            "redisPid": self.redis_pid,
            "tempDirs": self.temp_dirs,
            "ownBroker": self.own_broker,
            "keyPrefix": self.key_prefix,
            "queueName": self.queue_name,
            "startedAt": self.started_at_ms or int(time.time() * 1000),
        }

    @classmethod
    def from_json(cls, data: Any) -> StackInfo | None:
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            return None
        if not isinstance(data.get("url"), str):
            return None
        redis_pid, dirs, started = data.get("redisPid"), data.get("tempDirs"), data.get("startedAt")
        return cls(
            pid=data["pid"],
            url=data["url"],
            redis_url=data.get("redisUrl") if isinstance(data.get("redisUrl"), str) else None,
            redis_pid=redis_pid if isinstance(redis_pid, int) else None,
            temp_dirs=[d for d in dirs if isinstance(d, str)] if isinstance(dirs, list) else [],
            started_at_ms=started if isinstance(started, int) else 0,
            own_broker=data.get("ownBroker") is True,
            key_prefix=_text(data.get("keyPrefix")),
            queue_name=_text(data.get("queueName")),
        )

    @property
    def running(self) -> bool:
        """True while ``pid`` is a live ``agent-signal run`` (not a stale file, not a recycled pid)."""
        return pid_alive(self.pid) and _is_run_process(self.pid)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _is_run_process(pid: int) -> bool:
    """The command line of ``pid`` ends in the ``run`` verb (``agent-signal run``, ``python -m producers.cli run``);
    without ``/proc`` the pid's existence has to do."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    return b"run" in argv


def checkout_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (the working directory) holding ``.git`` or ``pyproject.toml``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in _MARKERS):
            return directory
    return here


def stack_path(start: Path | None = None) -> Path:
    return checkout_root(start) / STACK_FILE


def read_stack(path: Path | None = None) -> StackInfo | None:
    """The stack file's contents (running or stale), or None when there is none or it is unreadable."""
    path = path or stack_path()
    try:
        return StackInfo.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def join_stack(
    settings: Settings, path: Path | None = None, *, need_broker: bool = True
) -> tuple[Settings, str | None]:
    """``settings`` for a process that joins the running stack of this checkout, and the line that says so.

    Only when ``settings`` name no Redis (``REDIS_URL``, ``REDIS_CLUSTER_URL``) and a stack is running: its
    embedded Redis becomes the store, and the broker too unless ``BROKER_URL`` is set here; its key prefix and
    queue name too, unless set here (``AGENT_SIGNAL_KEY_PREFIX``, ``AGENT_SIGNAL_QUEUE_NAME``). A stack on a Redis
    (or broker) of its own cannot be joined from its file, which does not hold those URLs: a SettingsError says
    which to set (the broker only with ``need_broker``: ``migrate`` and ``pseudonym`` send no task). Without a
    running stack, ``settings`` are returned as they are (and the caller's ``require_redis_url`` says that
    ``REDIS_URL`` is not set).
    """
    from worker.settings import SettingsError  # imported already by whoever made ``settings``

    if settings.redis_url or settings.redis_cluster_url:
        return settings, None
    path = path or stack_path()
    stack = read_stack(path)
    if stack is None or not stack.running:
        return settings, None
    if stack.redis_url is None:
        raise SettingsError(
            f"the stack of this checkout ({path}, pid {stack.pid}) runs on a Redis of its own, which its stack "
            "file does not record (its URL may hold a password): set REDIS_URL (and BROKER_URL) as for make run"
        )
    if need_broker and stack.own_broker and not settings.broker_url:
        raise SettingsError(
            f"the stack of this checkout ({path}, pid {stack.pid}) uses a broker of its own, which its stack "
            "file does not record: set BROKER_URL as for make run"
        )
    update: dict[str, Any] = {"redis_url": stack.redis_url}
    if stack.key_prefix and "key_prefix" not in settings.model_fields_set:
        update["key_prefix"] = stack.key_prefix
    if stack.queue_name and "queue_name" not in settings.model_fields_set:
        update["queue_name"] = stack.queue_name
    joined = settings.model_copy(update=update)
    broker = "BROKER_URL" if settings.broker_url else "the same Redis"
    prefix = joined.key_prefix  # named in a message, not a key
    line = (
        f"joining the stack of this checkout ({path}, pid {stack.pid}): Redis {stack.redis_url}, "
        f"broker {broker}, key prefix {prefix!r}, queue {joined.queue_name!r}"
    )
    return joined, line
