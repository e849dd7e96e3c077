"""The module-level Celery app for Celery's own tools: ``celery -A worker.runtime.celery_app inspect ping``,
``celery -A worker.runtime.celery_app events``, ``celery -A worker.runtime.celery_app flower`` (run them in the checkout).

``app`` is built on first access (PEP 562 module ``__getattr__``), not at import: importing this module reads
no environment and opens no connection. The first access calls :func:`worker.runtime.app.create_app` with
:func:`worker.settings.load_settings`, so the tools see the same broker, key prefix (``global_keyprefix``),
queue and tasks as ``agent-signal worker`` with the same environment. When ``REDIS_URL`` (and ``BROKER_URL``)
is unset, the embedded Redis of the ``make run`` stack of this checkout is used if one is running (its
``.agent-signal/stack.json``, at or above the working directory, names it as ``redisUrl``); otherwise the access
fails with a :class:`~worker.settings.SettingsError` that says what to set.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from celery import Celery

from worker.runtime.app import create_app
from worker.runtime.embedded import pid_alive
from worker.settings import Settings, SettingsError, load_settings

__all__ = ["STACK_FILE", "app", "load_tool_settings", "stack_redis_url"]

# Written by `agent-signal run` (make run) at the root of the checkout while the stack is up (producers/cli/reach/stack.py).
STACK_FILE = Path(".agent-signal") / "stack.json"

app: Celery  # built by __getattr__ on first access (declared here for readers and type checkers)


def stack_redis_url(start: Path | None = None) -> str | None:
    """``redisUrl`` of a running ``make run`` stack whose stack file is at or above ``start`` (the working
    directory); None when there is none, it is stale (its ``pid`` is gone) or it names no Redis."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        try:
            document = json.loads((directory / STACK_FILE).read_text(encoding="utf-8"))
        except OSError:
            continue
        except ValueError:
            return None
        pid = document.get("pid") if isinstance(document, dict) else None
        if not isinstance(pid, int) or not pid_alive(pid):
            return None
        url = document.get("redisUrl")
        return url if isinstance(url, str) and url else None
    return None


# Any of these set: the environment names the deployment's store (each contract name, and its AGENT_SIGNAL_ alias).
CONFIGURED_NAMES = tuple(
    name
    for base in ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL")
    for name in (base, f"AGENT_SIGNAL_{base}")
)


def load_tool_settings(start: Path | None = None) -> Settings:
    """The environment's settings; with no Redis configured, the running ``make run`` stack's Redis."""
    if any(os.environ.get(name) for name in CONFIGURED_NAMES):
        return load_settings()
    url = stack_redis_url(start)
    if url is None:
        raise SettingsError(
            f"REDIS_URL is not set and no `make run` stack is running here (no live {STACK_FILE} at or "
            "above the working directory): set REDIS_URL (and AGENT_SIGNAL_KEY_PREFIX, "
            "AGENT_SIGNAL_QUEUE_NAME if the worker's differ from the defaults)"
        )
    return load_settings(redis_url=url)


@functools.cache
def _tool_app() -> Celery:
    return create_app(load_tool_settings())


def __getattr__(name: str) -> Celery:
    """``app``: the Celery app for this environment's settings, built once per process."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _tool_app()
