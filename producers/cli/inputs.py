"""What the verbs take from their command line and stdin, checked before they act, each failure one line naming
what is wrong (never a traceback):

* an argument that is not UTF-8 text (``status $'a\\xffb'``: Python hands such bytes over as lone surrogates,
  which no URL, JSON body or Redis key can carry) is refused naming its flag (``--scope``) or its argument
  (``ID``); a file name may hold any bytes the file system does (:func:`any_bytes`);
* ``-`` with stdin closed (``agent-signal enqueue - <&-``: Python's ``sys.stdin`` is then None) is refused;
* numbers a flag cannot hold: :func:`positive_seconds` (finite, above zero, at most ``max_s``) for ``--*-s``
  flags, :func:`tcp_port` for ``PORT``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from producers.cli.reach.target import CliError

__all__ = ["an_id", "any_bytes", "check_text_arguments", "positive_seconds", "stdin_binary", "tcp_port"]


def any_bytes(text: str) -> str:
    """argparse's type for a value taken as given, whatever its bytes: a file name, or Celery's own flags passed
    on to it (:func:`check_text_arguments` skips these)."""
    return text


def an_id(text: str) -> str:
    """An id argument: not empty nor blank (``keys revoke ''`` asked for ``DELETE /v1/keys/``, which answered a
    redirect, and the line said "is that the Agent Signal API?"); argparse names the argument."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an id must not be empty")
    return text


def stdin_binary() -> BinaryIO:
    """stdin as bytes; CliError (exit 2) when it is closed."""
    if sys.stdin is None:
        raise CliError("stdin is closed, so '-' has nothing to read: give a file, or pipe the input in")
    return sys.stdin.buffer


def positive_seconds(max_s: float) -> Callable[[str], float]:
    """argparse's type for a duration in seconds: a finite number above 0 and at most ``max_s`` (``nan``, ``inf``
    and ``0`` are a usage error naming the flag, exit 2)."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not (math.isfinite(value) and 0 < value <= max_s):
            raise argparse.ArgumentTypeError(
                f"{text} is not a number of seconds above 0 and at most {max_s:g}"
            )
        return value

    return seconds


def tcp_port(port: int, name: str = "PORT") -> int:
    """``port`` when it is one a server can listen on (1..65535); else CliError naming the setting."""
    if not 1 <= port <= 65535:
        raise CliError(f"{name} is {port}: a TCP port is 1..65535")
    return port


def check_text_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """CliError (exit 2) naming the first flag or argument of this invocation whose value is not UTF-8 text
    (file names excepted); the value itself is not printed (it may be a credential)."""
    for action in _actions(parser, args):
        if action.type is any_bytes or action.dest == argparse.SUPPRESS:
            continue
        if any(_not_text(value) for value in _strings(getattr(args, action.dest, None))):
            raise CliError(f"{_name(action)} is not UTF-8 text (the shell passed bytes that are not UTF-8)")


def _actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[argparse.Action]:
    """The actions of ``parser`` and of each subcommand chosen in ``args`` (``dlq`` then ``redrive``)."""
    current: argparse.ArgumentParser | None = parser
    while current is not None:
        chosen = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
            else:
                yield action
        current = chosen


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str)]
    return []


def _not_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _name(action: argparse.Action) -> str:
    """``--scope`` for a flag (its longest spelling), ``ID`` for an argument (its metavar, else its name)."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    if isinstance(action.metavar, str):
        return action.metavar
    return action.dest.upper()
