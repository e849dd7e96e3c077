"""What a verb that changes state says when it stops partway: Ctrl-C (KeyboardInterrupt, exit 130) or stdout's
reader gone (``… | head -1``: BrokenPipeError, exit 141). Both exit codes stay main.py's; before they are
returned, the verb says on stderr how far it got (``enqueue``: its summary and the last line sent; an ``--all``
loop: its count), so that a rerun can go on from there.

Catch :data:`STOPS` around the work, call :func:`say_stopped`, then raise again.
"""

from __future__ import annotations

import sys

__all__ = ["STOPS", "say_stopped", "why_stopped"]

STOPS = (KeyboardInterrupt, BrokenPipeError)


def why_stopped(exc: BaseException) -> str:
    """A few words for what stopped the verb."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    return "stopped: stdout's reader went away"


def say_stopped(line: str) -> None:
    """``line`` on stderr, flushed; nothing when stderr is gone too (the exit code still says it stopped)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
