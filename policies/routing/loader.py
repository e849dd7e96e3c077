"""Loading a router config file, and keeping it fresh: ``ReloadingRouter`` re-reads the file when its
modification time or size changes, so edits apply without restarting the web app or the workers. A new
version that fails validation is refused (the previous one keeps serving) and its errors are kept in
``last_error`` for the API to show.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from policies.routing.config import ConfigError, parse_router_config
from policies.routing.engine import Router
from policies.yaml12 import YAML12Error, load_yaml12

__all__ = ["ReloadingRouter", "load_router", "load_router_text"]

log = logging.getLogger(__name__)


def load_router_text(text: str, *, source: str = "<config>") -> Router:
    """Parse and validate YAML text; raise ConfigError (every problem) on failure."""
    try:
        data = load_yaml12(text, source=source)
    except YAML12Error as exc:
        raise ConfigError([str(exc)]) from None
    return Router(parse_router_config(data))


def load_router(path: str | os.PathLike[str]) -> Router:
    """Read, parse and validate a config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    return load_router_text(text, source=str(path))


class ReloadingRouter:
    """The router for a file, reloaded when the file changes (checked at most every ``check_every_s``)."""

    def __init__(self, path: str | os.PathLike[str], *, check_every_s: float = 0.5) -> None:
        self.path = Path(path)
        self.check_every_s = check_every_s
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._router: Router | None = None
        self._checked_at = 0.0
        self.last_error: list[str] | None = None
        self.version = 0

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def get(self) -> Router:
        """The current router; raises ConfigError when no valid version was ever loaded."""
        import time

        now = time.monotonic()
        with self._lock:
            if self._router is None or now - self._checked_at >= self.check_every_s:
                self._checked_at = now
                stamp = self._stat()
                if stamp != self._stamp or self._router is None:
                    self._stamp = stamp
                    try:
                        self._router = load_router(self.path)
                        self.last_error = None
                        self.version += 1
                        log.info("router config loaded from %s (version %d)", self.path, self.version)
                    except ConfigError as exc:
                        self.last_error = exc.errors
                        log.error("router config %s rejected: %s", self.path, "; ".join(exc.errors))
            if self._router is None:
                raise ConfigError(self.last_error or [f"cannot load {self.path}"])
            return self._router
