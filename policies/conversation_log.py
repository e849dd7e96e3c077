"""The conversation log the receipts UI shows: user messages (``agent.user.message``) and assistant replies
(``client.runtime.complete`` / ``agent.execution.completed`` carrying ``assistantMessageId`` and
``assistantContent``), as seen in events. The handlers stage their writes (applied by the event's fenced
commit) and return nothing: they add no signals, so LobeHub's chains are unchanged. A message is logged only
when its owner (user, agent, topic) and its text are known; the payload models type what is read.

Events are not processed in the order their messages were written (a retry, a redrive, two producers). The log
is appended to in processing order and never rewritten (a rewrite from a read taken before the commit, the
journal's or another scope's write landing between, could lose a message); ``GET /v1/conversations/messages``
sorts it by ``createdAt`` (the event's timestamp; equal times keep the log's order), and the indexes of
``GET /v1/conversations`` only move ``lastAt`` forward (``ZADD GT``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from redis import Redis

from worker.plugin import HandlerContext, Plugin, Policy, Source, define_source_handler, user_bytes_effects

__all__ = ["ConversationLogDeps", "LoggedAssistantMessage", "LoggedUserMessage", "in_time_order", "plugin"]

MAX_MESSAGES = 500
READ_WINDOW = 50  # the tail a new message is deduplicated against (the whole log for one older than it)
ASSISTANT_SOURCE_TYPES = ("client.runtime.complete", "agent.execution.completed")


class _Owned(BaseModel):
    """The owner a message is logged under (besides the event's own ``userId``/``agentId``)."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    agent_id: str | None = None
    topic_id: str | None = None


class LoggedUserMessage(_Owned):
    message: str | None = None
    message_id: str | None = None
    trigger: str | None = None


class LoggedAssistantMessage(_Owned):
    assistant_message_id: str | None = None
    assistant_content: str | None = None
    trigger_message_id: str | None = None
    parent_message_id: str | None = None


def _owner(source: Source) -> tuple[str, str, str] | None:
    p = source.payload
    user = source.user_id or p.get("userId")
    agent = source.agent_id or p.get("agentId")
    topic = p.get("topicId")
    if not (isinstance(user, str) and isinstance(agent, str) and isinstance(topic, str)):
        return None
    return user, agent, topic


@dataclass(frozen=True, slots=True)
class ConversationLogDeps:
    """Reads: whether a message is already in the log (two events may carry the same assistant message)."""

    redis: Redis


def _append(ctx: HandlerContext, owner: tuple[str, str, str], message: dict[str, Any]) -> None:
    key = ctx.keys.conversation(*owner)
    pipe = ctx.deps(ConversationLogDeps).redis.pipeline(transaction=False)
    pipe.lrange(key, -READ_WINDOW, -1)
    pipe.llen(key)
    pipe.lindex(key, 0)
    existing, length, first = pipe.execute()
    if int(length) > len(existing) and _older_than_all(existing, message["createdAt"]):
        # logged late (a redrive): its first logging may be further back than the tail
        existing = ctx.deps(ConversationLogDeps).redis.lrange(key, 0, -1)
    if any(json.loads(m).get("id") == message["id"] for m in existing):
        return  # another event already logged this message
    line = json.dumps(message, ensure_ascii=False)
    ctx.effects.call("RPUSH", key, line)
    ctx.effects.call("LTRIM", key, -MAX_MESSAGES, -1)
    # the user's storage quota follows the trimmed list: the message it adds, less the one the trim drops
    dropped = len(first.encode("utf-8")) if first is not None and int(length) >= MAX_MESSAGES else 0
    for command in user_bytes_effects(ctx.keys, owner[0], len(line.encode("utf-8")) - dropped):
        ctx.effects.call(*command)
    member = "\x1f".join(owner)
    ctx.effects.call("ZADD", ctx.keys.conversations, "GT", message["createdAt"], member)
    ctx.effects.call("ZADD", ctx.keys.user_conversations(owner[0]), "GT", message["createdAt"], member)


def _older_than_all(lines: list[Any], created_at: Any) -> bool:
    """Whether a message of ``created_at`` is older than every one of ``lines`` (a late one: a redrive)."""
    times = [json.loads(line).get("createdAt") for line in lines]
    return all(isinstance(t, int | float) and not isinstance(t, bool) and t > created_at for t in times)


def in_time_order(lines: list[Any]) -> list[dict[str, Any]]:
    """A conversation log's messages by ``createdAt`` (stable: equal or missing times keep the log's order)."""
    messages = [json.loads(line) for line in lines]

    def created_at(message: dict[str, Any]) -> float:
        at = message.get("createdAt")
        return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0

    return sorted(messages, key=created_at)


def _message_id(source: Source) -> str:
    """A user message's id, as LobeHub's ``agent.user.message`` renderer reads it: ``messageId`` →
    ``userMessageId`` → the source id; an empty or non-string id is absent (the self-iteration judge reads the
    same: policies/self_iteration/handlers/analyze_intent.py, ``_user_message_id``)."""
    for key in ("messageId", "userMessageId"):
        value = source.payload.get(key)
        if isinstance(value, str) and value:
            return value
    return source.source_id


def _user_message(source: Source, ctx: HandlerContext) -> None:
    owner = _owner(source)
    message = source.payload.get("message")
    if owner is None or not isinstance(message, str) or source.payload.get("trigger") == "agent_signal":
        return None
    message_id = _message_id(source)
    _append(ctx, owner, {"id": message_id, "role": "user", "content": message, "createdAt": source.timestamp})
    return None


def _assistant_message(source: Source, ctx: HandlerContext) -> None:
    owner = _owner(source)
    p = source.payload
    message_id = p.get("assistantMessageId")
    if owner is None or not isinstance(message_id, str) or not isinstance(p.get("assistantContent"), str):
        return None
    message = {
        "id": message_id,
        "role": "assistant",
        "content": p["assistantContent"],
        "parentId": p.get("triggerMessageId") or p.get("parentMessageId"),
        "createdAt": source.timestamp,
    }
    _append(ctx, owner, message)
    return None


def plugin() -> Plugin:
    """The conversation log the receipts UI reads."""
    return Plugin(
        "conversation-log",
        policies=_policies(),
        services=lambda runtime: ConversationLogDeps(runtime.redis),
        source_types=("agent.user.message", *ASSISTANT_SOURCE_TYPES),
        payload_schemas={
            "agent.user.message": LoggedUserMessage,
            **{t: LoggedAssistantMessage for t in ASSISTANT_SOURCE_TYPES},
        },
    )


def _policies() -> list[Policy]:
    return [
        Policy(
            "conversation-log",
            [
                define_source_handler(
                    "agent.user.message", "agent.user.message:conversation-log", _user_message
                ),
                define_source_handler(
                    ASSISTANT_SOURCE_TYPES,
                    "assistant-message:conversation-log",
                    _assistant_message,
                ),
            ],
        )
    ]
