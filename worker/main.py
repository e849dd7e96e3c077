"""Entry point of a worker process (``agent-signal worker``; the Procfile's ``worker``)."""

from __future__ import annotations

import os
import socket

import structlog

from worker.app import create_app
from worker.logs import configure_logging
from worker.redis_client import redis_from_settings
from worker.settings import Settings
from worker.store_safety import check_at_boot

__all__ = ["run_worker"]


def run_worker(settings: Settings, *, concurrency: int | None = None, loglevel: str = "INFO") -> int:
    """Run one Celery worker (prefork) consuming the pipeline queue until stopped; refuse an evicting Redis."""
    configure_logging(env=settings.env, level=loglevel, fmt=settings.log_format)
    settings.require_redis_url()
    app = create_app(settings)
    client = redis_from_settings(settings)
    try:  # an evicting Redis stops the worker here (UnsafeStore names the policy and the fix)
        check_at_boot(client, settings, component="worker")
    finally:
        client.close()
    structlog.get_logger(__name__).info(
        "worker settings: lease_ttl_s=%s renew=%s max_attempts=%s retry_base_ms=%s retry_cap_ms=%s "
        "visibility_timeout_s=%s soft/hard=%s/%s plugins=%s",
        settings.lease_ttl_s,
        settings.lease_renew_interval_s,
        settings.max_attempts,
        settings.retry_base_ms,
        settings.retry_cap_ms,
        settings.visibility_timeout_s,
        settings.task_soft_time_limit_s,
        settings.task_time_limit_s,
        [*settings.shipped_plugins, *settings.plugins],
    )
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
        "--without-heartbeat",
    ]
    app.worker_main(argv)
    return 0
