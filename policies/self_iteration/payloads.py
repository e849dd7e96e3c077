"""LobeHub's source types, and their payloads as far as the self-iteration handlers read them (reference §2.2.1).

This plugin owns LobeHub compatibility, so it declares all 17 of LobeHub's source types
(:data:`LOBEHUB_SOURCE_TYPES`), including those no shipped handler acts on yet (``agent.execution.failed``, the
``client.gateway.*`` and ``runtime.*_step`` types, un-hydrated ``client.runtime.start``): LobeHub sends them and
their chains are recorded, as LobeHub's own orchestrator records a source-only chain.

The models are the plugin's ``payload_schemas``, checked at the door (a 422 naming ``payload.<field>``), for
follow-up events and for a redrive's edited payload. A field is required where the handler can do nothing
without it: the review sources' fields, which their handler checks before anything else and which LobeHub's
own types mark required. Optional fields the handlers read are typed as LobeHub sends them; every other field
passes (``extra="allow"``): LobeHub's payloads carry more than we read. The fields a receipt id is made of
(``operationId``, ``selfIteration.marker.sourceId``, ``selfIteration.mutations[].toolCallId`` and ``apiName``:
policies/self_iteration/records/receipts.py), and the marker's ``agentId``, ``topicId`` and ``userId`` (copied into
the receipts), follow the id rule (:data:`IdPart`, worker/core/ids.py: at most 256 characters, no control character,
no space): an id travels on the receipts stream's ``id:`` line, where a line break would start a frame of the
sender's making, and a receipt id longer than the rule or an object where an id belongs was stored and then refused
by every route that names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from worker.plugin import Id

__all__ = [
    "LOBEHUB_SOURCE_TYPES",
    "PAYLOAD_SCHEMAS",
    "ExecutionCompletedPayload",
    "IdPart",
    "NightlyReviewPayload",
    "SelfFeedbackIntentPayload",
    "SelfReflectionPayload",
    "ToolOutcomeContext",
    "UserMessagePayload",
]

LOBEHUB_SOURCE_TYPES: tuple[str, ...] = (
    "agent.execution.completed",
    "agent.execution.failed",
    "agent.nightly_review.requested",
    "agent.self_feedback_intent.declared",
    "agent.self_reflection.requested",
    "agent.user.message",
    "bot.message.merged",
    "client.gateway.error",
    "client.gateway.runtime_end",
    "client.gateway.step_complete",
    "client.gateway.stream_start",
    "client.runtime.complete",
    "client.runtime.start",
    "runtime.after_step",
    "runtime.before_step",
    "tool.outcome.completed",
    "tool.outcome.failed",
)

Text = Annotated[str, Field(min_length=1)]  # the review handlers read "" as missing
Moment = Annotated[int | float | str, Field(union_mode="left_to_right")]  # ms, or an ISO string: kept as sent
IdPart = Id  # a part of a receipt id, or an id a receipt copies: the door's id rule


class _Payload(BaseModel):
    """A LobeHub payload: camelCase fields, everything we do not read passes."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class ToolOutcomeContext(_Payload):
    """``tool.outcome.*`` as the procedure reads it (it skips an outcome without ``domainKey`` or a status; the
    activity plugin requires ``tool.identifier`` and ``outcome.status``)."""

    domain_key: str | None = None
    intent_class: str | None = None
    message_id: str | None = None
    operation_id: str | None = None
    tool_call_id: str | None = None
    task_id: str | None = None
    topic_id: str | None = None
    tool: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None


class UserMessagePayload(_Payload):
    """``agent.user.message``: a message without text concludes unsupported (LobeHub's renderer: ``message`` →
    ``prompt`` → ``''``); the context goes to the judges as text."""

    message: str | None = None
    prompt: str | None = None
    message_id: str | None = None
    user_message_id: str | None = None
    trigger: str | None = None
    trigger_message_id: str | None = None
    anchor_message_id: str | None = None
    serialized_context: str | None = None
    intents: list[str] | None = None
    document_payload: dict[str, Any] | None = None
    memory_payload: dict[str, Any] | None = None


class SelfIterationMarker(_Payload):
    """A run's ``selfIteration.marker``: its ``sourceId`` starts every receipt id of the run; its ids are copied
    into the receipts."""

    source_id: IdPart | None = None
    agent_id: IdPart | None = None
    topic_id: IdPart | None = None
    user_id: IdPart | None = None


class SelfIterationMutation(_Payload):
    """One of a run's ``selfIteration.mutations``: its receipt id holds ``toolCallId``, else ``apiName``."""

    tool_call_id: IdPart | None = None
    api_name: IdPart | None = None


class SelfIterationResult(_Payload):
    """A finished self-iteration run's ``selfIteration``: its marker, artifacts and mutations (one receipt per
    mutation with an ``apiName``)."""

    marker: SelfIterationMarker | None = None
    artifacts: list[Any] | None = None
    mutations: list[SelfIterationMutation] | None = None
    user_id: str | None = None


class ExecutionCompletedPayload(_Payload):
    """``agent.execution.completed``: the fan-out needs ``agentId``, ``operationId`` and ``selfIteration`` and
    skips without them (LobeHub's completion policy); deferred synthesis needs the anchor and ``topicId``."""

    agent_id: str | None = None
    operation_id: IdPart | None = (
        None  # the run's receipt ids start with it when the marker names no sourceId
    )
    topic_id: str | None = None
    reason: str | None = None
    assistant_message_id: str | None = None
    anchor_message_id: str | None = None
    trigger_message_id: str | None = None
    self_iteration: SelfIterationResult | None = None


class NightlyReviewPayload(_Payload):
    """``agent.nightly_review.requested`` (its ``sourceId`` must be ``nightly-review:<u>:<a>:<localDate>``,
    which the handler checks: a different one concludes ``invalid_payload``)."""

    agent_id: Text
    user_id: Text
    local_date: Text
    requested_at: Moment
    review_window_start: Moment
    review_window_end: Moment
    timezone: Text


class SelfReflectionPayload(_Payload):
    """``agent.self_reflection.requested`` (the tool-outcome procedure emits it when a threshold is crossed)."""

    agent_id: Text
    user_id: Text
    reason: Text
    scope_id: Text
    scope_type: Literal["topic", "task", "operation"]
    window_start: Moment
    window_end: Moment
    topic_id: str | None = None


class SelfFeedbackIntentPayload(_Payload):
    """``agent.self_feedback_intent.declared`` (LobeHub's producer validates the same action, kind and
    confidence before it enqueues)."""

    action: Literal["write", "create", "refine", "consolidate", "proposal"]
    agent_id: Text
    confidence: Annotated[float, Field(ge=0, le=1, strict=True)]
    kind: Literal["memory", "skill", "gap"]
    reason: Text
    summary: Text
    user_id: Text
    operation_id: str | None = None
    topic_id: str | None = None
    tool_call_id: str | None = None


PAYLOAD_SCHEMAS: dict[str, type[BaseModel]] = {
    "tool.outcome.completed": ToolOutcomeContext,
    "tool.outcome.failed": ToolOutcomeContext,
    "agent.user.message": UserMessagePayload,
    "agent.execution.completed": ExecutionCompletedPayload,
    "agent.nightly_review.requested": NightlyReviewPayload,
    "agent.self_reflection.requested": SelfReflectionPayload,
    "agent.self_feedback_intent.declared": SelfFeedbackIntentPayload,
}
