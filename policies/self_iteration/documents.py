"""The reference runner's small real store: memories and versioned skill documents per user (and agent).

Skill documents carry ``updatedAt`` and every replacement keeps the previous version under a history id, so
a receipt can be rolled back with compare-and-set: only while the document is still the version the
receipt produced (``expectedCurrentDocumentUpdatedAt``), else ``conflict``.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal

from redis import Redis

from worker.plugin import Keys

__all__ = ["DocumentStore", "RollbackStatus"]

RollbackStatus = Literal["rolled_back", "conflict", "not_found", "failed", "unsupported"]


def _id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


class DocumentStore:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

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
            "createdAt": int(time.time() * 1000),
        }
        self.client.hsetnx(self.keys.memories(user_id), memory["id"], json.dumps(memory, ensure_ascii=False))
        return self.get_memory(user_id, memory["id"]) or memory

    def get_memory(self, user_id: str, memory_id: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.keys.memories(user_id), memory_id)
        return None if raw is None else dict(json.loads(raw))

    def list_memories(self, user_id: str) -> list[dict[str, Any]]:
        items = [json.loads(v) for v in self.client.hvals(self.keys.memories(user_id))]
        return sorted(items, key=lambda m: m["createdAt"], reverse=True)

    # ---- skills ------------------------------------------------------------------------------------

    def find_skill(self, user_id: str, agent_id: str, title: str) -> dict[str, Any] | None:
        for raw in self.client.hvals(self.keys.skills(user_id, agent_id)):
            doc = json.loads(raw)
            if doc["title"].lower() == title.lower():
                return dict(doc)
        return None

    def get_skill(self, user_id: str, agent_id: str, document_id: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.keys.skills(user_id, agent_id), document_id)
        return None if raw is None else dict(json.loads(raw))

    def list_skills(self, user_id: str, agent_id: str) -> list[dict[str, Any]]:
        docs = [json.loads(v) for v in self.client.hvals(self.keys.skills(user_id, agent_id))]
        return sorted(docs, key=lambda d: d["updatedAt"], reverse=True)

    def upsert_skill(
        self, user_id: str, agent_id: str, *, title: str, content: str, source_id: str
    ) -> tuple[str, dict[str, Any], str | None]:
        """createSkillIfAbsent or replaceSkillContentCAS: (api name, new document, history id of the old one)."""
        key = self.keys.skills(user_id, agent_id)
        now = int(time.time() * 1000)
        existing = self.find_skill(user_id, agent_id, title)
        if existing is None:
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
            self.client.hset(key, doc["id"], json.dumps(doc, ensure_ascii=False))
            return "createSkillIfAbsent", doc, None
        history_id = _id("hist_", existing["id"], str(existing["updatedAt"]))
        self.client.hset(
            self.keys.skill_history(existing["id"]), history_id, json.dumps(existing, ensure_ascii=False)
        )
        doc = {
            **existing,
            "content": content,
            "updatedAt": max(now, existing["updatedAt"] + 1),
            "version": existing["version"] + 1,
            "sourceId": source_id,
        }
        self.client.hset(key, doc["id"], json.dumps(doc, ensure_ascii=False))
        return "replaceSkillContentCAS", doc, history_id

    def rollback(
        self, user_id: str, agent_id: str, document_id: str, history_id: str, expected_updated_at: int
    ) -> RollbackStatus:
        """Restore the version ``history_id`` if the document is still at ``expected_updated_at``."""
        key = self.keys.skills(user_id, agent_id)
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                raw = pipe.hget(key, document_id)
                if raw is None:
                    return "not_found"
                current = json.loads(raw)
                if int(current["updatedAt"]) != int(expected_updated_at):
                    return "conflict"
                old = pipe.hget(self.keys.skill_history(document_id), history_id)
                if old is None:
                    return "not_found"
                restored = {
                    **json.loads(old),
                    "updatedAt": int(time.time() * 1000),
                    "restoredFrom": history_id,
                }
                pipe.multi()
                pipe.hset(key, document_id, json.dumps(restored, ensure_ascii=False))
                pipe.execute()
                return "rolled_back"
            except Exception:
                return "failed"
