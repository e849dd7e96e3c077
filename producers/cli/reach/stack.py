"""The stack file, ``run``'s side: ``agent-signal run`` (``make run``) writes it (:func:`write_stack`) once the web app is
ready and removes it (:func:`remove_stack`) when it stops, so that CLI verbs in a second terminal find the stack.
Its format, where it is and how a process joins the stack (:func:`~worker.runtime.stack_file.join_stack`: the
stack's embedded Redis, key prefix and queue) are in worker/runtime/stack_file.py, which Celery's own tools
(worker/runtime/celery_app.py) read too; its names are also importable from here.

A worker started in a second terminal joins the stack: with no ``REDIS_URL`` of its own, it takes the stack's
embedded Redis as its store and broker, and its key prefix and queue (unless set here), and says so. A second
``run`` in the same checkout leaves a live stack file alone, and replaces a stale one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from worker.runtime.stack_file import STACK_FILE, StackInfo, checkout_root, join_stack, read_stack, stack_path

__all__ = [
    "STACK_FILE",
    "StackInfo",
    "checkout_root",
    "join_stack",
    "read_stack",
    "remove_stack",
    "stack_path",
    "write_stack",
]


def write_stack(info: StackInfo, path: Path | None = None) -> Path | None:
    """Write the stack file (atomically, mode 0600); None, writing nothing, when another live stack owns it."""
    path = path or stack_path()
    current = read_stack(path)
    if current is not None and current.pid != info.pid and current.running:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        json.dump(info.to_json(), out)
        out.write("\n")
    os.replace(partial, path)
    return path


def remove_stack(path: Path, pid: int) -> None:
    """Remove the stack file if it is still ``pid``'s (and the ``.agent-signal`` directory when then empty)."""
    current = read_stack(path)
    if current is None or current.pid != pid:
        return
    try:
        path.unlink()
        path.parent.rmdir()
    except OSError:
        pass
