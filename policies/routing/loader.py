"""Loading a router config file, and keeping it fresh: ``ReloadingRouter`` re-reads the file when its
modification time or size changes, so edits apply without restarting the web app or the workers.

A version that cannot be loaded (it fails validation, or reading it fails in any other way) is refused: the
last good router keeps serving, ``last_error`` keeps the errors for the API to show until a version loads, and
the file is tried again at the next check (its stamp is remembered only once a version loaded, so a file that
was caught half-written, or fixed within the same second and size, is read again). The refusal is logged once
per stamp and error, not at every check.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path

from policies.routing.config import ConfigError, parse_router_config
from policies.routing.engine import Router
from policies.yaml12 import YAML12Error, load_yaml12

__all__ = ["ReloadingRouter", "config_fingerprint", "load_router", "load_router_text"]

log = logging.getLogger(__name__)

FINGERPRINT_HEX_CHARS = 12  # a short name for one config text, recorded beside each decision


def config_fingerprint(text: str) -> str:
    """``sha256:`` and the first hex digits of the text's SHA-256: which config version answered."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_HEX_CHARS]


def load_router_text(text: str, *, source: str = "<config>") -> Router:
    """Parse and validate YAML text; raise ConfigError (every problem) on failure."""
    try:
        data = load_yaml12(text, source=source)
    except YAML12Error as exc:
        raise ConfigError([str(exc)]) from None
    except RecursionError:  # the YAML parser recurses once per level of nesting
        raise ConfigError([f"{source}: nested too deeply to read"]) from None
    return Router(parse_router_config(data), fingerprint=config_fingerprint(text))


def load_router(path: str | os.PathLike[str]) -> Router:
    """Read, parse and validate a config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"cannot read {path}: not UTF-8 ({exc.reason})"]) from None
    return load_router_text(text, source=str(path))


Stamp = tuple[int, int] | None


class ReloadingRouter:
    """The router for a file, reloaded when the file changes (checked at most every ``check_every_s``)."""

    def __init__(self, path: str | os.PathLike[str], *, check_every_s: float = 0.5) -> None:
        self.path = Path(path)
        self.check_every_s = check_every_s
        self._lock = threading.Lock()
        self._stamp: Stamp = None  # the stamp of the version serving (set only once it loaded)
        self._refused: tuple[Stamp, tuple[str, ...]] | None = None  # the last refusal logged
        self._router: Router | None = None
        self._checked_at = 0.0
        self.last_error: list[str] | None = None
        self.version = 0

    def _stat(self) -> Stamp:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def get(self) -> Router:
        """The current router; raises ConfigError when no valid version was ever loaded."""
        now = time.monotonic()
        with self._lock:
            if self._router is None or now - self._checked_at >= self.check_every_s:
                self._checked_at = now
                stamp = self._stat()
                if stamp != self._stamp or self._router is None:
                    self._load(stamp)
            if self._router is None:
                raise ConfigError(self.last_error or [f"cannot load {self.path}"])
            return self._router

    def _load(self, stamp: Stamp) -> None:
        """Load the file; on any failure keep the serving router and record why (never raises)."""
        try:
            router = load_router(self.path)
        except ConfigError as exc:
            self._refuse(stamp, exc.errors)
        except Exception as exc:
            self._refuse(stamp, [f"{self.path}: {type(exc).__name__}: {exc}"])
        else:
            self._router, self._stamp, self._refused = router, stamp, None
            self.last_error = None
            self.version += 1
            log.info("router config loaded from %s (version %d)", self.path, self.version)

    def _refuse(self, stamp: Stamp, errors: list[str]) -> None:
        self.last_error = errors
        if self._refused != (stamp, tuple(errors)):
            self._refused = (stamp, tuple(errors))
            log.error("router config %s rejected: %s", self.path, "; ".join(errors))
