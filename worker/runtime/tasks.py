"""The Celery tasks: thin wrappers that parse arguments, call plain functions, and publish follow-ups.

``agent_signal.drain(scopeKey)`` is a delayed drain of one scope: with fair share it makes the scope ready in
its tenant's turn and goes on as ``agent_signal.drain_next`` (worker/runtime/fair.py), else it drains the scope
(worker.drain.pipeline); each loaded plugin's
:class:`~worker.plugin.PluginTask` becomes a task of its own name that calls ``run(runtime, payload)``;
``agent_signal.noop`` is the benchmark baseline. Tasks return None: nobody consumes results.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery.exceptions import Reject, SoftTimeLimitExceeded, TaskPredicate
from redis.exceptions import AskError, ClusterError, RedisError, TryAgainError

from worker.core.clock import now_ms
from worker.core.errors import PermanentFailure
from worker.core.retry import backoff_ms
from worker.core.tenancy import DEFAULT_TENANT, BadTenant, split_scope_ref, work_tenant, working_for
from worker.drain.lease import Acquired, ChainedPop, Popped
from worker.drain.pipeline import DrainOutcome, Pipeline
from worker.runtime import state as _state
from worker.runtime.drain_message import MessageGrant, message_grant
from worker.runtime.fair import DRAIN_NEXT_TASK, DRAIN_TASK, FairQueue
from worker.runtime.plugin_model import Plugin, PluginRuntime, PluginTask
from worker.settings import Settings, scripts_build_scope_keys
from worker.store.server.safety import note_store_failure
from worker.telemetry.log_privacy import HIDDEN_TASK_ARGS, describe_error

__all__ = [
    "DRAIN_TASK",
    "NOOP_TASK",
    "TaskFailed",
    "publish_task",
    "register_tasks",
]

NOOP_TASK = "agent_signal.noop"
# Both drain tasks and the plugins' tasks: acked after they ran (a killed child's message is redelivered),
# registered on this app only (another Celery app built in the same process must not replay them), the task
# itself passed in.
DRAIN_TASK_OPTIONS: dict[str, Any] = {
    "shared": False,
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}
NOOP_MARKER_TTL_S = 60
# A drain refused because its scope's slot is moving between Redis Cluster nodes (TRYAGAIN, ASK/MOVED or redis-py's
# "TTL exhausted", CLUSTERDOWN) is published again after 1-2 s, this many times in a row at most per scope and
# process; then, as for any store error, the reconcile sweep publishes it (30-75 s) so a long move costs no
# worker a failed drain every second. Two drains of a scope never run at once: the lease fences them.
SLOT_MOVING_RETRIES = 10
SLOT_MOVING_DELAY_S = (1.0, 2.0)

log = logging.getLogger(__name__)


# The message header naming the tenant whose work a plugin task is (worker.core.tenancy.working_for, where it was
# published): a task of a tenant deleted meanwhile is dropped though its payload does not say ``"tenant"``. A
# header, not an argument: a worker of an older version ignores it (an unknown keyword would fail the task).
TENANT_HEADER = "agent_signal_tenant"


def publish_task(app: Any, name: str, payload: dict[str, Any], *, queue: str) -> None:
    """Send one plugin task (its payload is one JSON object, never shown: worker/telemetry/log_privacy.py), with
    the tenant whose work is being done here, when there is one, in :data:`TENANT_HEADER`."""
    tenant = work_tenant()
    headers = {TENANT_HEADER: tenant} if tenant is not None else None
    app.send_task(name, args=[payload], queue=queue, headers=headers, **HIDDEN_TASK_ARGS)


def _task_tenants(payload: dict[str, Any], request: Any) -> list[str]:
    """Whose work a plugin task is: its message's :data:`TENANT_HEADER` (set by the engine) first, then its
    payload's ``"tenant"`` (set by the plugin) when it names another: the task is dropped if either is deleted."""
    named = [getattr(request, TENANT_HEADER, None), payload.get("tenant")]
    return list(dict.fromkeys(t for t in named if isinstance(t, str)))


class TaskFailed(Exception):
    """A task's own exception, told to Celery without its message (its message may quote the task's payload:
    worker/telemetry/log_privacy.py); the exception itself is logged first, frames and type only. ``permanent``:
    it was a PermanentFailure, which no other attempt changes."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def _quietly(name: str, call: Callable[[], object]) -> None:
    """Run a task's body; an exception other than Celery's control flow becomes :class:`TaskFailed`."""
    try:
        call()
    except (TaskPredicate, SoftTimeLimitExceeded):
        raise
    except Exception as exc:
        log.error("task %s failed: %s", name, describe_error(exc), exc_info=exc)
        raise TaskFailed(f"{name} failed: {describe_error(exc)}") from None


def _register_plugin_task(app: Any, task: PluginTask) -> None:
    """``task`` as a Celery task of its name: tried again with backoff, then handed to its dead hook (PluginTask).

    An attempt fails on an exception or the soft time limit. A retry is a message of its own, due after the
    backoff (this one is acked), its arguments hidden as :func:`publish_task`'s; one that cannot be sent (Celery
    would reject this message, and it would be gone) buries the work now. Runs are counted in Redis by the
    message's task id (:func:`_count_run`), which Celery's retries keep and so does a redelivery after the child
    was killed mid-run (the hard time limit, the kernel's OOM killer; ``reject_on_worker_lost``): a run killed
    every time counted nothing before and was delivered again for ever; now a delivery past the last attempt
    buries the work without running it."""

    def run(self: Any, payload: dict[str, Any], burial: str | None = None, burials: int = 1) -> None:
        if not isinstance(payload, dict):
            log.error("task %s called without a JSON object (%s)", task.name, type(payload).__name__)
            return
        process = _state.get()
        pipeline, runtime = process.pipeline, process.runtime
        tenants = _task_tenants(payload, self.request)
        # an agent run queued before its tenant was deleted: dropped unrun
        if gone := [t for t in tenants if pipeline.store.deleted_tenants.deleted(t)]:
            log.info("task %s of a deleted tenant dropped", task.name, extra={"tenant": gone[0]})
            return
        with working_for(tenants[0] if tenants else None):  # a task it publishes is the same tenant's work
            _run_plugin_task(self, task, pipeline, runtime, payload, burial, burials)

    run.__name__ = task.name.rpartition(".")[2].replace("-", "_")
    # the drain tasks' options (acked after the run, this app's own); the attempts are counted here (_count_run)
    app.task(name=task.name, max_retries=None, **DRAIN_TASK_OPTIONS)(run)


def _run_plugin_task(
    self: Any,
    task: PluginTask,
    pipeline: Pipeline,
    runtime: PluginRuntime,
    payload: dict[str, Any],
    burial: str | None,
    burials: int,
) -> None:
    """One delivery of ``task``'s message (``self``, the bound Celery task): a burial again, or a counted run,
    then its retry or its burial (:func:`_register_plugin_task`)."""
    settings = runtime.settings
    most = task.max_attempts or settings.max_attempts
    if isinstance(burial, str):  # it failed for good, and so did its dead hook: the burial alone, again
        _bury_or_retry(self, task, runtime, pipeline, payload, burial, most, burials)
        return
    attempt = _count_run(pipeline, self.request)
    if attempt > most:  # the last attempt's child was killed mid-run
        log.error("task %s: its worker was lost in its last attempt", task.name)
        lost = f"{task.name} failed: its worker was lost mid-run"
        _bury_or_retry(self, task, runtime, pipeline, payload, _tried(lost, most), most)
        return
    last = attempt >= most
    # At least once anyway: a run that met a full store runs again after a pause (worker/store/server/full.py).
    failed = _plugin_attempt(
        task.name,
        lambda: pipeline.ctx.full_wait("task").call(lambda: task.run(runtime, payload)),
        last=last,
    )
    if failed is None:
        _forget_runs(pipeline, self.request)  # done: a redelivery (its ack lost) runs it again, from 1
        return
    if not (failed.permanent or last):
        retry = _retry_later(self, task.name, "retry", attempt, settings, exc=failed)
        if retry is not None:
            raise retry
        failed = TaskFailed(f"{failed}; its retry could not be sent", permanent=True)
    _bury_or_retry(self, task, runtime, pipeline, payload, _tried(str(failed), attempt), most)
    raise failed


# A message's run count outlives its retry chain: attempts x (the retry cap + the hard limit), and a redelivery
# after a lost worker waits out the visibility timeout (an hour by default) each time. Deleted when it ends.
TASK_ATTEMPTS_TTL_S = 24 * 3600


def _count_run(pipeline: Pipeline, request: Any) -> int:
    """This run's number among the runs of its message (1 for the first): counted by its task id in Redis; by
    Celery's retries when it has no id (called directly) or the store cannot count (one warning line)."""
    retries = int(getattr(request, "retries", 0) or 0)
    task_id = getattr(request, "id", None)
    if not isinstance(task_id, str) or not task_id:
        return retries + 1
    key = pipeline.keys.task_attempts(task_id)
    try:
        with pipeline.store.client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, TASK_ATTEMPTS_TTL_S)
            counted = int(pipe.execute()[0])
    except RedisError as exc:
        log.warning("a plugin task's run could not be counted: %s", describe_error(exc))
        return retries + 1
    return max(counted, retries + 1)


def _forget_runs(pipeline: Pipeline, request: Any) -> None:
    """The message's work ended (done or buried): its run count goes (a count left behind would only expire)."""
    task_id = getattr(request, "id", None)
    if isinstance(task_id, str) and task_id:
        try:
            pipeline.store.client.delete(pipeline.keys.task_attempts(task_id))
        except RedisError as exc:
            log.warning("a plugin task's run count could not be deleted: %s", describe_error(exc))


def _plugin_attempt(name: str, call: Callable[[], object], *, last: bool) -> TaskFailed | None:
    """One attempt of a plugin task: None when it ran, else its failure (an exception, or the soft time limit) as
    :class:`TaskFailed`, logged (frames and type only) as an error when no attempt follows, else as a warning. A
    PermanentFailure keeps its code, which says what failed and quotes nothing."""
    try:
        call()
    except TaskPredicate:
        raise
    except Exception as exc:
        permanent = isinstance(exc, PermanentFailure)
        what = describe_error(exc) + (f" {exc.code}" if isinstance(exc, PermanentFailure) else "")
        level = logging.ERROR if last or permanent else logging.WARNING
        log.log(level, "task %s failed: %s", name, what, exc_info=exc)
        return TaskFailed(f"{name} failed: {what}", permanent=permanent)
    return None


def _tried(failed: str, tried: int) -> str:
    """The error a dead hook is given: the failure and the attempts it took."""
    return f"{failed} (after {tried} attempt{'' if tried == 1 else 's'})"


def _bury_or_retry(
    task_call: Any,
    task: PluginTask,
    runtime: PluginRuntime,
    pipeline: Pipeline,
    payload: dict[str, Any],
    error: str,
    most: int,
    burials: int = 1,
) -> None:
    """The work of ``task`` failed for good: its dead hook lists it (its run count goes). When the hook fails (the
    store it writes to is down: likely why the work failed), the burial is tried again after the backoff, as a
    retry of the message carrying ``error`` and the burial's number that runs nothing else, ``most`` more times
    at most; it was logged and the message acked, and the work, listed nowhere, was lost (an audit). Without a
    hook, a log line."""
    if _bury(task, runtime, payload, error):
        _forget_runs(pipeline, task_call.request)
        return
    if burials > most:
        log.error("task %s: its dead hook failed %d times; the work is not listed", task.name, burials)
        _forget_runs(pipeline, task_call.request)
        return
    retry = _retry_later(
        task_call,
        task.name,
        "burial",
        burials,
        runtime.settings,
        kwargs={"burial": error, "burials": burials + 1},
    )
    if retry is not None:
        raise retry


def _retry_later(task_call: Any, name: str, what: str, nth: int, settings: Settings, **how: Any) -> Any:
    """A retry of this message (``how``: Celery's ``retry`` arguments), due after the ``nth`` backoff, its
    arguments hidden as :func:`publish_task`'s: the Retry to raise, or None when it could not be sent (Celery
    would reject this message, and it would be gone; logged)."""
    delay_ms = backoff_ms(nth, base_ms=settings.retry_base_ms, cap_ms=settings.retry_cap_ms)
    try:
        return task_call.retry(countdown=delay_ms / 1000, throw=False, **HIDDEN_TASK_ARGS, **how)
    except Reject as refused:
        log.error("task %s: its %s could not be sent: %s", name, what, describe_error(refused.reason))
        return None


def _bury(task: PluginTask, runtime: PluginRuntime, payload: dict[str, Any], error: str) -> bool:
    """The dead hook of ``task`` given the work and its ``error``: False when it raised (logged), else True (also
    without a hook: a log line is all there is)."""
    if task.dead is None:
        log.error("task %s failed for good, and names no dead list: %s", task.name, error)
        return True
    try:
        task.dead(runtime, payload, error)
    except Exception as exc:
        log.error(
            "task %s failed for good; its dead hook failed too: %s",
            task.name,
            describe_error(exc),
            exc_info=exc,
        )
        return False
    return True


def _node(task: Any) -> str:
    """The worker node running this task (its lease tokens name it; none when called outside a worker)."""
    hostname = getattr(getattr(task, "request", None), "hostname", None)
    return hostname if isinstance(hostname, str) else ""


def drain_ref(
    app: Any,
    queue: str,
    ref: str,
    holder: str = "",
    acquired: Acquired | None = None,
    then_pop: ChainedPop | None = None,
) -> DrainOutcome | None:
    """Drain the scope ``ref`` in this worker's pipeline, then re-publish it when it has more (or was lost). A
    full store refuses the lease grant before it writes anything: the grant is asked again after a pause.
    ``acquired``: POP_ACQUIRE already asked for the lease (drain_ready); ``then_pop``: the commit that releases
    the scope pops the next one (drain_ready). None when the drain failed (logged and counted here)."""
    process = _state.get()
    pipeline = process.pipeline
    if _of_a_deleted_tenant(pipeline, ref):  # a message on the broker from before it, a ref popped before the
        return (
            None  # deletion took the tenant's ready list: a lease the pop took runs out (the walk takes it)
        )
    try:
        outcome = pipeline.ctx.full_wait("acquire").call(
            lambda: pipeline.drain(ref, holder=holder, acquired=acquired, then_pop=then_pop)
        )
    except BadTenant:  # not "<tenant>/<scopeKey>": a message from before tenants, or forged
        log.error("drain of a malformed scope ref dropped", extra={"scopeRef": ref})
        return None
    except RedisError as exc:  # full or unreachable: one line; the reconcile sweep re-publishes the drain
        tenant = split_scope_ref(ref)[0]  # parsed already (by the drain, or where it was popped)
        note_store_failure(pipeline.store.client, pipeline.keys.for_tenant(tenant).tenant_stats, exc, "drain")
        if _slot_moving(exc) and _moving_retries.next(ref) <= SLOT_MOVING_RETRIES:
            process.fair.publish(ref, countdown_s=random.uniform(*SLOT_MOVING_DELAY_S))
        return None
    _moving_retries.forget(ref)
    republish = process.fair.publish
    if outcome.next in ("again", "busy"):
        republish(ref, countdown_s=outcome.delay_s)
    elif outcome.next == "lost":
        # Our lease lapsed (paused past its TTL, or Redis lost it). Whoever holds the scope now drains
        # it; if nobody does, this follow-up will, once the holder's lease has run out.
        republish(ref, countdown_s=1.0)
    return outcome


def _of_a_deleted_tenant(pipeline: Pipeline, ref: str) -> bool:
    """Whether ``ref``'s tenant was deleted (worker/store/deleted_tenants.py): its drain is dropped (a grant would
    write the scope's fence back, 7 days of a key naming a scope of it)."""
    try:
        tenant = split_scope_ref(ref)[0]
    except BadTenant:
        return False  # the drain says so
    if not pipeline.store.deleted_tenants.deleted(tenant):
        return False
    log.info("drain of a deleted tenant's scope dropped", extra={"tenant": tenant})
    return True


def _slot_moving(exc: RedisError) -> bool:
    """A Redis Cluster error that ends when a slot move does: TRYAGAIN (the keys a script needs are split
    between two nodes), a redirect followed too often, CLUSTERDOWN, redis-py's "TTL exhausted" and our
    SlotMoving (all ClusterError)."""
    return isinstance(exc, ClusterError | TryAgainError | AskError)


class _MovingRetries:
    """How many drains of each scope in a row this process published again because its slot was moving."""

    def __init__(self, most_scopes: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._most_scopes = most_scopes

    def next(self, ref: str) -> int:
        """Count one more for ``ref`` (forgotten past the cap: the sweep has it); returns its number."""
        with self._lock:
            if len(self._counts) >= self._most_scopes and ref not in self._counts:
                self._counts.clear()  # bounded memory; at worst a scope gets a few more quick retries
            count = self._counts.get(ref, 0) + 1
            if count > SLOT_MOVING_RETRIES:
                self._counts.pop(ref, None)
            else:
                self._counts[ref] = count
            return count

    def forget(self, ref: str) -> None:
        with self._lock:
            self._counts.pop(ref, None)


_moving_retries = _MovingRetries()


def drain_due(app: Any, queue: str, ref: str, holder: str = "") -> int | None:
    """A delayed drain of ``ref`` that came due (a retry's backoff, a busy scope's wait). With fair share its
    scope is made ready in its tenant's turn and the message goes on as a drain_next message
    (:meth:`FairQueue.push_due`): returns the scopes it drained, ``ref``'s or others' as the ring turns. Without,
    it drains ``ref`` (:func:`drain_ref`): None."""
    process = _state.get()
    if not process.fair.enabled:
        drain_ref(app, queue, ref, holder)
        return None
    pipeline = process.pipeline
    try:
        tenant = split_scope_ref(ref)[0]
    except BadTenant:
        log.error("drain of a malformed scope ref dropped", extra={"scopeRef": ref})
        return None
    if _of_a_deleted_tenant(pipeline, ref):  # a retry's delayed drain from before it: not made ready again
        return None
    try:
        pipeline.ctx.full_wait("push").call(lambda: process.fair.push_due(ref))
    except RedisError as exc:  # down, or full past the wait: the reconcile sweep publishes the scope again
        note_store_failure(pipeline.store.client, pipeline.keys.for_tenant(tenant).tenant_stats, exc, "drain")
        return None
    return drain_ready(app, queue, holder)


def drain_ready(app: Any, queue: str, holder: str = "", grant: MessageGrant | None = None) -> int:
    """One drain_next message: pop and drain ready scopes until none is ready (the pop retires this
    message's ticket), ``scopes_per_drain`` are done, or the time budget is spent. The limits, or an exception
    from a drain, hand the ticket on to a new message, so a ticket is not left counted without one (a store
    error leaves it to expire instead of spinning). Returns how many scopes it drained.

    Where POP_ACQUIRE may run (:func:`commit_pops_next`) and the message goes on after this scope, the commit
    that releases a scope also pops the next one and takes its lease (``then_pop``): a scope of one event
    costs one round trip (its COMMIT) instead of two. A scope popped so is always drained next, past the
    limits (it is leased to this worker).

    ``grant``: the message's first pop, done by the enqueue script (the lease at enqueue, :func:`message_grant`):
    the message begins with that scope, as with one a commit popped."""
    process = _state.get()
    pipeline, fair = process.pipeline, process.fair
    settings = pipeline.settings
    deadline = time.monotonic() + settings.drain_message_budget_s
    drained, retired = 0, False
    chained: Popped | None = None
    try:
        pop = _popper(pipeline, fair, holder)
        chain = commit_pops_next(settings)
        keys = pipeline.ctx.store.keys
        if grant is not None:
            chained = pipeline.lease.adopt(keys, grant.token, grant.granted_ms, grant.popped, now_ms=now_ms())
            retired = chained is None  # the enqueue's pop found nothing ready: it retired the ticket
        while not retired and (
            chained is not None
            or (drained < settings.scopes_per_drain and not (drained and time.monotonic() >= deadline))
        ):
            # a full store refuses the pop before it writes
            popped = chained if chained is not None else pipeline.ctx.full_wait("pop").call(pop)
            chained = None
            if popped is None:
                retired = True
                break
            go_on = chain and drained + 1 < settings.scopes_per_drain and time.monotonic() < deadline
            then_pop = pipeline.lease.pop_next(keys, fair.pop_call(), holder=holder) if go_on else None
            try:
                outcome = drain_ref(app, queue, popped[0], holder, popped[1], then_pop)
            finally:  # a commit that found nothing ready retired the ticket, even when the drain then raised
                retired = then_pop is not None and then_pop.reply == []
            drained += 1
            if retired:
                break
            chained = None if outcome is None else outcome.popped
    except RedisError as exc:  # store down: no message to hand on to (it would spin); the count expires and
        # no scope popped, so no tenant to charge: the default tenant's counters hold the engine's own failures
        stats = pipeline.keys.for_tenant(DEFAULT_TENANT).tenant_stats
        note_store_failure(pipeline.store.client, stats, exc, "drain_next")
        retired = True  # the sweep sends one message for the stranded scopes once Redis answers again
    finally:
        if not retired:
            try:
                fair.hand_on()
            except Exception as exc:  # broker down: the ticket was given back (or expires)
                log.warning("drain_next not handed on (%s)", describe_error(exc))
    return drained


def commit_pops_next(settings: Settings) -> bool:
    """A commit that releases its scope may pop the next one (:func:`drain_ready`): where POP_ACQUIRE may run,
    and not with ``wait_replicas`` (a commit the replicas did not confirm is treated as lost, and what it
    popped with it)."""
    return one_round_trip(settings) and not settings.wait_replicas


def one_round_trip(settings: Settings) -> bool:
    """Pop a ready scope and take its lease in one script (POP_ACQUIRE): on one Redis with one scope bucket,
    where the script may build the scope's keys itself; a cluster, or scope buckets, keep READY_POP then ACQUIRE."""
    return scripts_build_scope_keys(settings)


def _popper(pipeline: Pipeline, fair: FairQueue, holder: str) -> Callable[[], Popped | None]:
    """drain_ready's pop: POP_ACQUIRE where :func:`one_round_trip` allows it, else READY_POP alone (the drain
    then asks for the lease)."""
    if one_round_trip(pipeline.settings):
        keys = pipeline.ctx.store.keys
        return lambda: pipeline.lease.acquire_ready(keys, fair.pop_call(), now_ms=now_ms(), holder=holder)

    def two_steps() -> Popped | None:
        ref = fair.pop()
        return None if ref is None else (ref, None)

    return two_steps


def register_tasks(app: Any, queue: str, plugins: Sequence[Plugin] = ()) -> None:
    """Register the engine's tasks and the plugins' on ``app`` (called by the factory, never at import)."""

    @app.task(name=DRAIN_TASK, **DRAIN_TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def drain(self: Any, scope_key: str) -> None:
        if not isinstance(scope_key, str) or not scope_key:
            log.error("drain called without a scope ref (%s)", type(scope_key).__name__)
            return
        _quietly(DRAIN_TASK, lambda: drain_due(app, queue, scope_key, _node(self)))

    @app.task(name=DRAIN_NEXT_TASK, **DRAIN_TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def drain_next(self: Any) -> None:
        """Fair share: drain ready scopes, the tenants taking turns, many per message (worker/runtime/fair.py)."""
        grant = message_grant(self.request)
        _quietly(DRAIN_NEXT_TASK, lambda: drain_ready(app, queue, _node(self), grant))

    for plugin in plugins:
        for task in plugin.tasks:
            _register_plugin_task(app, task)

    @app.task(name=NOOP_TASK, shared=False, ignore_result=True)  # type: ignore[untyped-decorator]
    def noop(*args: Any) -> None:
        """The benchmark's baseline task. Given a marker name, it also says it ran (one SET with a TTL), so
        the latency baseline can see when it finished."""
        if args and isinstance(args[0], str) and args[0]:
            pipeline = _state.get().pipeline
            pipeline.store.client.set(pipeline.keys.noop_marker(args[0]), "1", ex=NOOP_MARKER_TTL_S)
        return None
