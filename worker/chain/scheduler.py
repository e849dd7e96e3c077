"""The chain scheduler: LobeHub's breadth-first dispatch, in Python, with durable idempotency.

``run_chain(source, registry, port, ...)``:

1. The queue starts with the source. Nodes are taken first-in first-out.
2. The handlers matching the node's exact type run in registration order, one after another.
3. A handler's result is applied: ``Dispatch`` appends its signals, then its actions, at the tail;
   an ``ExecutorResult`` on an action node is recorded and becomes the built-in result signal
   ``signal.action.<status>`` (id ``<actionId>:result``), appended at the tail; ``Wait``/``Schedule``/
   ``Conclude`` is remembered as the terminal result if it is the first one, and the queue keeps draining.
4. A handler exception aborts the chain and propagates (the pipeline retries the whole event; applied
   actions are not repeated because of step 5).
5. Before an action handler runs, its idempotency lane is consulted through the :class:`ActionPort`: an
   action already applied under that key is not run again; its stored result is replayed, so a redelivered
   event converges on the same trace. An ``applied`` result is committed with the handler's staged effects
   atomically; ``failed``/``skipped`` results never mark the lane.
6. Source and signal handlers share the chain's :class:`ChainScope`: their staged writes and follow-up
   events are applied by the pipeline's fenced commit when the event is done, never before.

Unlike LobeHub, the trace of a chain that ends in ``wait``/``schedule``/``conclude`` is kept whole.
A ``max_nodes`` budget stops runaway fan-out (LobeHub has none).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter  # a name, not an attribute lookup: twice per handler run with metrics on
from typing import Any

from worker.chain.context import ActionPort, Deps, EffectBuffer, Emit, HandlerContext
from worker.chain.registry import HandlerDef, HandlerKind, Registry
from worker.core.clock import now_ms
from worker.core.errors import NotBatchable, PermanentFailure
from worker.core.idempotency import LANE_FORM, idempotency_aliases, idempotency_key_for
from worker.core.nodes import (
    Action,
    Attempt,
    AttemptStatus,
    Conclude,
    Dispatch,
    ExecutorResult,
    Node,
    Schedule,
    Signal,
    Source,
    Wait,
    result_signal,
    trusted,
)
from worker.keys.layout import BucketKeys
from worker.telemetry.plan import HandlerRuns
from worker.telemetry.recorder import DISABLED, Telemetry

__all__ = ["ChainScope", "ChainTrace", "run_chain"]

DEFAULT_MAX_NODES = 500
log = logging.getLogger(__name__)
# Action types dispatched with no handler, said once per process each: such an action is in the chain and runs
# nothing (LobeHub's too), which a typo in a type, or the plugin that handles it left out, looks like.
_UNHANDLED: set[str] = set()
UNHANDLED_MAX = 256  # types said per process (a plugin that makes action types from data would grow it)


@dataclass(slots=True)
class ChainTrace:
    """Everything one chain produced, in the order it happened."""

    source: Source
    signals: list[Signal] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    results: list[ExecutorResult] = field(default_factory=list)
    terminal: Wait | Schedule | Conclude | None = None
    started_at_ms: int = 0
    # at the record's precision (3 decimals): the metrics and the stored form use it as it is
    duration_ms: float = 0.0

    @property
    def status(self) -> str:
        return "completed" if self.terminal is None else self.terminal.status

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "source": self.source.to_json_dict(),
            "signals": [s.to_json_dict() for s in self.signals],
            "actions": [a.to_json_dict() for a in self.actions],
            "results": [r.to_json_dict() for r in self.results],
            "terminal": None if self.terminal is None else self.terminal.to_json_dict(),
            "startedAt": self.started_at_ms,
            "durationMs": round(self.duration_ms, 3),
        }


def _kind_and_type(node: Node) -> tuple[HandlerKind, str, str]:
    if isinstance(node, Source):
        return "source", node.source_type, node.source_id
    if isinstance(node, Signal):
        return "signal", node.signal_type, node.signal_id
    return "action", node.action_type, node.action_id


@dataclass(slots=True)
class ChainScope:
    """What every handler of one chain shares: the clock-free context fields, the chain's staged writes and
    follow-up events (committed with the event), and the plugins' typed dependencies."""

    attempt: int = 1
    max_attempts: int = 1
    keys: BucketKeys = field(default_factory=BucketKeys)
    deps: Deps = field(default_factory=Deps)
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    emit: Emit | None = None
    outbox_retention_s: int = 7 * 24 * 60 * 60
    batch: bool = False  # run for a batch commit: a handler that is not batch-safe raises NotBatchable
    runs: HandlerRuns = field(default_factory=HandlerRuns)  # what ran, for the event's metrics
    # the form of its actions' lane keys (worker/core/idempotency.py): the event's mark, older only for an event a
    # worker of before began
    lane_form: int = LANE_FORM

    def __post_init__(self) -> None:
        if self.effects.keys is None:
            self.effects.keys = self.keys

    def context(self, source: Source, node: Node) -> HandlerContext:
        """A fresh context for one handler of ``node``: source and signal handlers stage into the chain's
        buffer; an action handler gets its own (applied with its idempotency mark)."""
        action = isinstance(node, Action)
        ctx = HandlerContext(
            scope_key=source.scope_key,
            node_timestamp=node.timestamp,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            effects=EffectBuffer(keys=self.keys) if action else self.effects,
            keys=self.keys,
            deps_of=self.deps,
            source=source,
            outbox_retention_s=self.outbox_retention_s,
        )
        if isinstance(node, Action):
            ctx.idempotency_key = idempotency_key_for(node, form=self.lane_form, user_id=source.user_id)
            ctx.idempotency_aliases = idempotency_aliases(node, form=self.lane_form, user_id=source.user_id)
        elif self.emit is not None:
            ctx.emitter = self.emit
        return ctx


def run_chain(
    source: Source,
    registry: Registry,
    port: ActionPort,
    *,
    scope: ChainScope | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    telemetry: Telemetry = DISABLED,
) -> ChainTrace:
    """Run every handler reachable from ``source``; see the module docstring for the algorithm."""
    scope = scope or ChainScope()
    trace = ChainTrace(source=source, started_at_ms=now_ms())
    started = perf_counter()
    queue: deque[Node] = deque([source])
    seen = 0
    while queue:
        node = queue.popleft()
        seen += 1
        if seen > max_nodes:
            raise PermanentFailure(
                f"chain exceeded {max_nodes} nodes (runaway fan-out?)", code="FANOUT_BUDGET"
            )
        if isinstance(node, Signal):
            trace.signals.append(node)
        elif isinstance(node, Action):
            trace.actions.append(node)
        kind, node_type, _ = _kind_and_type(node)
        handlers = registry.match(kind, node_type)
        if (
            not handlers
            and kind == "action"
            and node_type not in _UNHANDLED
            and len(_UNHANDLED) < UNHANDLED_MAX
        ):
            _UNHANDLED.add(node_type)
            log.warning(
                "action type %r has no handler: its actions are kept in their chains and run nothing (a typo in "
                "the type, or the plugin that handles it is not loaded)",
                node_type,
            )
        for handler in handlers:
            if scope.batch and not handler.batch_safe:
                raise NotBatchable(f"{handler.id} is not batch-safe")
            ctx = scope.context(source, node)
            queue.extend(_traced(telemetry, kind, node_type, node, handler, ctx, port, trace, scope.runs))
    # Rounded once, here, to LobeHub's record precision: the stored record and the duration metric use it as it
    # is (round(x, 3) costs half a microsecond, a tenth of the metrics' share of a committed event).
    trace.duration_ms = round((perf_counter() - started) * 1000, 3)
    return trace


def _result_status(
    trace: ChainTrace, before_results: int, before_terminal: object, outputs: list[Node]
) -> str:
    if len(trace.results) > before_results:
        return trace.results[-1].status
    if trace.terminal is not None and trace.terminal is not before_terminal:
        return trace.terminal.status
    return "dispatch" if outputs else "void"


def _traced(
    telemetry: Telemetry,
    kind: HandlerKind,
    node_type: str,
    node: Node,
    handler: HandlerDef,
    ctx: HandlerContext,
    port: ActionPort,
    trace: ChainTrace,
    runs: HandlerRuns,
) -> list[Node]:
    """Run one handler with its metrics (noted in ``runs``), inside an ``agent_signal.handler.run`` span when
    spans are read."""
    if not telemetry.enabled:
        return _run_node(node, handler, ctx, port, trace)
    started = perf_counter()
    if not telemetry.tracing:  # no span nobody reads: just the handler, its run and its terminal count
        before_terminal = trace.terminal
        try:
            outputs = _run_node(node, handler, ctx, port, trace)
        except BaseException:
            runs.add((handler.id, kind, node_type, "error"), (perf_counter() - started) * 1000)
            raise
        # HandlerRuns.add inlined (the hot path of every handler run with metrics on)
        runs.ids.append((handler.id, kind, node_type, "ok"))
        runs.ms.append((perf_counter() - started) * 1000)
        if trace.terminal is not before_terminal:
            _note_terminal(telemetry, kind, node_type, trace, before_terminal)
        return outputs
    status = "ok"
    try:
        attrs = {
            "agent.signal.handler_id": handler.id,
            "agent.signal.handler_kind": kind,
            "agent.signal.node_type": node_type,
            "agent.signal.scope_key": ctx.scope_key,
        }
        with telemetry.span("agent_signal.handler.run", attrs) as span:
            before_results, before_terminal = len(trace.results), trace.terminal
            outputs = _run_node(node, handler, ctx, port, trace)
            if span is not None:
                result_status = _result_status(trace, before_results, before_terminal, outputs)
                span.set_attribute("agent.signal.handler_result_status", result_status)
            _note_terminal(telemetry, kind, node_type, trace, before_terminal)
            return outputs
    except BaseException:
        status = "error"
        raise
    finally:  # counted from the chain's scope with the event's commit (worker/drain/event.py), or alone
        runs.add((handler.id, kind, node_type, status), (perf_counter() - started) * 1000)


def _run_node(
    node: Node, handler: HandlerDef, ctx: HandlerContext, port: ActionPort, trace: ChainTrace
) -> list[Node]:
    if isinstance(node, Action):
        return _run_action(node, handler, ctx, port, trace)
    return _run_handler(node, handler, ctx, trace)


def _note_terminal(
    telemetry: Telemetry, kind: HandlerKind, node_type: str, trace: ChainTrace, before: object
) -> None:
    """Count the terminal result this handler produced, if it produced one."""
    if trace.terminal is not None and trace.terminal is not before:
        terminal = trace.terminal
        found = getattr(terminal, "pending", None) or getattr(terminal, "concluded", None) or {}
        telemetry.terminal(
            node_kind=kind,
            node_type=node_type,
            status=terminal.status,
            reason=str(found.get("reason") or terminal.status),
        )


def _run_handler(node: Node, handler: HandlerDef, ctx: HandlerContext, trace: ChainTrace) -> list[Node]:
    result = handler.handle(node, ctx)
    if isinstance(result, Dispatch):
        if len(result.actions) > 1:
            _check_distinct_actions(handler, result.actions)
        return [*result.signals, *result.actions]
    if isinstance(result, Wait | Schedule | Conclude):
        if trace.terminal is None:
            trace.terminal = result
        return []
    if result:  # LobeHub reads a falsy answer as nothing (`return cond and Dispatch(…)`)
        raise _wrong_result(handler, result, "a Dispatch, Wait, Schedule, Conclude or None")
    return []


def _check_distinct_actions(handler: HandlerDef, actions: Sequence[Action]) -> None:
    """Two actions of one dispatch under one idempotency key (the action id, ``<signalId>:action:<name>``, unless
    the payload names a key) with different payloads: the second would replay the first's result and never run,
    and the trace would show both applied. The event dies saying so (``INVALID_RESULT``). The same action twice
    (same key, same payload) stays what idempotency makes it: one run."""
    first_of: dict[str, Action] = {}
    for action in actions:
        first = first_of.setdefault(idempotency_key_for(action), action)
        if first is not action and first.payload != action.payload:
            raise PermanentFailure(
                f"{handler.id} dispatched two actions under the idempotency key {idempotency_key_for(action)!r} "
                "with different payloads: the second would replay the first and never run; give each its own "
                "name (action_from's name) or its own payload.idempotencyKey",
                code="INVALID_RESULT",
            )


def _wrong_result(handler: HandlerDef, result: object, wanted: str) -> PermanentFailure:
    """A handler's answer the engine cannot read: what it returned would be dropped, so the event dies saying so."""
    return PermanentFailure(
        f"{handler.id} returned {type(result).__name__}; {'an' if handler.kind == 'action' else 'a'} {handler.kind} "
        f"handler returns {wanted}",
        code="INVALID_RESULT",
    )


def _run_action(
    action: Action, handler: HandlerDef, ctx: HandlerContext, port: ActionPort, trace: ChainTrace
) -> list[Node]:
    key = ctx.idempotency_key or idempotency_key_for(action)  # set by ChainScope.context
    ctx.idempotency_key = key
    result = port.lookup(action, key, ctx.idempotency_aliases)
    if result is None:
        port.ensure_live()
        started_ms = now_ms()
        raw = handler.handle(action, ctx)
        if not isinstance(raw, ExecutorResult):
            # An action handler that returns nothing (or a dispatch) is recorded like LobeHub's
            # non-executor results; it produces no result signal and never marks the lane.
            if ctx.effects:
                raise PermanentFailure(
                    f"{handler.id} staged writes but returned no ExecutorResult: they would never apply",
                    code="INVALID_EFFECT",
                )
            if isinstance(raw, Wait | Schedule | Conclude):  # any handler's terminal ends the chain (LobeHub)
                if trace.terminal is None:
                    trace.terminal = raw
                return []
            if raw and not isinstance(raw, Dispatch):
                raise _wrong_result(
                    handler, raw, "an ExecutorResult, a Dispatch, a Wait, Schedule or Conclude, or None"
                )
            if isinstance(raw, Dispatch) and len(raw.actions) > 1:
                _check_distinct_actions(handler, raw.actions)
            return [*raw.signals, *raw.actions] if isinstance(raw, Dispatch) else []
        result = _stamp_attempt(raw, ctx, started_ms)
        if result.status == "applied" and not port.commit(action, key, result, ctx.effects):
            # Someone else applied it under this key between our lookup and our commit: use theirs.
            result = port.lookup(action, key, ctx.idempotency_aliases) or result
    trace.results.append(result)
    return [result_signal(action, result, now_ms())]


_ATTEMPT_STATUS: dict[str, AttemptStatus] = {"applied": "succeeded", "skipped": "skipped", "failed": "failed"}


def _stamp_attempt(result: ExecutorResult, ctx: HandlerContext, started_ms: int) -> ExecutorResult:
    status = _ATTEMPT_STATUS[result.status]
    values = {
        "current": ctx.attempt,
        "max": ctx.max_attempts,
        "started_at": result.attempt.started_at or started_ms,
        "completed_at": result.attempt.completed_at or now_ms(),
        "status": status,
    }
    attempt = trusted(Attempt, values, set(values))  # the engine's own ints and a known status
    if type(result) is not ExecutorResult:  # a subclass keeps pydantic's own copy
        return result.model_copy(update={"attempt": attempt})
    # model_copy's result without its generic work: the same fields, the attempt replaced (and counted as set)
    return trusted(
        ExecutorResult, {**result.__dict__, "attempt": attempt}, {*result.model_fields_set, "attempt"}
    )
