"""The Celery app factory. No module-level app: ``create_app(settings)`` builds one, registers the tasks and
connects the worker lifecycle hooks for that app only.

Delivery settings, and why (see docs/decisions.md):

* JSON only (``accept_content=["json"]``): no pickle on the wire.
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a child killed mid-drain gets its message requeued
  instead of acked (Celery acks on WorkerLostError otherwise, celery#1628). Requeues are not counted by the
  broker, so the event record counts deliveries itself and dead-letters a crash-looping event.
* ``worker_prefetch_multiplier=1``: a worker does not hoard drain messages other workers could run.
* ``worker_proc_alive_timeout`` of :data:`PROC_ALIVE_TIMEOUT_S`: Celery kills a new pool child that has not said
  it is up within 4 s, and forks another. On a starved machine each replacement of a killed child missed the
  4 s, was killed in turn, and the worker drained nothing again (a helper reproduced it; docs/decisions.md).
* ``visibility_timeout`` > hard limit > soft limit (checked by worker.settings.check_settings).
* ``global_keyprefix`` on a Redis broker: the broker's keys live under our prefix too, so a test run (or two
  deployments on one Redis) never touches anybody else's keys.
* ``worker_send_task_events`` follows ``AGENT_SIGNAL_TASK_EVENTS`` (default off; ``make run`` turns it
  on): Flower and ``celery events`` then see every task. The cost is three small pub/sub messages per task from the worker's main process (measured
  in docs/decisions.md); nothing is stored. ``worker.runtime.celery_app`` is the module-level app for ``celery -A``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from typing import Any

from celery import Celery
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from redis.exceptions import RedisError

from worker.core.clock import now_ms
from worker.core.redis_urls import kombu_options_for, kombu_url_for
from worker.drain.pipeline import Pipeline
from worker.keys.layout import Keys
from worker.ops.workers_view import forget_silent_workers
from worker.outbox.bounded import bounded
from worker.outbox.journal_delivery import journal_deliverers
from worker.outbox.relay import OutboxRelay
from worker.runtime import state as _state
from worker.runtime.assembly import Assembly, PluginShapeError, assemble, load_plugins
from worker.runtime.collector import settle_collector
from worker.runtime.fair import FairQueue
from worker.runtime.heartbeat_writer import StartupBeat, write_beat
from worker.runtime.reconcile import reconcile, try_reconcile_lock
from worker.runtime.tasks import publish_task, register_tasks
from worker.settings import Settings, SettingsError, check_settings
from worker.store.events import EventStore
from worker.store.server.client import redis_from_settings
from worker.telemetry.log_privacy import describe_error
from worker.telemetry.logs import bind_event, clear_context, configure_logging
from worker.telemetry.recorder import Telemetry, configure_telemetry

__all__ = ["build_pipeline", "build_relay", "build_worker", "create_app", "fair_queue"]

log = logging.getLogger(__name__)

OUTBOX_STOP_GRACE_S = 10.0  # a stopping worker waits this long for its outbox deliveries in flight
PROC_ALIVE_TIMEOUT_S = (
    60.0  # a pool child's start may take this long before Celery kills it (module docstring)
)
RELAY_STOP_MARGIN_S = 5.0  # and this much more for the relay thread to see the stop (a pass in progress)


def build_worker(
    settings: Settings, *, telemetry: Telemetry | None = None, app: Celery | None = None
) -> _state.WorkerProcess:
    """What one worker process runs with: Redis client, store, telemetry, the fair queue, and the plugins named
    in the settings."""
    store = EventStore(redis_from_settings(settings), settings)
    if telemetry is None:
        telemetry = configure_telemetry(settings, service_name="agent-signal-worker")
        _state.instrument_libraries(telemetry, redis_commands=settings.trace_redis_commands)
    if app is None:
        app = create_app(settings)
    fair = fair_queue(settings, store, app)
    assembly = _assemble(settings, store, app, fair)
    assembly.emitter.counted = telemetry.follow_ups  # plugin tasks' events (the reference agent's completion)
    pipeline = Pipeline(
        store,
        assembly.registry,
        settings,
        deps=assembly.deps,
        emitter=assembly.emitter,
        publish_drain=fair.publish,
        telemetry=telemetry,
    )
    return _state.WorkerProcess(pipeline, fair, assembly.runtime)


def build_pipeline(
    settings: Settings, *, telemetry: Telemetry | None = None, app: Celery | None = None
) -> Pipeline:
    """The pipeline of :func:`build_worker` (tests and tools that drain scopes in their own process)."""
    return build_worker(settings, telemetry=telemetry, app=app).pipeline


def _assemble(settings: Settings, store: EventStore, app: Celery, fair: FairQueue) -> Assembly:
    """The plugins' contributions for a worker process: drains published through ``fair``, plugin tasks
    sent on ``app``."""

    def task(name: str, payload: dict[str, Any], queue: str | None) -> None:
        publish_task(app, name, payload, queue=queue or settings.queue_name)

    return assemble(
        load_plugins(settings),
        settings,
        store,
        publish_drain=fair.publish,
        publish_drains=fair.publish_many,
        ready=fair,
        publish_task=task,
    )


def fair_queue(settings: Settings, store: EventStore, app: Celery) -> FairQueue:
    """How this process publishes drains (round-robin across tenants unless ``fair_share`` is off), and
    whether it pushes drain_next messages whole (``push_drain_messages`` and a broker on the store's Redis)."""
    pushed = settings.push_drain_messages and broker_is_store(settings, app)
    fair = FairQueue(
        store.client,
        store.keys,
        app,
        settings.queue_name,
        enabled=settings.fair_share,
        messages_max=settings.drain_messages_max,
        ticket_ttl_ms=int(settings.lease_ttl_s * 1000),
        drain_queue=Keys(settings.key_prefix).broker_queue(settings.queue_name) if pushed else None,
    )
    fair.messages()  # the template made now, outside any task (a worker child builds this at its start)
    return fair


def broker_is_store(settings: Settings, app: Any) -> bool:
    """``app``'s broker is the store's own Redis: Celery's own choice of URL for writing and reading (which
    ``CELERY_BROKER_URL`` in the environment overrides) is the Redis URL in kombu's spelling, under our key prefix
    (``global_keyprefix``), and the store is not a Redis Cluster. Its queues are then lists of ours, which a
    script or an ``LPUSH`` can write. False for anything that is not a Celery app."""
    conf = getattr(app, "conf", None)
    if conf is None or settings.redis_cluster_url or not settings.redis_url:
        return False
    ours = kombu_url_for(settings.redis_url)
    options = conf.broker_transport_options or {}
    return bool(
        conf.broker_write_url == ours
        and conf.broker_read_url == ours
        and options.get("global_keyprefix") == Keys(settings.key_prefix).broker_prefix
    )


def _is_redis_broker(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "redis+socket://", "unix://"))


def create_app(settings: Settings) -> Celery:
    """Build the Celery app for ``settings`` (checked first)."""
    check_settings(settings)
    broker_url = settings.effective_broker_url()
    app = Celery("agent_signal", broker=broker_url, set_as_current=False)
    transport_options: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout_s}
    if _is_redis_broker(broker_url):
        transport_options["global_keyprefix"] = Keys(settings.key_prefix).broker_prefix
    if not settings.broker_url and settings.redis_url:  # the store's Redis: its URL's options (kombu_url_for)
        transport_options.update(kombu_options_for(settings.redis_url))
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_proc_alive_timeout=PROC_ALIVE_TIMEOUT_S,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        broker_transport_options=transport_options,
        visibility_timeout=settings.visibility_timeout_s,
        task_default_queue=settings.queue_name,
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        # A broker error reply (an OOM refusing an ack when the broker is a full Redis) reconnects the consumer
        # instead of ending the worker ("Unrecoverable error"): a full store pauses work (worker/store/server/full.py).
        broker_channel_error_retry=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # Task events (Flower, `celery events`); `task-sent` would cost every publisher a message: off.
        worker_send_task_events=settings.task_events,
        task_send_sent_event=False,
        enable_utc=True,
        **quorum_queue_conf(settings, broker_url),
    )
    # The plugins' tasks are registered in every process (their names and code), built lazily per child.
    register_tasks(app, settings.queue_name, load_plugins(settings))
    _state.set_factory(lambda: build_worker(settings, app=app))
    _connect_lifecycle(app, settings)
    return app


def quorum_queue_conf(settings: Settings, broker_url: str) -> dict[str, Any]:
    """Celery settings for RabbitMQ quorum queues (``AGENT_SIGNAL_QUORUM_QUEUES``; none when off).

    Queues are declared with ``x-queue-type: quorum`` (replicated, fsynced; RabbitMQ's advice for anything
    that must not be lost), the task queue and any queue a plugin names. Their exchanges are ``topic``:
    quorum queues have no per-channel (global) prefetch, so Celery runs countdowns (our retries) through its
    native delayed delivery, which cannot route through a direct exchange."""
    if not settings.quorum_queues:
        return {}
    if not broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        raise SettingsError(
            "refusing to start: AGENT_SIGNAL_QUORUM_QUEUES needs a RabbitMQ broker (BROKER_URL=amqp://...)"
        )
    return {
        "task_default_queue_type": "quorum",
        "task_create_missing_queue_type": "quorum",
        "task_default_exchange_type": "topic",
        "task_create_missing_queue_exchange_type": "topic",
        "worker_detect_quorum_queues": True,
    }


def _build_child_state(worker_pid: int) -> None:
    """A pool child's state (worker/runtime/state.py). A plugin part that can never work (a PluginShapeError of
    worker/runtime/assembly.py: a deliverer factory that returns no function) would fail every task of the
    child the same way: the worker (``worker_pid``, its main process; the child itself with ``--pool solo``)
    stops, as it does when a plugin does not load (its boot check), rather than run with no relay. Other errors
    are left to the child, which builds its state again on its next task (a store away is no plugin's fault)."""
    try:
        _state.get()
    except PluginShapeError as exc:
        log.critical("worker: %s cannot work, so the worker stops (see docs/plugins.md)", exc.where)
        os.kill(worker_pid, signal.SIGTERM)  # a warm shutdown of the whole worker
        raise


def _connect_lifecycle(app: Celery, settings: Settings) -> None:
    """The worker's signal receivers, for ``app``'s worker only. The heartbeat file starts at ``worker_init`` (the
    main process's start, before any broker connection: worker/runtime/heartbeat_writer.py); what needs the broker
    or the store (the worker info, the reconcile sweep, the outbox relay) starts at ``worker_ready``."""
    stop = threading.Event()
    startup = StartupBeat(settings.heartbeat_file, settings.reconcile_interval_s)
    relays: list[threading.Thread] = []  # the outbox relay's thread, joined at shutdown
    relay_stop = threading.Event()  # set when the shutdown begins: the grace runs while the tasks finish
    worker_pid = os.getpid()  # the worker's main process, whose pool children fork from it

    def ours(sender: Any) -> bool:
        return sender is None or getattr(sender, "app", app) is app

    def on_init(sender: Any = None, **_: Any) -> None:
        if ours(sender):
            startup.start(str(getattr(sender, "hostname", "worker")))

    def on_process_init(**_: Any) -> None:
        _state.reset()  # never reuse the parent's sockets in a forked child
        # The child keeps the level its parent was started with (``agent-signal worker --loglevel``).
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        configure_logging(env=settings.env, level=level, fmt=settings.log_format)
        # telemetry and instrumentation start inside the child, before its first task
        _build_child_state(worker_pid)
        settle_collector()  # what was just built is never walked by the cyclic collector again

    def on_process_shutdown(**_: Any) -> None:
        _state.flush()

    def on_task_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
        clear_context()
        bind_event(task_id=task_id, task_name=getattr(task, "name", None))

    def on_task_postrun(**_: Any) -> None:
        clear_context()

    def on_ready(sender: Any = None, **_: Any) -> None:
        if not ours(sender):
            return
        hostname = str(getattr(sender, "hostname", "worker"))
        controller = getattr(sender, "controller", sender)  # worker_ready's sender is the consumer
        started = startup.finish()  # the sweep loop beats "ready" from here
        # first: the background (the beat, the sweep, the relay) must start whatever the announcement meets (a
        # cluster client that cannot connect when made left a worker "alive, not ready" for good: a review)
        relays.append(
            _start_background(app, settings, stop, hostname, started=started, relay_stop=relay_stop)
        )
        _announce(settings, hostname, getattr(controller, "concurrency", None))

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        if not ours(sender):  # another app's worker in this process
            return
        stop.set()
        relay_stop.set()
        _join_relays(relays)
        startup.end()  # the heartbeat file goes: a clean end leaves no live worker for `probe worker` to pass
        try:
            store = EventStore(redis_from_settings(settings), settings)
            name = str(getattr(sender, "hostname", "worker"))
            store.client.hdel(store.keys.workers, name)
            store.client.hdel(store.keys.worker_info, name)  # each rollout's pods left theirs for good
        except Exception:  # shutting down: best effort
            log.debug("could not deregister worker", exc_info=True)

    worker_init.connect(on_init, weak=False)
    worker_process_init.connect(on_process_init, weak=False)
    worker_process_shutdown.connect(on_process_shutdown, weak=False)
    task_prerun.connect(on_task_prerun, weak=False)
    task_postrun.connect(on_task_postrun, weak=False)
    worker_ready.connect(on_ready, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
    # the relay stops taking records when the shutdown begins, so its deliveries' grace overlaps the running
    # tasks' (the join at worker_shutdown then finds it done: no time added to the stop's budget)
    worker_shutting_down.connect(lambda **_: relay_stop.set(), weak=False)


def _join_relays(relays: list[threading.Thread]) -> None:
    """Wait for the outbox relay's thread (a daemon, so nothing else waits for it: without this its deliveries'
    grace never came, a review found), at most its grace and a margin."""
    for relay in relays:
        relay.join(OUTBOX_STOP_GRACE_S + RELAY_STOP_MARGIN_S)


def _start_background(
    app: Celery,
    settings: Settings,
    stop: threading.Event,
    hostname: str,
    *,
    started: bool,
    relay_stop: threading.Event | None = None,
) -> threading.Thread:
    """The main process's threads once the worker is ready: the sweep (heartbeat, reconcile) and the outbox relay.
    ``started``: this process's heartbeat file was begun at its start (so the sweep's first beat must not clear a
    drain flag set since)."""
    sweep = threading.Thread(
        target=_sweep_forever,
        args=(app, settings, stop, hostname),
        kwargs={"started": started},
        name="reconcile",
        daemon=True,
    )
    sweep.start()
    relay = threading.Thread(
        target=_relay_forever, args=(app, settings, relay_stop or stop), name="outbox", daemon=True
    )
    relay.start()
    return relay


def build_relay(settings: Settings, app: Celery) -> OutboxRelay:
    """The outbox relay of one process, with the loaded plugins' deliverers."""
    store = EventStore(redis_from_settings(settings), settings)
    assembly = _assemble(settings, store, app, fair_queue(settings, store, app))
    journal = journal_deliverers(store, assembly.emitter, settings.outbox_retention_s)
    # the plugins' calls are bounded here; the journal's are Redis calls, bounded by the client's timeouts
    timeout_s = settings.outbox_delivery_timeout_s
    plugins = {kind: bounded(deliver, timeout_s) for kind, deliver in assembly.deliverers.items()}
    return OutboxRelay(
        store,
        {**plugins, **journal},
        max_attempts=settings.outbox_max_attempts,
        lease_ms=settings.outbox_lease_ms,
        base_ms=settings.outbox_retry_base_ms,
        cap_ms=settings.outbox_retry_cap_ms,
        concurrency=settings.outbox_concurrency,
        stop_grace_s=OUTBOX_STOP_GRACE_S,
    )


def _relay_forever(app: Celery, settings: Settings, stop: threading.Event) -> None:
    """The worker main process's outbox relay (every worker runs one; claims keep them apart). Building it
    needs Redis: until that works, try again every few seconds."""
    while not stop.is_set():
        try:
            relay = build_relay(settings, app)
        except Exception as exc:
            log.warning("outbox relay not started yet: %s", describe_error(exc))
            stop.wait(5.0)
            continue
        relay.run_forever(stop, settings.outbox_poll_interval_s)
        return


def _announce(settings: Settings, hostname: str, concurrency: Any) -> None:
    """What this worker runs with, for the operators' view (worker/ops/workers_view.py); best effort: nothing it
    meets (a store down, a cluster client that cannot connect when made) is raised into Celery's ready signal."""
    info = {"concurrency": concurrency if isinstance(concurrency, int) else None, "pid": os.getpid()}
    try:
        store = EventStore(redis_from_settings(settings), settings)
    except Exception as exc:
        log.warning("worker info not written: %s", describe_error(exc))
        return
    try:
        store.client.hset(store.keys.worker_info, hostname, json.dumps({**info, "startedAt": now_ms()}))
    except RedisError as exc:
        log.warning("worker info not written: %s", describe_error(exc))
    finally:
        store.client.close()


def _sweep_forever(
    app: Celery, settings: Settings, stop: threading.Event, hostname: str, *, started: bool = False
) -> None:
    """The worker main process's background loop once the worker is ready: heartbeat ("ready"), then (if this
    interval is ours) reconcile. ``started``: the process's first beat was written already (at its start, by
    worker/runtime/heartbeat_writer.py); else this loop's first beat is the process's first."""
    interval_ms = int(settings.reconcile_interval_s * 1000)
    stale_after_ms = int(settings.lease_ttl_s * 1000 * 2)
    beat_file = (
        settings.heartbeat_file
    )  # for probes that must not need Redis (worker/runtime/heartbeat_file.py)
    if beat_file:
        _beat(beat_file, hostname, first=not started)
    # Redis down at start (a cluster client connects when made): the loop below tries again; this thread, which
    # keeps the heartbeat file, must not end here
    store: EventStore | None = None
    try:
        store = EventStore(redis_from_settings(settings), settings)
        store.client.hset(store.keys.workers, hostname, now_ms())
    except Exception:
        log.exception("worker heartbeat failed")
    # one per sweeper, made at its first sweep: its drain_next template made once
    fair: FairQueue | None = None
    while not stop.wait(settings.reconcile_interval_s):
        if beat_file:
            _beat(beat_file, hostname)
        try:
            store = store if store is not None else EventStore(redis_from_settings(settings), settings)
            store.client.hset(store.keys.workers, hostname, now_ms())
            if try_reconcile_lock(store, interval_ms):
                fair = fair if fair is not None else fair_queue(settings, store, app)
                published = reconcile(store, fair.publish_stranded, stale_after_ms=stale_after_ms)
                if gone := forget_silent_workers(store, store.keys, now_ms()):
                    log.info("forgot %d worker(s) silent for over an hour: %s", len(gone), ", ".join(gone))
                if published:
                    log.warning("reconcile: re-published drains for %d stranded scope(s)", len(published))
        except Exception:
            log.exception("reconcile sweep failed")


def _beat(path: str, hostname: str, *, first: bool = False) -> None:
    """Write this process's "ready" beat (the first beat also clears an old drain flag); never raises."""
    write_beat(path, hostname, first=first, ready=True)
