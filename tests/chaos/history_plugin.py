"""The chaos battery's workload plugin: handlers that leave a history the checker can audit.

Like any outside plugin it imports only ``worker.plugin`` (loaded with
``plugins=["tests.chaos.history_plugin:plugin"]``; its source types are admitted through
``extra_source_types``). Every event runs source → signal → action:

* the **source** handler stages (applied by the fenced COMMIT, only when the event commits ``done``)
  ``HINCRBY chaos:committed <sourceId> 1`` and ``RPUSH chaos:commit-order:<scope> "<seq>:<fence>"``, where
  ``fence`` is the fencing number the attempt runs under (read from the scope's fence key: an event walked in
  a run behind its head, or ahead while the run before it commits, is not taken yet, so its own record has no
  fence of this attempt);
* the **action** stages (applied by APPLY with the action's idempotency mark) ``HINCRBY chaos:applied
  <sourceId> 1`` and ``RPUSH chaos:order:<scope> <seq>``, and an outbox record of kind ``chaos-hook``
  (``ctx.outbox``, keyed by the action's idempotency key) carrying the source id; it first sleeps
  ``payload.sleepMs``. The plugin's deliverer POSTs each record to the battery's deduping receiver (the URL in
  ``CHAOS_RECEIVER_URL``, set by the harness) with the record's key as ``Idempotency-Key``.

Written directly, as instrumentation: one JSON record per attempt in ``chaos:attempts`` and, while an action
sleeps, ``chaos:busy`` (pid → scope, source id, attempt, sleep) so a scenario can find a process that holds a
lease (a process killed mid-action leaves its entry behind: that is how a scenario knows where its kill
landed).

``payload.poison`` makes the source handler always raise (a crash loop); source type ``test.flaky`` raises
until the key ``<prefix>test:fixed`` exists (a retry storm).

In :func:`plugin` every handler is batch-safe (its only effects are staged; what it reads directly, the
fence, the probe and ``test:fixed``, no event of its scope writes), so a scope's fresh events commit in runs
and the next run is walked while a run's COMMIT is in flight (``drain_ahead``): the faults land on that path
too. The table's ``batched`` column counts the events of runs that committed whole (the engine's
``batchedEvents``).
:func:`one_by_one` is the same workload with no handler batch-safe: each event commits alone and its action
applies right after it ran (APPLY, fenced). The paused-holder and partition scenarios use it, because what they
assert is that a holder's late write is refused by the fence; in a run the holder writes nothing before its
COMMIT, and by then its lease renewer has found the lease lost, so it commits nothing and no fence is reached.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import httpx
from redis import Redis

from worker.plugin import (
    Action,
    Deliverer,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    OutboxRecord,
    Plugin,
    PluginRuntime,
    Policy,
    Signal,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
    signal_from,
)

__all__ = [
    "FLAKY_TYPE",
    "HOOK_KIND",
    "ONE_BY_ONE",
    "OP_TYPE",
    "RECEIVER_ENV",
    "SOURCE_TYPES",
    "HistoryKeys",
    "one_by_one",
    "plugin",
]

OP_TYPE = "chaos.op"
FLAKY_TYPE = "test.flaky"
SOURCE_TYPES = (OP_TYPE, FLAKY_TYPE)
HOOK_KIND = "chaos-hook"  # the outbox kind every action stages
RECEIVER_ENV = "CHAOS_RECEIVER_URL"  # where the deliverer POSTs (the harness's deduping receiver)
ONE_BY_ONE = "tests.chaos.history_plugin:one_by_one"  # the ``plugins`` entry of the one-by-one variant


@dataclass(frozen=True, slots=True)
class HistoryKeys:
    """The history's keys under one deployment prefix (shared by the plugin and the checker)."""

    prefix: str

    @property
    def applied(self) -> str:
        """sourceId → how many times the action's effect was applied."""
        return f"{self.prefix}chaos:applied"

    @property
    def committed(self) -> str:
        """sourceId → how many times a ``done`` commit applied the source handler's effect."""
        return f"{self.prefix}chaos:committed"

    def order(self, scope_key: str) -> str:
        """The scope's seqs in the order their actions applied."""
        return f"{self.prefix}chaos:order:{scope_key}"

    def commit_order(self, scope_key: str) -> str:
        """The scope's ``<seq>:<fence>`` in the order their events committed."""
        return f"{self.prefix}chaos:commit-order:{scope_key}"

    @property
    def attempts(self) -> str:
        """Probe: one JSON record per attempt (written directly)."""
        return f"{self.prefix}chaos:attempts"

    @property
    def busy(self) -> str:
        """Probe: pid → JSON of the action it is sleeping in (written directly)."""
        return f"{self.prefix}chaos:busy"

    @property
    def fixed(self) -> str:
        """When this key exists, ``test.flaky`` stops failing."""
        return f"{self.prefix}test:fixed"


@dataclass(frozen=True, slots=True)
class HistoryProbe:
    """Direct Redis access for instrumentation (never for the history itself)."""

    redis: Redis


def _history(ctx: HandlerContext) -> HistoryKeys:
    return HistoryKeys(ctx.keys.bucket_prefix)


def _on_source(source: Source, ctx: HandlerContext) -> Dispatch:
    redis = ctx.deps(HistoryProbe).redis
    history = _history(ctx)
    fence = str(redis.get(ctx.keys.fence(source.scope_key)) or "0")
    seq = int(source.payload.get("seq", 0))
    record = {"sid": source.source_id, "scope": source.scope_key, "seq": seq, "attempt": ctx.attempt}
    redis.rpush(
        history.attempts, json.dumps({**record, "fence": fence, "pid": os.getpid(), "t": time.time()})
    )
    if source.payload.get("poison"):
        raise RuntimeError("poisoned event")
    if source.source_type == FLAKY_TYPE and not redis.exists(history.fixed):
        raise RuntimeError("flaky handler is broken")
    ctx.effects.call("HINCRBY", history.committed, source.source_id, 1)
    ctx.effects.call("RPUSH", history.commit_order(source.scope_key), f"{seq}:{fence}")
    return Dispatch(signals=[signal_from(source, "op", "signal.chaos.op", dict(source.payload), ctx.now())])


def _plan(signal: Signal, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        actions=[action_from(signal, "record", "action.chaos.record", dict(signal.payload), ctx.now())]
    )


def _record(action: Action, ctx: HandlerContext) -> ExecutorResult:
    redis = ctx.deps(HistoryProbe).redis
    history = _history(ctx)
    sleep_ms = int(action.payload.get("sleepMs", 0))
    sid = action.source.source_id
    if sleep_ms:
        busy = {
            "scope": ctx.scope_key,
            "sid": sid,
            "attempt": ctx.attempt,
            "sleepMs": sleep_ms,
            "t": time.time(),
        }
        redis.hset(history.busy, str(os.getpid()), json.dumps(busy))
        time.sleep(sleep_ms / 1000)
        redis.hdel(history.busy, str(os.getpid()))
    ctx.effects.call("HINCRBY", history.applied, sid, 1)
    ctx.effects.call("RPUSH", history.order(ctx.scope_key), int(action.payload.get("seq", 0)))
    ctx.outbox(HOOK_KIND, {"sid": sid, "seq": int(action.payload.get("seq", 0))})
    return applied(action, ctx, detail="recorded")


def _hook_deliverer(runtime: PluginRuntime) -> Deliverer:
    """POST the record to the receiver with its key as ``Idempotency-Key`` (raises, so it is retried, when
    the receiver is unset or answers an error)."""
    url = os.environ.get(RECEIVER_ENV, "")
    client = httpx.Client(timeout=5)  # one per relay: a client per call costs more than the call
    _widen_header_body_gap(float(os.environ.get(BODY_GAP_ENV, "0") or 0))

    def deliver(record: OutboxRecord) -> None:
        if not url:
            raise RuntimeError(f"{RECEIVER_ENV} is not set: nowhere to deliver {record.id}")
        body = {"sid": record.payload.get("sid"), "seq": record.payload.get("seq")}
        client.post(url, json=body, headers={"Idempotency-Key": record.key}).raise_for_status()

    return deliver


BODY_GAP_ENV = "CHAOS_DIAG_BODY_GAP_MS"  # diagnostics only: see _widen_header_body_gap


def _widen_header_body_gap(gap_ms: float) -> None:
    """Diagnostics only (``CHAOS_DIAG_BODY_GAP_MS``): sleep between a POST's header write and its body write
    (httpcore writes them apart), so a worker-kill more often lands between the two, as it rarely does on a
    loaded machine; the engine is untouched."""
    if gap_ms <= 0:
        return
    import httpcore._sync.http11 as http11

    send_body = http11.HTTP11Connection._send_request_body

    def gap_then_body(self: object, request: object) -> None:
        time.sleep(gap_ms / 1000)
        send_body(self, request)  # type: ignore[arg-type]

    http11.HTTP11Connection._send_request_body = gap_then_body  # type: ignore[method-assign]


def _probe(runtime: PluginRuntime) -> HistoryProbe:
    return HistoryProbe(runtime.redis)


def plugin() -> Plugin:
    """The history plugin, batch-safe (no ``source_types``: the battery admits them with
    ``extra_source_types``)."""
    return _history_plugin(batch_safe=True)


def one_by_one() -> Plugin:
    """The same plugin with no handler batch-safe: every event commits alone (see the module docstring)."""
    return _history_plugin(batch_safe=False)


def _history_plugin(*, batch_safe: bool) -> Plugin:
    policy = Policy(
        "chaos-history",
        [
            define_source_handler(OP_TYPE, "chaos.op:source", _on_source, batch_safe=batch_safe),
            define_source_handler(FLAKY_TYPE, "chaos.flaky:source", _on_source, batch_safe=batch_safe),
            define_signal_handler("signal.chaos.op", "chaos.op:plan", _plan, batch_safe=batch_safe),
            define_action_handler("action.chaos.record", "chaos.op:record", _record, batch_safe=batch_safe),
        ],
    )
    return Plugin(
        "chaos-history", policies=[policy], services=_probe, deliverers={HOOK_KIND: _hook_deliverer}
    )
