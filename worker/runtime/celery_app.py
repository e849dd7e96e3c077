"""The module-level Celery app for Celery's own tools: ``celery -A worker.runtime.celery_app inspect ping``,
``celery -A worker.runtime.celery_app events``, ``celery -A worker.runtime.celery_app flower`` (run them in the checkout).

``app`` is built on first access (PEP 562 module ``__getattr__``), not at import: importing this module reads
no environment and opens no connection. The first access calls :func:`worker.runtime.app.create_app` with the
settings ``agent-signal worker`` runs with in the same environment (:func:`load_tool_settings`), so the tools see
the same broker, key prefix (``global_keyprefix``), queue and tasks. When ``REDIS_URL`` (and
``REDIS_CLUSTER_URL``) is unset, the ``make run`` stack of this checkout is joined as the worker joins it
(worker/runtime/stack_file.py :func:`~worker.runtime.stack_file.join_stack`): its embedded Redis as store and
broker (unless ``BROKER_URL`` is set), its key prefix and queue (unless ``AGENT_SIGNAL_KEY_PREFIX`` /
``AGENT_SIGNAL_QUEUE_NAME`` are set). Settings that build no app (no Redis or broker named and no stack running, a
stack on a Redis of its own, a bad value) end the tool with one line naming what to set, exit 2, not Celery's
traceback of an app that failed to load.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from celery import Celery

from worker.runtime.app import create_app
from worker.runtime.stack_file import STACK_FILE, join_stack, stack_path
from worker.settings import Settings, SettingsError, load_settings

__all__ = ["app", "load_tool_settings"]

app: Celery  # built by __getattr__ on first access (declared here for readers and type checkers)


def load_tool_settings(start: Path | None = None) -> Settings:
    """The environment's settings, joined to the running ``make run`` stack of the checkout at or above ``start``
    (the working directory) when they name no Redis, as ``agent-signal worker`` joins it; SettingsError when they
    name no Redis nor broker and no stack runs, or the stack cannot be joined (its Redis is one of its own)."""
    settings, _ = join_stack(load_settings(), stack_path(start))
    if not (settings.redis_url or settings.redis_cluster_url or settings.broker_url):
        raise SettingsError(
            f"REDIS_URL is not set and no `make run` stack is running here (no live {STACK_FILE} in this "
            "checkout): set REDIS_URL (and AGENT_SIGNAL_KEY_PREFIX, AGENT_SIGNAL_QUEUE_NAME if the worker's differ "
            "from the defaults)"
        )
    return settings


@functools.cache
def _tool_app() -> Celery:
    try:
        return create_app(load_tool_settings())
    except SettingsError as exc:  # Celery prints a traceback for any exception while it loads the app
        print(f"celery -A {__name__}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def __getattr__(name: str) -> Celery:
    """``app``: the Celery app for this environment's settings, built once per process."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _tool_app()
