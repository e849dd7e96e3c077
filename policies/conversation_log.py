"""The conversation log the receipts UI shows: user messages (``agent.user.message``) and assistant replies
(``client.runtime.complete`` / ``agent.execution.completed`` carrying ``assistantMessageId`` and
``assistantContent``), as seen in events. The handlers stage their writes (applied by the event's fenced
commit) and return nothing: they add no signals, so LobeHub's chains are unchanged. A message is logged only
when its owner (user, agent, topic) and its text are known; the payload models type what is read.

Events are not processed in the order their messages were written (a retry, a redrive, two producers), so the
log is kept in ``createdAt`` order (the event's timestamp): a message older than the ones at the end of the list
is put before them (the newer tail is cut with ``LTRIM`` and pushed back after it; equal times keep processing
order), and the indexes of ``GET /v1/conversations`` only move ``lastAt`` forward (``ZADD GT``). A message older
than every one of a full log (``MAX_MESSAGES``) is not logged: the trim would drop it at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from redis import Redis

from worker.plugin import HandlerContext, Plugin, Policy, Source, define_source_handler, user_bytes_effects

__all__ = ["ConversationLogDeps", "LoggedAssistantMessage", "LoggedUserMessage", "plugin"]

MAX_MESSAGES = 500
READ_WINDOW = 50  # the tail read first: a new message is nearly always placed and deduplicated within it
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


def _created_at(line: str) -> float | None:
    at = json.loads(line).get("createdAt")
    return None if isinstance(at, bool) or not isinstance(at, int | float) else at


def _newer_at_end(lines: list[str], created_at: float) -> int:
    """How many lines at the end of ``lines`` are newer than ``created_at`` (walking back to the first that is
    not, or has no time)."""
    newer = 0
    for line in reversed(lines):
        at = _created_at(line)
        if at is None or at <= created_at:
            break
        newer += 1
    return newer


def _read(redis: Redis, key: str, created_at: float) -> tuple[list[str], int, str | None]:
    """(the lines the message is placed among, the list's length, its first line): the last ``READ_WINDOW``
    lines, or every line when the message is older than all of those."""
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(key, -READ_WINDOW, -1)
    pipe.llen(key)
    pipe.lindex(key, 0)
    tail, length, first = pipe.execute()
    if int(length) > len(tail) and _newer_at_end(tail, created_at) == len(tail):
        tail = redis.lrange(key, 0, -1)
        length, first = len(tail), (tail[0] if tail else None)
    return list(tail), int(length), first


def _append(ctx: HandlerContext, owner: tuple[str, str, str], message: dict[str, Any]) -> None:
    key = ctx.keys.conversation(*owner)
    created_at = message["createdAt"]
    lines, length, first = _read(ctx.deps(ConversationLogDeps).redis, key, created_at)
    if any(json.loads(m).get("id") == message["id"] for m in lines):
        return  # another event already logged this message
    newer = _newer_at_end(lines, created_at)
    full = length >= MAX_MESSAGES
    if full and newer == length:
        return  # older than every message of a full log: the trim would drop it at once
    line = json.dumps(message, ensure_ascii=False)
    if newer == 0:
        ctx.effects.call("RPUSH", key, line)
    elif newer == length:
        ctx.effects.call("LPUSH", key, line)
    else:  # cut the newer tail and push it back after the message
        ctx.effects.call("LTRIM", key, 0, -(newer + 1))
        ctx.effects.call("RPUSH", key, line, *lines[-newer:])
    ctx.effects.call("LTRIM", key, -MAX_MESSAGES, -1)
    # the user's storage quota follows the trimmed list: the message it adds, less the one the trim drops (the
    # first, which the message never displaces: one older than all of a full log is not logged)
    dropped = len(first.encode("utf-8")) if full and first is not None else 0
    for command in user_bytes_effects(ctx.keys, owner[0], len(line.encode("utf-8")) - dropped):
        ctx.effects.call(*command)
    member = "\x1f".join(owner)
    ctx.effects.call("ZADD", ctx.keys.conversations, "GT", created_at, member)
    ctx.effects.call("ZADD", ctx.keys.user_conversations(owner[0]), "GT", created_at, member)


def _user_message(source: Source, ctx: HandlerContext) -> None:
    owner = _owner(source)
    message = source.payload.get("message")
    if owner is None or not isinstance(message, str) or source.payload.get("trigger") == "agent_signal":
        return None
    message_id = str(source.payload.get("messageId") or source.source_id)
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
