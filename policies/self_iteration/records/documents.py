"""The reference runner's small real store: memories and versioned skill documents per user (and agent).

Skill documents carry ``updatedAt`` and every replacement keeps the previous version under a history id, so
a receipt can be rolled back with compare-and-set: only while the document is still the version the
receipt produced (``expectedCurrentDocumentUpdatedAt``), else ``conflict``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Literal

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError, WatchError

from policies.self_iteration.keys import SelfIterationKeys
from worker.plugin import Keys, add_user_bytes, now_ms

__all__ = ["DocumentStore", "RollbackStatus"]

UPSERT_ATTEMPTS = 50  # optimistic retries (upsert, rollback) when a run changes the agent's skills meanwhile
RollbackStatus = Literal["rolled_back", "conflict", "not_found", "failed", "unsupported"]


def _id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _size(text: str | bytes) -> int:
    return len(text) if isinstance(text, bytes) else len(text.encode("utf-8"))


def _find(raw_docs: Iterable[Any], title: str) -> dict[str, Any] | None:
    """The skill document titled ``title`` (case-insensitive) among the stored JSON values."""
    for raw in raw_docs:
        doc = json.loads(raw)
        if doc["title"].lower() == title.lower():
            return dict(doc)
    return None


class DocumentStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self.si = SelfIterationKeys(keys)

    # ---- memories ----------------------------------------------------------------------------------

    def write_memory(
        self, user_id: str, *, source_id: str, layer: str, title: str, summary: str
    ) -> dict[str, Any]:
        """Idempotent per source: the same run writes the same memory id."""
        memory: dict[str, Any] = {
            "id": _id("mem_", user_id, source_id),
            "layer": layer,
            "title": title,
            "summary": summary,
            "sourceId": source_id,
            "createdAt": now_ms(),
        }
        stored = json.dumps(memory, ensure_ascii=False)
        if self.client.hsetnx(self.si.memories(user_id), memory["id"], stored):
            add_user_bytes(self.client, self.keys, user_id, _size(stored))  # the user's storage quota
        return self.get_memory(user_id, memory["id"]) or memory

    def get_memory(self, user_id: str, memory_id: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.si.memories(user_id), memory_id)
        return None if raw is None else dict(json.loads(raw))

    def list_memories(self, user_id: str) -> list[dict[str, Any]]:
        items = [json.loads(v) for v in self.client.hvals(self.si.memories(user_id))]
        return sorted(items, key=lambda m: m["createdAt"], reverse=True)

    # ---- skills ------------------------------------------------------------------------------------

    def find_skill(self, user_id: str, agent_id: str, title: str) -> dict[str, Any] | None:
        return _find(self.client.hvals(self.si.skills(user_id, agent_id)), title)

    def get_skill(self, user_id: str, agent_id: str, document_id: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.si.skills(user_id, agent_id), document_id)
        return None if raw is None else dict(json.loads(raw))

    def list_skills(self, user_id: str, agent_id: str) -> list[dict[str, Any]]:
        docs = [json.loads(v) for v in self.client.hvals(self.si.skills(user_id, agent_id))]
        return sorted(docs, key=lambda d: d["updatedAt"], reverse=True)

    def upsert_skill(
        self, user_id: str, agent_id: str, *, title: str, content: str, source_id: str
    ) -> tuple[str, dict[str, Any], str | None]:
        """createSkillIfAbsent or replaceSkillContentCAS: (api name, new document, history id of the old one).

        Compare-and-set under WATCH: two runs for one skill (two pool children) serialise, one creating and
        the other replacing with a history entry, where a read-then-write lost one of them. Each run's answer
        is kept under its ``source_id`` (``skill-runs``), so a run delivered again (the outbox and the task are
        at least once) answers what its first delivery did and writes nothing: not a second version, and not
        over a later run or an undo."""
        skills, runs = self.si.skills(user_id, agent_id), self.si.skill_runs(user_id, agent_id)
        for _ in range(UPSERT_ATTEMPTS):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(skills, runs)  # type: ignore[no-untyped-call]
                    done = pipe.hget(runs, source_id)
                    if done is not None:
                        api, doc, history_id = json.loads(done)
                        return str(api), dict(doc), history_id
                    return self._upsert_watched(pipe, (user_id, agent_id), title, content, source_id)
                except WatchError:
                    continue
        raise RuntimeError(f"skill {title!r} kept changing under {UPSERT_ATTEMPTS} attempts to replace it")

    def _upsert_watched(
        self, pipe: Pipeline, owner: tuple[str, str], title: str, content: str, source_id: str
    ) -> tuple[str, dict[str, Any], str | None]:
        user_id, agent_id = owner
        key = self.si.skills(user_id, agent_id)
        existing = _find(pipe.hvals(key), title)
        now = now_ms()
        history_id: str | None = None
        if existing is None:
            api = "createSkillIfAbsent"
            doc: dict[str, Any] = {
                "id": _id("skill_", user_id, agent_id, title.lower()),
                "agentDocumentId": _id("adoc_", user_id, agent_id, title.lower()),
                "title": title,
                "content": content,
                "createdAt": now,
                "updatedAt": now,
                "version": 1,
                "sourceId": source_id,
            }
        else:
            api = "replaceSkillContentCAS"
            history_id = _id("hist_", existing["id"], str(existing["updatedAt"]))
            doc = {
                **existing,
                "content": content,
                "updatedAt": max(now, existing["updatedAt"] + 1),
                "version": existing["version"] + 1,
                "sourceId": source_id,
            }
        stored, answer = (
            json.dumps(doc, ensure_ascii=False),
            json.dumps([api, doc, history_id], ensure_ascii=False),
        )
        added = _size(stored) + _size(answer)  # the new version replaces the old one, which moves to history
        pipe.multi()
        if existing is not None and history_id is not None:
            pipe.hset(
                self.si.skill_history(existing["id"]), history_id, json.dumps(existing, ensure_ascii=False)
            )
        pipe.hset(key, doc["id"], stored)
        pipe.hset(self.si.skill_runs(user_id, agent_id), source_id, answer)
        add_user_bytes(pipe, self.keys, user_id, added)  # the user's storage quota, in the same transaction
        pipe.execute()
        return api, doc, history_id

    def rollback(
        self, user_id: str, agent_id: str, document_id: str, history_id: str, expected_updated_at: int
    ) -> RollbackStatus:
        """Restore the version ``history_id`` if the document is still at ``expected_updated_at``.

        Compare-and-set under WATCH of the agent's skills hash: a write to any of its documents meanwhile
        aborts the transaction, and the check runs again (``UPSERT_ATTEMPTS`` times at most), so ``conflict``
        means this document's ``updatedAt`` moved on, never that a neighbour changed. A Redis error is
        ``failed``; anything else is a bug and propagates."""
        for _ in range(UPSERT_ATTEMPTS):
            try:
                return self._rollback_watched(
                    (user_id, agent_id), document_id, history_id, expected_updated_at
                )
            except WatchError:
                continue
            except RedisError:
                return "failed"
        return "failed"

    def _rollback_watched(
        self, owner: tuple[str, str], document_id: str, history_id: str, expected_updated_at: int
    ) -> RollbackStatus:
        user_id, agent_id = owner
        key = self.si.skills(user_id, agent_id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.watch(key)  # type: ignore[no-untyped-call]
            raw = pipe.hget(key, document_id)
            if raw is None:
                return "not_found"
            current = json.loads(raw)
            if int(current["updatedAt"]) != int(expected_updated_at):
                return "conflict"
            old = pipe.hget(self.si.skill_history(document_id), history_id)
            if old is None:
                return "not_found"
            # Newer than the version it replaces, even within one millisecond: else that version's receipt (a
            # retry of this undo) would still find "its" updatedAt and restore once more.
            updated_at = max(now_ms(), int(current["updatedAt"]) + 1)
            restored = {**json.loads(old), "updatedAt": updated_at, "restoredFrom": history_id}
            stored = json.dumps(restored, ensure_ascii=False)
            pipe.multi()
            pipe.hset(key, document_id, stored)
            add_user_bytes(pipe, self.keys, user_id, _size(stored) - _size(raw))  # replaces the current
            pipe.execute()  # WatchError when the skills hash changed since WATCH
            return "rolled_back"
