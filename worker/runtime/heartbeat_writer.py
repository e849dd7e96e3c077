"""Writing the worker main process's heartbeat file (worker/runtime/heartbeat_file.py): one beat
(:func:`write_beat`), and the beats from the process's start until the worker is ready (:class:`StartupBeat`).

Why beats before ready: Celery sends ``worker_ready`` only after its first broker connection, and it retries that
connection for as long as the broker is down. A worker started during a broker or Redis outage wrote no heartbeat
then, so its liveness probe (``agent-signal probe worker --liveness``) failed and Kubernetes restarted it, in a
loop, for an outage that restarts cannot fix. Celery's ``worker_init`` comes at the start of the main process,
before any connection: :class:`StartupBeat` starts there and beats ``"ready": false`` every interval (alive, not
ready). At ``worker_ready`` it stops, and the main process's background loop (``_sweep_forever`` in
worker/runtime/app.py, which also reconciles and needs the store) beats ``"ready": true`` from then on.
"""

from __future__ import annotations

import logging
import os
import threading

from worker.core.clock import host_ms
from worker.runtime import heartbeat_file
from worker.telemetry.log_privacy import describe_error

__all__ = ["StartupBeat", "write_beat"]

log = logging.getLogger(__name__)


def write_beat(path: str, hostname: str, *, first: bool = False, ready: bool = True) -> None:
    """Write this process's beat into ``path`` (``first``: the process's first, which also clears a drain flag an
    earlier process left); never raises."""
    # the host's own clock: the probe reading this file runs on this host and reads it (a review: a beat on Redis's
    # clock read 90 s old when fresh on a host 90 s ahead, and the kubelet restarted the worker in a loop)
    beat = heartbeat_file.Beat(hostname, os.getpid(), host_ms(), ready=ready)
    try:
        (heartbeat_file.start if first else heartbeat_file.write)(path, beat)
    except OSError as exc:  # a full or read-only disk: the probe will say so by the beat's age
        log.warning("heartbeat file not written: %s", describe_error(exc))


class StartupBeat:
    """The heartbeat file's "alive, not ready" beats, from :meth:`start` (the process's start) to :meth:`finish`
    (the worker is ready, or shutting down), every ``interval_s``, in a daemon thread of their own. With no
    ``path`` (``AGENT_SIGNAL_HEARTBEAT_FILE`` unset) it writes nothing."""

    def __init__(self, path: str | None, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, hostname: str) -> None:
        """The process's first beat (not ready; it clears an old drain flag), then one every interval until
        :meth:`finish`. Only the first call does anything, and none after :meth:`finish`."""
        if self.path is None or self._thread is not None or self._done.is_set():
            return
        write_beat(self.path, hostname, first=True, ready=False)
        self._thread = threading.Thread(
            target=self._beat_until_done, args=(self.path, hostname), name="heartbeat-startup", daemon=True
        )
        self._thread.start()

    def finish(self) -> bool:
        """Stop beating, and wait (up to one interval) for a beat being written, so that none lands after the
        caller's next one. True when :meth:`start` had run: the file holds this process's beat already."""
        self._done.set()
        if self._thread is None:
            return False
        self._thread.join(timeout=self.interval_s)
        return True

    def end(self) -> None:
        """A clean shutdown: stop beating and remove the file, so that ``probe worker`` no longer passes on the
        last beat's freshness (the drain flag stays, for the next process's start to clear)."""
        self.finish()
        if self.path is not None:
            heartbeat_file.remove(self.path)

    def _beat_until_done(self, path: str, hostname: str) -> None:
        while not self._done.wait(self.interval_s):
            write_beat(path, hostname, ready=False)
