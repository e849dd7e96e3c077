"""The node model: sources, signals, actions and executor results (LobeHub's contracts, in pydantic).

JSON field names are camelCase (``sourceId``), Python attributes snake_case. Ids are deterministic so
that a replayed event produces the same nodes: a source's chain is ``chain:<sourceId>``, a result signal is
``<actionId>:result``, and the builders below derive child ids from the parent id and a caller-chosen
suffix (``<sourceId>:signal:<name>``, ``<signalId>:action:<name>``).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Action",
    "Attempt",
    "AttemptStatus",
    "ChainRef",
    "Conclude",
    "Dispatch",
    "ExecutorError",
    "ExecutorResult",
    "HandlerResult",
    "Node",
    "ResultStatus",
    "Schedule",
    "Signal",
    "SignalRef",
    "Source",
    "SourceRef",
    "Wait",
    "action_from",
    "attempt_json",
    "plain_object",
    "result_signal",
    "signal_from",
    "trusted",
]

ResultStatus = Literal["applied", "skipped", "failed"]
AttemptStatus = Literal["cancelled", "failed", "running", "skipped", "succeeded"]


class Model(BaseModel):
    """Base: camelCase JSON, snake_case attributes, unknown fields kept out."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


_M = TypeVar("_M", bound=BaseModel)
# BaseModel's slots, set through their own descriptors: object.__setattr__ looks each name up in the type first.
_SLOTS: Any = BaseModel.__dict__
_set_dict = _SLOTS["__dict__"].__set__
_set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__
_new = object.__new__


def trusted(cls: type[_M], values: dict[str, Any], given: set[str]) -> _M:
    """An instance of ``cls`` made of ``values`` without validating them: every field of ``cls``, in its
    declared order, each already what validation would make of it (``given``: the fields a caller named, the
    model's ``model_fields_set``). For the engine's own copies of what it made: ``model_copy`` of a result with a new attempt took
    3 us where this takes 0.9 (timeit); it sets what ``model_construct`` sets, without its generic per-field work."""
    node: _M = _new(cls)
    _set_dict(node, values)
    _set_fields_set(node, given)
    _set_extra(node, None)
    _set_private(node, None)
    return node


class ChainRef(Model):
    chain_id: str
    root_source_id: str
    parent_node_id: str | None = None
    parent_signal_id: str | None = None
    parent_action_id: str | None = None


class SourceRef(Model):
    source_id: str
    source_type: str


class SignalRef(Model):
    signal_id: str
    signal_type: str


class Source(Model):
    """An accepted source event, as the worker sees it."""

    source_id: str
    source_type: str
    scope_key: str
    timestamp: int
    payload: dict[str, Any] = Field(default_factory=dict)
    chain: ChainRef
    user_id: str | None = None
    agent_id: str | None = None
    workspace_id: str | None = None
    event_id: str | None = None
    traceparent: str | None = None  # W3C trace context of the enqueue, so the chain joins its trace

    @property
    def ref(self) -> SourceRef:
        return trusted(
            SourceRef, {"source_id": self.source_id, "source_type": self.source_type}, set(_REF_GIVEN)
        )


class Signal(Model):
    signal_id: str
    signal_type: str
    source: SourceRef
    chain: ChainRef
    timestamp: int
    payload: dict[str, Any] = Field(default_factory=dict)


class Action(Model):
    action_id: str
    action_type: str
    signal: SignalRef
    source: SourceRef
    chain: ChainRef
    timestamp: int
    payload: dict[str, Any] = Field(default_factory=dict)


class Attempt(Model):
    current: int
    max: int | None = None
    started_at: int
    completed_at: int | None = None
    status: AttemptStatus


class ExecutorError(Model):
    code: str
    message: str
    retriable: bool = False
    retry_after_ms: int | None = None


class ExecutorResult(Model):
    action_id: str
    status: ResultStatus
    attempt: Attempt
    detail: str | None = None
    output: dict[str, Any] | None = None
    error: ExecutorError | None = None


class Dispatch(Model):
    status: Literal["dispatch"] = "dispatch"
    signals: list[Signal] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)


class Wait(Model):
    status: Literal["wait"] = "wait"
    pending: dict[str, Any] | None = None


class Schedule(Model):
    status: Literal["schedule"] = "schedule"
    next_hop: dict[str, Any] = Field(default_factory=dict)


class Conclude(Model):
    status: Literal["conclude"] = "conclude"
    concluded: dict[str, Any] | None = None


Node = Source | Signal | Action
HandlerResult = Dispatch | Wait | Schedule | Conclude | ExecutorResult | None
Terminal = Wait | Schedule | Conclude


# The engine's own nodes, built without validation where every value is already what validation would make of
# it (ids from validated nodes, f-strings): pydantic's constructor cost ~3 us per node, a dozen nodes per event.
# What a plugin passes (a type, a payload, a timestamp) is checked here first; anything else goes through the
# validating constructor, which raises as it always did. A unit test compares both ways for every builder.
_REF_GIVEN = frozenset({"source_id", "source_type"})
_NODE_GIVEN = frozenset({"signal_id", "signal_type", "source", "chain", "timestamp", "payload"})
_ACTION_GIVEN = frozenset({"action_id", "action_type", "signal", "source", "chain", "timestamp", "payload"})
_SIGNAL_REF_GIVEN = frozenset({"signal_id", "signal_type"})


def _chain(chain: ChainRef, parent: str, signal: str | None = None, action: str | None = None) -> ChainRef:
    """A child's chain ref under ``chain`` (its parent node ``parent``), unvalidated: all of it is ``chain``'s."""
    given = {"chain_id", "root_source_id", "parent_node_id"}
    if signal is not None:
        given.add("parent_signal_id")
    if action is not None:
        given.add("parent_action_id")
    values = {
        "chain_id": chain.chain_id,
        "root_source_id": chain.root_source_id,
        "parent_node_id": parent,
        "parent_signal_id": signal,
        "parent_action_id": action,
    }
    return trusted(ChainRef, values, given)


def plain_object(value: Any) -> bool:
    """``value`` is already what validating a ``dict[str, Any]`` field makes of it: a dict with str keys."""
    return type(value) is dict and all(type(key) is str for key in value)


def _plain(kind: Any, timestamp: Any, payload: Any) -> bool:
    """A plugin's values are already what validation makes of them: a str, an int, a dict with str keys."""
    return type(kind) is str and type(timestamp) is int and plain_object(payload)


def _signal(
    signal_id: str,
    signal_type: str,
    source: SourceRef,
    chain: ChainRef,
    timestamp: int,
    payload: dict[str, Any],
) -> Signal:
    if not _plain(signal_type, timestamp, payload):
        return Signal(
            signal_id=signal_id,
            signal_type=signal_type,
            source=source,
            chain=chain,
            timestamp=timestamp,
            payload=payload,
        )
    values = {
        "signal_id": signal_id,
        "signal_type": signal_type,
        "source": source,
        "chain": chain,
        "timestamp": timestamp,
        "payload": dict(payload),  # a copy, as validation makes one
    }
    return trusted(Signal, values, set(_NODE_GIVEN))


def signal_from(
    parent: Source | Signal, name: str, signal_type: str, payload: dict[str, Any], timestamp: int
) -> Signal:
    """A signal produced by ``parent`` with the deterministic id ``<parentId>:signal:<name>``.

    For a parent signal the id is ``<parentSignalId>:<name>`` (LobeHub's ``…:domain:memory`` style).
    """
    if isinstance(parent, Source):
        chain = _chain(parent.chain, parent.source_id)
        return _signal(
            f"{parent.source_id}:signal:{name}", signal_type, parent.ref, chain, timestamp, payload
        )
    chain = _chain(parent.chain, parent.signal_id, signal=parent.signal_id)
    return _signal(f"{parent.signal_id}:{name}", signal_type, parent.source, chain, timestamp, payload)


def action_from(
    signal: Signal, name: str, action_type: str, payload: dict[str, Any], timestamp: int
) -> Action:
    """An action planned from ``signal`` with the deterministic id ``<signalId>:action:<name>``."""
    action_id = f"{signal.signal_id}:action:{name}"
    ref = trusted(
        SignalRef, {"signal_id": signal.signal_id, "signal_type": signal.signal_type}, set(_SIGNAL_REF_GIVEN)
    )
    chain = _chain(signal.chain, signal.signal_id, signal=signal.signal_id)
    if not _plain(action_type, timestamp, payload):
        return Action(
            action_id=action_id,
            action_type=action_type,
            signal=ref,
            source=signal.source,
            chain=chain,
            timestamp=timestamp,
            payload=payload,
        )
    values = {
        "action_id": action_id,
        "action_type": action_type,
        "signal": ref,
        "source": signal.source,
        "chain": chain,
        "timestamp": timestamp,
        "payload": dict(payload),
    }
    return trusted(Action, values, set(_ACTION_GIVEN))


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """``attempt.to_json_dict()``, without pydantic's serializer for the engine's own Attempt."""
    if type(attempt) is not Attempt:
        return attempt.to_json_dict()
    out: dict[str, Any] = {"current": attempt.current}
    if attempt.max is not None:
        out["max"] = attempt.max
    out["startedAt"] = attempt.started_at
    if attempt.completed_at is not None:
        out["completedAt"] = attempt.completed_at
    out["status"] = attempt.status
    return out


def result_signal(action: Action, result: ExecutorResult, timestamp: int) -> Signal:
    """The built-in ``signal.action.<status>`` signal for an executor result, id ``<actionId>:result``."""
    payload: dict[str, Any] = {
        "actionId": action.action_id,
        "actionType": action.action_type,
        "attempt": attempt_json(result.attempt),
    }
    if result.detail is not None:
        payload["detail"] = result.detail
    if result.error is not None:
        payload["error"] = result.error.to_json_dict()
    chain = _chain(action.chain, action.action_id, action=action.action_id)
    return _signal(
        f"{action.action_id}:result",
        f"signal.action.{result.status}",
        action.source,
        chain,
        timestamp,
        payload,
    )
