"""``agent-signal --version``: the package's version and the code's revision, so an operator can tell which of
docs/operations.md's upgrade notes apply to what they run.

The revision is ``AGENT_SIGNAL_REVISION`` when set (deploy/Dockerfile sets it from its build argument of that
name), else the commit of the git checkout the code runs from (``make run``), else left out. Worked out only when
asked: the flag's action runs it, so no other verb pays for a ``git`` call.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VersionAction", "version_text"]

PACKAGE = "agent-signal"
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # a checkout's top: where .git is, when it is one
GIT_TIMEOUT_S = 5


def version_text(environ: dict[str, str] | None = None) -> str:
    """``agent-signal 0.1.0 (revision)``; the revision left out when none is known."""
    env = os.environ if environ is None else environ
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    revision = env.get("AGENT_SIGNAL_REVISION", "").strip() or _checkout_revision()
    return f"{PACKAGE} {version}" + (f" ({revision})" if revision else "")


def _checkout_revision() -> str:
    """``commit <hash> of <date>`` (``+ changes`` when the tree differs from it), or "" outside a checkout."""
    if not (SOURCE_ROOT / ".git").exists():
        return ""
    git = ["git", "-C", str(SOURCE_ROOT)]
    try:
        head = subprocess.run(
            [*git, "log", "-1", "--format=%h %cs"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    fields = head.stdout.split()
    if head.returncode != 0 or len(fields) != 2:
        return ""
    changed = " + changes" if dirty.returncode == 0 and dirty.stdout.strip() else ""
    return f"commit {fields[0]} of {fields[1]}{changed}"


class VersionAction(argparse.Action):
    """``--version``: prints :func:`version_text` and exits 0 (argparse's own action formats it when the parser
    is built)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_text(), file=sys.stdout, flush=True)
        parser.exit(0)
