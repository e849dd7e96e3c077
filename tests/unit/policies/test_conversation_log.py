"""The conversation log (policies/conversation_log.py) on a real Redis, its staged writes applied as the fenced
commit would: messages processed out of order are kept in createdAt order, and a conversation's lastAt in the
indexes of GET /v1/conversations never moves backwards."""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from policies.conversation_log import MAX_MESSAGES, READ_WINDOW, ConversationLogDeps, plugin
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Source
from worker.keys.layout import BucketKeys

OWNER = ("u1", "a1", "t1")
MEMBER = "\x1f".join(OWNER)


def _user_message(redis_client: Redis, keys: BucketKeys, message_id: str, created_at: int) -> None:
    """Process one agent.user.message event and apply its staged writes."""
    handlers = {h.listen[0]: h for p in plugin().policies for h in p.handlers}  # type: ignore[union-attr]
    source = Source(
        source_id=message_id,
        source_type="agent.user.message",
        scope_key="topic:t1",
        timestamp=created_at,
        payload={"message": f"text of {message_id}", "messageId": message_id, "topicId": "t1"},
        chain=ChainRef(chain_id=f"chain:{message_id}", root_source_id=message_id),
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
    return [
        (m["id"], m["createdAt"])
        for m in map(json.loads, redis_client.lrange(keys.conversation(*OWNER), 0, -1))
    ]


def test_an_older_message_processed_later_keeps_created_at_order(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """newer (2000), then older (1000), then one between (1500), then the same time as newer: the log reads in
    createdAt order (equal times in processing order) and lastAt stays at 2000 in both indexes."""
    for message_id, at in [("m-new", 2000), ("m-old", 1000), ("m-mid", 1500), ("m-tie", 2000)]:
        _user_message(redis_client, keys, message_id, at)
    assert _log(redis_client, keys) == [("m-old", 1000), ("m-mid", 1500), ("m-new", 2000), ("m-tie", 2000)]
    assert redis_client.zscore(keys.conversations, MEMBER) == 2000
    assert redis_client.zscore(keys.user_conversations("u1"), MEMBER) == 2000


def test_an_older_message_beyond_the_read_window_is_placed(redis_client: Redis, keys: BucketKeys) -> None:
    """A message older than every one of the last READ_WINDOW is placed by reading the whole log; one older than
    every message of a full log is not logged (the trim would drop it at once)."""
    for i in range(READ_WINDOW + 5):
        _user_message(redis_client, keys, f"m{i}", 10_000 + i)
    _user_message(redis_client, keys, "m-early", 10_002)
    ids = [m for m, _ in _log(redis_client, keys)]
    assert ids[:4] == ["m0", "m1", "m2", "m-early"] and len(ids) == READ_WINDOW + 6
    key = keys.conversation(*OWNER)
    filler = [
        json.dumps({"id": f"f{i}", "role": "user", "content": "x", "createdAt": 20_000 + i})
        for i in range(MAX_MESSAGES)
    ]
    redis_client.delete(key)
    redis_client.rpush(key, *filler)
    _user_message(redis_client, keys, "m-ancient", 1)
    assert redis_client.llen(key) == MAX_MESSAGES and "m-ancient" not in str(redis_client.lindex(key, 0))
    assert redis_client.zscore(keys.conversations, MEMBER) == 10_000 + READ_WINDOW + 4
