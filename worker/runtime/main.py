"""Entry point of a worker process (``agent-signal worker``; the Procfile's ``worker``).

The Celery command line we build, and why each flag:

* ``--queues``, ``--concurrency``, ``--pool prefork``, ``--hostname agent-signal-<pid>@<host>``: ours.
* ``--task-events`` when ``AGENT_SIGNAL_TASK_EVENTS`` is on (the app's ``worker_send_task_events`` says the
  same; the flag makes it visible in ``ps``).
* Worker heartbeats stay on (no ``--without-heartbeat``): Flower and ``celery events`` mark a worker online by
  them, and they keep the event dispatcher alive, so ``celery control enable_events`` works even with task
  events off. One small pub/sub message every 2 s per worker.
* ``--without-gossip``: gossip makes every worker consume every other worker's event stream (N² messages)
  for leader election and clock sync, which nothing here uses (our own heartbeat hash and reconcile lock do
  that job).
* Metrics: every process of the worker writes its measurements to files in one directory
  (``PROMETHEUS_MULTIPROC_DIR``, set here before the children fork); the main process serves their sum on
  ``AGENT_SIGNAL_WORKER_METRICS_PORT`` when set (worker/telemetry/process_metrics.py).
* ``--without-mingle``: mingle asks the other workers for revoked ids and clocks at start (a broadcast and a
  wait); we do not revoke tasks.

``extra_argv`` (``agent-signal worker -- <celery worker flags>``) is appended last, so a flag given there
wins over ours (``--concurrency 3``, ``-n w1@%h``, ``--without-heartbeat``, ``-O fair``...).

The command line goes to Celery's ``worker`` command itself (:func:`start_celery_worker`), not through
``app.worker_main``: that imports the whole ``celery`` command group first, every subcommand and each installed
plugin's (Flower's Tornado app, ``click_repl`` with ``prompt_toolkit``), about a fifth of a second of a worker's
start that its process never uses (docs/decisions.md, "make test within ten minutes, a third time").
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from worker.runtime.app import create_app
from worker.settings import Settings, SettingsError
from worker.store.server.client import redis_from_settings
from worker.store.server.safety import check_at_boot
from worker.telemetry.logs import configure_logging, install_pseudonyms
from worker.telemetry.process_metrics import serve, use_multiprocess_dir

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["celery_worker_argv", "run_worker", "start_celery_worker"]


def run_worker(
    settings: Settings,
    *,
    concurrency: int | None = None,
    loglevel: str = "INFO",
    extra_argv: Sequence[str] = (),
) -> int:
    """Run one Celery worker (prefork) consuming the pipeline queue until stopped; refuse an evicting Redis.
    ``extra_argv`` are ``celery worker`` flags added after ours."""
    configure_logging(env=settings.env, level=loglevel, fmt=settings.log_format)
    settings.require_redis_url()
    # Metric files of this worker's processes; set before any metric exists (the children inherit it). A directory
    # of its own is removed however it ends but a kill: a refusal at boot too.
    owned_dir = None if settings.metrics_dir else tempfile.mkdtemp(prefix="agent-signal-metrics-")
    try:
        return _run(settings, settings.metrics_dir or str(owned_dir), concurrency, loglevel, extra_argv)
    finally:
        if owned_dir is not None:
            shutil.rmtree(owned_dir, ignore_errors=True)


def _run(
    settings: Settings, metrics_dir: str, concurrency: int | None, loglevel: str, extra_argv: Sequence[str]
) -> int:
    try:
        use_multiprocess_dir(metrics_dir)
    except OSError as exc:  # one line naming the setting, not a traceback
        raise SettingsError(
            f"refusing to start: AGENT_SIGNAL_METRICS_DIR ({settings.metrics_dir}): {exc.strerror or exc}"
        ) from None
    app = create_app(settings)
    client = redis_from_settings(settings)
    try:  # an evicting Redis stops the worker here (UnsafeStore names the policy and the fix)
        check_at_boot(client, settings, component="worker")
        install_pseudonyms(client, settings)  # before the children fork: they inherit it
    finally:
        client.close()
    structlog.get_logger(__name__).info(
        "worker settings: lease_ttl_s=%s renew=%s max_attempts=%s retry_base_ms=%s retry_cap_ms=%s "
        "visibility_timeout_s=%s soft/hard=%s/%s task_events=%s plugins=%s",
        settings.lease_ttl_s,
        settings.lease_renew_interval_s,
        settings.max_attempts,
        settings.retry_base_ms,
        settings.retry_cap_ms,
        settings.visibility_timeout_s,
        settings.task_soft_time_limit_s,
        settings.task_time_limit_s,
        settings.task_events,
        [*settings.shipped_plugins, *settings.plugins],
    )
    if settings.worker_metrics_port:
        try:
            serve(settings.worker_metrics_port, settings.worker_metrics_host)
        except OSError as exc:
            raise SystemExit(
                f"AGENT_SIGNAL_WORKER_METRICS_PORT={settings.worker_metrics_port}: cannot listen ({exc.strerror})"
            ) from None
    start_celery_worker(
        app, celery_worker_argv(settings, concurrency=concurrency, loglevel=loglevel, extra_argv=extra_argv)
    )
    return 0


def celery_worker_argv(
    settings: Settings,
    *,
    concurrency: int | None = None,
    loglevel: str = "INFO",
    extra_argv: Sequence[str] = (),
) -> list[str]:
    """The ``celery worker`` command line for ``settings`` (see the module docstring), ``extra_argv`` last."""
    argv = [
        "worker",
        "--queues",
        settings.queue_name,
        "--concurrency",
        str(concurrency or settings.worker_concurrency),
        "--pool",
        "prefork",
        "--loglevel",
        loglevel,
        "--hostname",
        f"agent-signal-{os.getpid()}@{socket.gethostname()}",
        "--without-gossip",
        "--without-mingle",
    ]
    if settings.task_events:
        argv.append("--task-events")
    return [*argv, *extra_argv]


def start_celery_worker(app: Celery, argv: Sequence[str]) -> None:
    """Run ``celery worker`` with ``argv`` (from :func:`celery_worker_argv`, ``worker`` first) on ``app``: what
    ``app.worker_main(argv)`` does, with only the ``worker`` command imported. The context object is the one the
    ``celery`` group would build (no ``--workdir``, not quiet; colour off when ``NO_COLOR`` is set to anything,
    as no-color.org asks); a bad flag raises Celery's ClickException, as under ``worker_main``."""
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker as worker_command

    if not argv or argv[0] != "worker":
        raise ValueError("the argv of a Celery worker starts with 'worker'")
    context = CLIContext(app=app, no_color=bool(os.environ.get("NO_COLOR")), workdir=None, quiet=False)
    # non-standalone, click returns the worker's exit code (its ctx.exit) instead of raising; worker_main dropped
    # it, and so does this: the process's exit is decided by run_worker, as before
    worker_command.main(args=list(argv[1:]), prog_name="celery worker", obj=context, standalone_mode=False)
