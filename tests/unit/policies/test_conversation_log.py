"""The conversation log (policies/conversation_log.py) on a real Redis, its staged writes applied as the fenced
commit would: messages processed out of order are appended, never rewritten, and read in createdAt order; a
conversation's lastAt in the indexes of GET /v1/conversations never moves backwards."""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from policies.conversation_log import READ_WINDOW, ConversationLogDeps, in_time_order, plugin
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Source
from worker.keys.layout import BucketKeys

OWNER = ("u1", "a1", "t1")
MEMBER = "\x1f".join(OWNER)


def _user_message(
    redis_client: Redis,
    keys: BucketKeys,
    message_id: str,
    created_at: int,
    *,
    source_id: str | None = None,
    id_field: str = "messageId",
) -> None:
    """Process one agent.user.message event (its id in ``id_field``) and apply its staged writes."""
    handlers = {h.listen[0]: h for p in plugin().policies for h in p.handlers}  # type: ignore[union-attr]
    source_id = source_id or message_id
    source = Source(
        source_id=source_id,
        source_type="agent.user.message",
        scope_key="topic:t1",
        timestamp=created_at,
        payload={"message": f"text of {message_id}", id_field: message_id, "topicId": "t1"},
        chain=ChainRef(chain_id=f"chain:{source_id}", root_source_id=source_id),
        user_id="u1",
        agent_id="a1",
    )
    ctx = HandlerContext(
        scope_key="topic:t1",
        node_timestamp=created_at,
        effects=EffectBuffer(keys=keys),
        keys=keys,
        deps_of=Deps({ConversationLogDeps: ConversationLogDeps(redis_client)}),
    )
    handlers["agent.user.message"].handle(source, ctx)
    for command in ctx.effects.commands:
        redis_client.execute_command(*command)


def _log(redis_client: Redis, keys: BucketKeys) -> list[tuple[str, Any]]:
    """The log as GET /v1/conversations/messages shows it."""
    messages = in_time_order(redis_client.lrange(keys.conversation(*OWNER), 0, -1))
    return [(m["id"], m["createdAt"]) for m in messages]


def test_an_older_message_processed_later_is_read_in_created_at_order(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """newer (2000), then older (1000), then one between (1500), then the same time as newer: read in createdAt
    order (equal times in processing order), stored as processed, and lastAt stays at 2000 in both indexes."""
    for message_id, at in [("m-new", 2000), ("m-old", 1000), ("m-mid", 1500), ("m-tie", 2000)]:
        _user_message(redis_client, keys, message_id, at)
    assert _log(redis_client, keys) == [("m-old", 1000), ("m-mid", 1500), ("m-new", 2000), ("m-tie", 2000)]
    stored = [json.loads(m)["id"] for m in redis_client.lrange(keys.conversation(*OWNER), 0, -1)]
    assert stored == ["m-new", "m-old", "m-mid", "m-tie"]  # appended, never rewritten
    assert redis_client.zscore(keys.conversations, MEMBER) == 2000
    assert redis_client.zscore(keys.user_conversations("u1"), MEMBER) == 2000


def test_a_message_logged_twice_is_logged_once(redis_client: Redis, keys: BucketKeys) -> None:
    _user_message(redis_client, keys, "m-1", 1000)
    _user_message(redis_client, keys, "m-1", 1000)
    assert _log(redis_client, keys) == [("m-1", 1000)]


def test_a_message_logged_again_late_beyond_the_tail_is_not_logged_twice(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A redrive logs an old message again after more than READ_WINDOW newer ones: found in the whole log."""
    _user_message(redis_client, keys, "m-first", 1000)
    for i in range(READ_WINDOW + 3):
        _user_message(redis_client, keys, f"m{i}", 2000 + i)
    _user_message(redis_client, keys, "m-first", 1000)
    assert [m for m, _ in _log(redis_client, keys)].count("m-first") == 1


def test_a_user_message_is_logged_under_its_user_message_id(redis_client: Redis, keys: BucketKeys) -> None:
    """LobeHub's renderer reads ``messageId`` → ``userMessageId`` → the source id: a hydrated completion
    (``<assistant>:completion:<user>``) names its user message ``userMessageId``, and is logged under it."""
    source_id = "asst_9:completion:msg_u1"
    _user_message(redis_client, keys, "msg_u1", 1000, source_id=source_id, id_field="userMessageId")
    assert _log(redis_client, keys) == [("msg_u1", 1000)]
