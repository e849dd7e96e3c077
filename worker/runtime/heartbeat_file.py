"""The worker's heartbeat on local disk, for probes that must not talk to the broker or Redis.

``AGENT_SIGNAL_HEARTBEAT_FILE`` (unset: off) names the file. The worker's main process writes it from its start
(Celery's ``worker_init``, before any broker connection: worker/runtime/heartbeat_writer.py) every
``reconcile_interval_s``: until Celery says the worker is ready (``worker_ready``, sent after its first broker
connection) the beat says ``"ready": false``; from then on the background loop (``_sweep_forever`` in
worker/runtime/app.py) writes it with ``"ready": true``, even when Redis is down. So the file says the process and
its loop are alive (liveness), and whether the worker has ever been able to take work (readiness); not that the
store answers now. Kubernetes exec probes and compose healthchecks read it with ``agent-signal probe worker``.

The file is one JSON object ``{"node", "pid", "atMs", "ready"}`` (``node`` is the Celery node name, which
``agent-signal drain`` needs to address this worker; a file without ``ready``, from an earlier release that wrote
it only once ready, reads as ready). It is written atomically: a temporary file in the same directory, then
:func:`os.replace`, so a reader sees the old beat or the new one, never half of one.

Draining: ``agent-signal drain`` (the pod's preStop hook) creates ``<file>.draining`` beside it; from then on
:func:`check` answers "not ready" (the worker still beats, so it stays live while it finishes its drains). The
first beat of a process (:func:`start`) removes a flag left by the previous process in the same pod: an
``emptyDir`` outlives a container restart, and a preStop also runs before a liveness restart.

Everything here is a plain function of a path (and of ``now`` for :func:`check`), so tests need no worker.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DRAIN_SUFFIX",
    "Beat",
    "Verdict",
    "check",
    "default_max_age_s",
    "drain_flag",
    "is_draining",
    "mark_draining",
    "read",
    "remove",
    "start",
    "write",
]

DRAIN_SUFFIX = ".draining"
# A beat older than this many loop intervals is stale: one late pass (a slow reconcile) is not a death. The same
# count as the store's heartbeats (worker.ops.workers_view.FRESH_BEATS: the gauge and the console), a test holds.
STALE_AFTER_INTERVALS = 4


@dataclass(frozen=True)
class Beat:
    """One heartbeat: the Celery node name, the main process's pid, the time in ms since the epoch, and whether
    the worker is ready (False from the process's start until its first broker connection)."""

    node: str
    pid: int
    at_ms: int
    ready: bool = True

    def to_json(self) -> str:
        return json.dumps({"node": self.node, "pid": self.pid, "atMs": self.at_ms, "ready": self.ready})


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: ``ok`` and one line saying why (printed by ``agent-signal probe worker``)."""

    ok: bool
    reason: str


def default_max_age_s(interval_s: float) -> float:
    """How old a beat may be before the worker counts as stuck, for a loop beating every ``interval_s``."""
    return STALE_AFTER_INTERVALS * interval_s


def drain_flag(path: str | Path) -> Path:
    """The drain flag beside the heartbeat file ``path``."""
    return Path(f"{path}{DRAIN_SUFFIX}")


def write(path: str | Path, beat: Beat) -> None:
    """Replace ``path`` with ``beat`` atomically (temp file in the same directory, fsync, os.replace)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(beat.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def start(path: str | Path, beat: Beat) -> None:
    """A process's first beat: forget a drain flag left by an earlier process, then write ``beat``."""
    drain_flag(path).unlink(missing_ok=True)
    write(path, beat)


def read(path: str | Path) -> Beat | None:
    """The beat in ``path``; None when there is no file. A file that is not a beat raises ValueError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        ready = data.get("ready", True) if isinstance(data, dict) else None
        if not isinstance(ready, bool):
            raise TypeError(f"not an object with a boolean ready: {text[:80]!r}")
        return Beat(node=str(data["node"]), pid=int(data["pid"]), at_ms=int(data["atMs"]), ready=ready)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path} is not a heartbeat file ({type(exc).__name__}: {exc})") from None


def mark_draining(path: str | Path) -> None:
    """Create the drain flag beside ``path`` (idempotent)."""
    flag = drain_flag(path)
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()


def is_draining(path: str | Path) -> bool:
    return drain_flag(path).exists()


def remove(path: str | Path) -> None:
    """Remove the heartbeat file (a clean shutdown), leaving the drain flag to the next :func:`start`."""
    Path(path).unlink(missing_ok=True)


def check(path: str | Path, max_age_s: float, now_s: float, *, ready: bool = True) -> Verdict:
    """Fresh (younger than ``max_age_s`` at ``now_s``) and, for readiness (``ready``), a ready beat (the worker
    has connected to its broker) and not draining. Liveness (``ready=False``) asks only for a fresh beat."""
    try:
        beat = read(path)
    except (OSError, ValueError) as exc:
        return Verdict(False, f"unreadable heartbeat: {exc}")
    if beat is None:
        return Verdict(False, f"no heartbeat at {path} (the worker is not running, or has not started yet)")
    age_s = now_s - beat.at_ms / 1000
    if age_s > max_age_s:
        return Verdict(False, f"{beat.node}: stale heartbeat, {age_s:.1f} s old (max {max_age_s:g} s)")
    if ready and not beat.ready:
        return Verdict(False, f"{beat.node}: alive, not ready (no broker connection yet since its start)")
    if ready and is_draining(path):
        return Verdict(False, f"{beat.node}: draining (agent-signal drain), not taking new work")
    return Verdict(True, f"{beat.node}: heartbeat {max(age_s, 0.0):.1f} s old (max {max_age_s:g} s)")
