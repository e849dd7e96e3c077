"""The per-session store: settings, the context (messages, checkpoints, token usage) and the D-Mail slot.

Semantics follow kimi-cli's ``Context`` (reference kimi-dmail.md §2.3, §2.5):

* checkpoints are numbered from 0; each writes a ``_checkpoint`` record and, when the session enabled
  D-Mail, the user message ``<system>CHECKPOINT n</system>``;
* ``revert_to(id)`` keeps exactly what came before the target's ``_checkpoint`` record; the token count is
  the last ``_usage`` record kept; ``Checkpoint {id} does not exist`` for an id not yet issued;
* ``clear`` (and compaction, which clears, checkpoints 0 and appends the summary) resets ids to 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis

from sessions.scripts import SessionScripts
from worker.keys import Keys

__all__ = ["ContextView", "SessionSettings", "SessionStore", "UnknownCheckpoint", "session_scope"]

RECORD_ROLES = ("_checkpoint", "_usage", "_system_prompt")


def session_scope(session_id: str) -> str:
    """The scope key of a session: its events and its state serialize together."""
    return f"session:{session_id}"


class UnknownCheckpoint(ValueError):
    """kimi's ``ValueError(f"Checkpoint {checkpoint_id} does not exist")``."""

    def __init__(self, checkpoint_id: int) -> None:
        super().__init__(f"Checkpoint {checkpoint_id} does not exist")
        self.checkpoint_id = checkpoint_id


@dataclass(frozen=True, slots=True)
class SessionSettings:
    dmail_enabled: bool = False
    root: bool = True
    functions: tuple[str, ...] = ()
    user_id: str | None = None
    agent_id: str | None = None
    topic_id: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dmailEnabled": self.dmail_enabled,
            "root": self.root,
            "functions": list(self.functions),
        }
        for key, value in (("userId", self.user_id), ("agentId", self.agent_id), ("topicId", self.topic_id)):
            if value is not None:
                data[key] = value
        return data


@dataclass(frozen=True, slots=True)
class ContextView:
    messages: list[dict[str, Any]]
    n_checkpoints: int
    token_count: int

    def to_json_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "nCheckpoints": self.n_checkpoints, "tokenCount": self.token_count}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else value.decode("utf-8")


class SessionStore:
    """All session state of one key prefix."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self.scripts = SessionScripts.register(client)

    def _keys(self, session_id: str) -> list[str]:
        scope = session_scope(session_id)
        return [
            self.keys.context(scope),
            self.keys.context_meta(scope),
            self.keys.checkpoints(scope),
            self.keys.usage(scope),
            self.keys.dmail(scope),
        ]

    # ---- settings ----------------------------------------------------------------------------------

    def get_settings(self, session_id: str) -> SessionSettings:
        raw = self.client.hgetall(self.keys.session(session_scope(session_id)))
        data = {_s(k): _s(v) for k, v in raw.items()}
        return SessionSettings(
            dmail_enabled=data.get("dmailEnabled") == "1",
            root=data.get("root", "1") == "1",
            functions=tuple(json.loads(data.get("functions", "[]"))),
            user_id=data.get("userId"),
            agent_id=data.get("agentId"),
            topic_id=data.get("topicId"),
        )

    def update_settings(self, session_id: str, changes: dict[str, Any]) -> SessionSettings:
        """Merge ``changes`` (camelCase keys, already validated) into the stored settings."""
        mapping: dict[Any, Any] = {}
        for key, value in changes.items():
            if key in ("dmailEnabled", "root"):
                mapping[key] = "1" if value else "0"
            elif key == "functions":
                mapping[key] = json.dumps(list(value))
            else:
                mapping[key] = str(value)
        if mapping:
            self.client.hset(self.keys.session(session_scope(session_id)), mapping=mapping)
        return self.get_settings(session_id)

    # ---- context -----------------------------------------------------------------------------------

    def append(
        self, session_id: str, messages: Sequence[dict[str, Any]], token_count: int | None = None
    ) -> int:
        """Append messages (and a ``_usage`` record when ``token_count`` is given); returns the message count."""
        records = json.dumps([json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages])
        return int(
            self.scripts.append(
                keys=self._keys(session_id), args=[records, "" if token_count is None else token_count]
            )
        )

    def checkpoint(self, session_id: str, *, add_user_message: bool) -> int:
        return int(
            self.scripts.checkpoint(keys=self._keys(session_id), args=["1" if add_user_message else "0"])
        )

    def revert_to(self, session_id: str, checkpoint_id: int) -> ContextView:
        if not int(self.scripts.revert(keys=self._keys(session_id), args=[checkpoint_id])):
            raise UnknownCheckpoint(checkpoint_id)
        return self.read(session_id)

    def clear(self, session_id: str) -> None:
        self.scripts.clear(keys=self._keys(session_id), args=["0", "0", "[]"])

    def compact(self, session_id: str, messages: Sequence[dict[str, Any]], *, add_user_message: bool) -> None:
        """kimi's compaction: clear, checkpoint 0, then the compacted messages."""
        records = json.dumps([json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages])
        self.scripts.clear(keys=self._keys(session_id), args=["1", "1" if add_user_message else "0", records])

    def records(self, session_id: str, start: int = 0) -> list[dict[str, Any]]:
        return [
            json.loads(r) for r in self.client.lrange(self.keys.context(session_scope(session_id)), start, -1)
        ]

    def read(self, session_id: str) -> ContextView:
        """The current context: messages only (checkpoint and usage records are bookkeeping)."""
        scope = session_scope(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(self.keys.context(scope), 0, -1)
        pipe.hmget(self.keys.context_meta(scope), ["next", "tokenCount"])
        raw, (next_id, tokens) = pipe.execute()
        messages = [m for m in (json.loads(r) for r in raw) if m.get("role") not in RECORD_ROLES]
        return ContextView(messages=messages, n_checkpoints=int(next_id or 0), token_count=int(tokens or 0))

    def n_checkpoints(self, session_id: str) -> int:
        return int(self.client.hget(self.keys.context_meta(session_scope(session_id)), "next") or 0)
