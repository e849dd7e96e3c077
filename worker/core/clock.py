"""The engine's clock in Unix milliseconds (what every stored time and every ``*_ms`` field uses)."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Now, in Unix milliseconds."""
    return int(time.time() * 1000)
