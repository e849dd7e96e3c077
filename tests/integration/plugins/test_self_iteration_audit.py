"""Self-iteration against the audit's findings, on a real Redis: receipt rollback (ISO expected versions,
idempotent retries, neighbours' writes retried instead of "failed") in records/rollback.py and
records/documents.py, and end to end through POST /v1/events and a real worker: no shared "-" user, a parked
skill candidate consumed only by its own user, and the feature gate checked on the memory path in the worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records import documents
from policies.self_iteration.records.documents import DocumentStore
from policies.self_iteration.records.rollback import expected_updated_at_ms, rollback_skill_receipt
from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.integration.plugins.test_self_iteration import _done, _send
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

TITLE = "Release checklist"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def store(redis_client: Redis, keys: BucketKeys) -> DocumentStore:
    return DocumentStore(redis_client, keys)


def _replaced(store: DocumentStore) -> tuple[dict[str, Any], str]:
    """Version 1 by op_1, replaced by op_2: (the current document, the history id of version 1)."""
    store.upsert_skill("u1", "agt_1", title=TITLE, content="v1", source_id="op_1")
    _, doc, history_id = store.upsert_skill("u1", "agt_1", title=TITLE, content="v2", source_id="op_2")
    assert history_id is not None
    return doc, history_id


def _receipt(doc: dict[str, Any], history_id: str, expected: Any, **metadata: Any) -> dict[str, Any]:
    return {
        "id": "op_2:replaceSkillContentCAS:0:skill",
        "kind": "skill",
        "userId": "u1",
        "agentId": "agt_1",
        "metadata": {
            "documentId": doc["id"],
            "historyId": history_id,
            "expectedCurrentDocumentUpdatedAt": expected,
            "rollbackStatus": "available",
            **metadata,
        },
    }


class TestExpectedVersion:
    """Defect 4: an ISO-string expectedCurrentDocumentUpdatedAt made the route answer 500 (int("2026-…"))."""

    @pytest.mark.parametrize(
        ("value", "ms"),
        [
            (1767225600123, 1767225600123),
            (1767225600123.0, 1767225600123),
            ("1767225600123", 1767225600123),
            ("2026-01-01T00:00:00.123Z", 1767225600123),
            ("2026-01-01T01:00:00.123+01:00", 1767225600123),
            ("2026-01-01T00:00:00.123", 1767225600123),
            ("2026-01-01T00:00:00Z", 1767225600000),
        ],
    )
    def test_forms(self, value: Any, ms: int) -> None:
        assert expected_updated_at_ms(value) == ms

    @pytest.mark.parametrize("value", [None, True, "", "yesterday", float("nan"), 1.5, [1], {"a": 1}])
    def test_not_a_version(self, value: Any) -> None:
        assert expected_updated_at_ms(value) is None

    def test_an_iso_version_rolls_back(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        receipt = _receipt(doc, history_id, _iso(doc["updatedAt"]))
        assert rollback_skill_receipt(store, receipt) == "rolled_back"
        current = store.get_skill("u1", "agt_1", doc["id"])
        assert current is not None and current["content"] == "v1" and current["restoredFrom"] == history_id

    def test_an_unreadable_version_is_a_conflict_and_changes_nothing(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        assert rollback_skill_receipt(store, _receipt(doc, history_id, "yesterday")) == "conflict"
        assert store.get_skill("u1", "agt_1", doc["id"]) == doc


class TestRetriedUndo:
    """Defect 5: a retried undo answered (and stored) "conflict" instead of "rolled_back"."""

    def test_a_retry_whose_first_answer_was_lost(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        receipt = _receipt(doc, history_id, doc["updatedAt"])
        assert rollback_skill_receipt(store, receipt) == "rolled_back"
        restored = store.get_skill("u1", "agt_1", doc["id"])
        assert rollback_skill_receipt(store, receipt) == "rolled_back"  # the receipt still says "available"
        assert store.get_skill("u1", "agt_1", doc["id"]) == restored

    def test_a_retry_within_the_same_millisecond(
        self, store: DocumentStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The restored version is newer than the one it replaced even when the clock has not moved: else
        the retry found "its" updatedAt again and restored a second time."""
        doc, history_id = _replaced(store)
        monkeypatch.setattr(documents, "now_ms", lambda: doc["updatedAt"])
        receipt = _receipt(doc, history_id, doc["updatedAt"])
        assert rollback_skill_receipt(store, receipt) == "rolled_back"
        restored = store.get_skill("u1", "agt_1", doc["id"])
        assert restored is not None and restored["updatedAt"] > doc["updatedAt"]
        assert rollback_skill_receipt(store, receipt) == "rolled_back"
        assert store.get_skill("u1", "agt_1", doc["id"]) == restored

    def test_a_retry_of_a_receipt_already_rolled_back(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        assert rollback_skill_receipt(store, _receipt(doc, history_id, doc["updatedAt"])) == "rolled_back"
        store.upsert_skill("u1", "agt_1", title=TITLE, content="v3", source_id="op_3")  # moved on since
        done = _receipt(doc, history_id, doc["updatedAt"], rollbackStatus="rolled_back")
        assert rollback_skill_receipt(store, done) == "rolled_back"
        current = store.get_skill("u1", "agt_1", doc["id"])
        assert current is not None and current["content"] == "v3"

    def test_a_document_another_run_moved_on_is_a_conflict(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        store.upsert_skill("u1", "agt_1", title=TITLE, content="v3", source_id="op_3")
        assert rollback_skill_receipt(store, _receipt(doc, history_id, doc["updatedAt"])) == "conflict"
        current = store.get_skill("u1", "agt_1", doc["id"])
        assert current is not None and current["content"] == "v3"

    def test_not_a_skill_receipt(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        assert (
            rollback_skill_receipt(store, {**_receipt(doc, history_id, 1), "kind": "memory"}) == "unsupported"
        )
        no_history = _receipt(doc, history_id, 1)
        no_history["metadata"].pop("historyId")
        assert rollback_skill_receipt(store, no_history) == "unsupported"


class Meddler:
    """The store's keys, except that each of the first ``times`` reads of a history id (inside the rollback's
    WATCH) first lets another run write skill ``title`` of the same agent: the watched hash changes."""

    def __init__(self, store: DocumentStore, title: str, times: int) -> None:
        self.keys, self.store, self.title, self.times = store.si, store, title, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.keys, name)

    def skill_history(self, document_id: str) -> str:
        if self.times > 0:
            self.times -= 1
            other = DocumentStore(self.store.client, self.store.keys)
            other.upsert_skill(
                "u1", "agt_1", title=self.title, content=f"x{self.times}", source_id=f"m{self.times}"
            )
        return str(self.keys.skill_history(document_id))


class TestConcurrentWrites:
    """Defect 6: any write to the agent's skills during an undo made it answer (and store) "failed"."""

    def test_a_write_to_another_skill_is_retried(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        store.si = Meddler(store, "Another skill", times=3)  # type: ignore[assignment]
        assert store.rollback("u1", "agt_1", doc["id"], history_id, doc["updatedAt"]) == "rolled_back"
        current = store.get_skill("u1", "agt_1", doc["id"])
        assert current is not None and current["content"] == "v1"

    def test_a_write_to_the_same_skill_is_a_conflict(self, store: DocumentStore) -> None:
        doc, history_id = _replaced(store)
        store.si = Meddler(store, TITLE, times=1)  # type: ignore[assignment]
        assert store.rollback("u1", "agt_1", doc["id"], history_id, doc["updatedAt"]) == "conflict"

    def test_a_redis_error_is_failed(self, keys: BucketKeys) -> None:
        unreachable = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        assert DocumentStore(unreachable, keys).rollback("u1", "agt_1", "d", "h", 1) == "failed"

    def test_a_bug_is_not_reported_as_failed(self, store: DocumentStore, redis_client: Redis) -> None:
        doc, history_id = _replaced(store)
        redis_client.hset(SelfIterationKeys(store.keys).skills("u1", "agt_1"), doc["id"], "{not json")
        with pytest.raises(ValueError):
            store.rollback("u1", "agt_1", doc["id"], history_id, doc["updatedAt"])


# ---- end to end: POST /v1/events, a real worker, the HTTP routes ----------------------------------------


@pytest.fixture
def stack(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings()
    start_worker(settings)
    with TestClient(create_web_app(settings), raise_server_exceptions=False) as client:
        yield client


def _message(
    user: str | None, source_id: str, text: str, topic: str = "tpc_1", **payload: Any
) -> dict[str, Any]:
    event = {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": topic, "messageId": source_id, "message": text, **payload},
    }
    return event if user is None else {**event, "userId": user}


def _skill_completion(doc: dict[str, Any], history_id: str, expected: Any) -> dict[str, Any]:
    data = {
        "status": "applied",
        "summary": "Release checklist updated",
        "documentId": doc["id"],
        "historyId": history_id,
        "expectedCurrentDocumentUpdatedAt": expected,
    }
    return {
        "sourceType": "agent.execution.completed",
        "sourceId": "op_2:complete:done",
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "operationId": "op_2",
            "topicId": "tpc_1",
            "selfIteration": {
                "marker": {"kind": "skill", "sourceId": "s2", "agentId": "agt_1"},
                "mutations": [{"apiName": "replaceSkillContentCAS", "kind": "mutation", "data": data}],
                "artifacts": [],
                "userId": "u1",
            },
        },
    }


class TestRollbackRoute:
    """Defects 4 and 5 through POST /v1/receipts/{id}/rollback (the route calls rollback_skill_receipt)."""

    @pytest.mark.parametrize("iso", [False, True])
    def test_an_undo_and_its_retry(self, stack: TestClient, store: DocumentStore, iso: bool) -> None:
        doc, history_id = _replaced(store)
        expected = _iso(doc["updatedAt"]) if iso else doc["updatedAt"]
        _done(stack, _send(stack, _skill_completion(doc, history_id, expected)))
        (receipt,) = wait_for(
            lambda: stack.get("/v1/receipts", params={"userId": "u1"}).json()["receipts"], what="the receipt"
        )
        assert receipt["metadata"]["rollbackStatus"] == "available"
        for _ in range(2):  # the second is a retry: same answer, same stored status, no second restore
            answer = stack.post(f"/v1/receipts/{receipt['id']}/rollback")
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "rolled_back"
            assert answer.json()["receipt"]["metadata"]["rollbackStatus"] == "rolled_back"
        listed = stack.get("/v1/receipts", params={"userId": "u1"}).json()["receipts"]
        assert [r["metadata"]["rollbackStatus"] for r in listed] == ["rolled_back"]
        current = store.get_skill("u1", "agt_1", doc["id"])
        assert current is not None and current["content"] == "v1"


class TestEndToEnd:
    def test_an_event_without_a_user_writes_nothing_for_a_shared_user(self, stack: TestClient) -> None:
        """Defect 1: memories, skills and receipts of every anonymous event went to the user "-"."""
        chain = _done(stack, _send(stack, _message(None, "anon_1", "Going forward, I prefer tables.")))
        assert chain["status"] == "done"
        envelope = stack.get(f"/v1/chains/{chain['chainId']}").json()["envelope"]
        assert [r["detail"] for r in envelope["results"]] == ["Missing userId for memory action."]
        assert stack.get("/v1/memories", params={"userId": "-"}).json()["memories"] == []
        assert stack.get("/v1/receipts", params={"userId": "-"}).json()["receipts"] == []

    def test_another_users_completion_does_not_consume_a_parked_candidate(self, stack: TestClient) -> None:
        """Defect 3: u2's completion turned u1's parked skill candidate into a skill of u2's."""
        text = 'Please create a skill called "Plan": SECRETWORD steps.'
        _done(stack, _send(stack, _message("u1", "m1", text, topic="tpc_S", trigger="execAgent")))
        completion = {
            "sourceType": "agent.execution.completed",
            "sourceId": "op_u2:complete:done",
            "userId": "u2",
            "agentId": "agt_1",
            "payload": {
                "agentId": "agt_1",
                "operationId": "op_u2",
                "topicId": "tpc_S",
                "reason": "done",
                "assistantMessageId": "a1",
                "triggerMessageId": "m1",
            },
        }
        chain = _done(stack, _send(stack, completion))
        envelope = stack.get(f"/v1/chains/{chain['chainId']}").json()["envelope"]
        assert envelope["actions"] == []
        assert stack.get("/v1/skills", params={"userId": "u2", "agentId": "agt_1"}).json()["skills"] == []
        # u1's own completion still synthesises the skill.
        own = {**completion, "sourceId": "op_u1:complete:done", "userId": "u1"}
        own["payload"] = {**completion["payload"], "operationId": "op_u1"}
        _done(stack, _send(stack, own))
        skills = wait_for(
            lambda: stack.get("/v1/skills", params={"userId": "u1", "agentId": "agt_1"}).json()["skills"],
            what="u1's skill",
        )
        assert "SECRETWORD" in json.dumps(skills)

    def test_the_gate_is_checked_in_the_worker(self, stack: TestClient) -> None:
        """Defect 11: scope paused, gate turned off, scope resumed: the memory was still written."""
        assert stack.post("/v1/scopes/topic:tpc_P/pause").status_code == 200
        event_id = _send(stack, _message("u1", "g1", "Going forward, I prefer tables.", topic="tpc_P"))
        assert stack.put("/v1/features/self-iteration/u1", json={"enabled": False}).status_code == 200
        assert stack.post("/v1/scopes/topic:tpc_P/resume").status_code == 200
        chain = _done(stack, event_id)
        envelope = stack.get(f"/v1/chains/{chain['chainId']}").json()["envelope"]
        assert envelope["metadata"]["terminal"]["concluded"] == {
            "status": "skipped",
            "reason": "gate_disabled",
        }
        assert envelope["actions"] == []
        assert stack.get("/v1/memories", params={"userId": "u1"}).json()["memories"] == []

    @pytest.mark.parametrize(
        ("user", "source_id", "message_id"),
        [("u10", "sp1", "has space"), ("u11", "L" * 250, "L" * 250)],
        ids=["a-message-id-with-a-space", "two-long-ids-joined"],
    )
    def test_a_run_whose_idempotency_key_is_no_id_still_ends_in_receipts(
        self, stack: TestClient, user: str, source_id: str, message_id: str
    ) -> None:
        """A contract audit: the run's marker took ``<sourceId>:memory:<messageId>`` as it was, the id rule
        refused the run's completion event, and the memory was written with no receipt and no dead letter."""
        event = _message(user, source_id, "Going forward, I prefer concise answers.", messageId=message_id)
        _done(stack, _send(stack, event))
        (receipt,) = wait_for(
            lambda: stack.get("/v1/receipts", params={"userId": user}).json()["receipts"],
            what=f"{user}'s memory receipt",
        )
        assert receipt["kind"] == "memory" and receipt["id"].startswith("memory:sha256:")
