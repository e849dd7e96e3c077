"""The reference agent's skill documents on a real Redis: concurrent runs for one skill serialise by
compare-and-set (one creates, every other replaces and leaves a history entry), and a run delivered twice
makes one version."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records.documents import DocumentStore
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

RUNS = 8


def test_concurrent_runs_for_one_skill_create_it_once_and_keep_every_version(
    redis_url: str, redis_client: Redis, keys: BucketKeys
) -> None:
    start = threading.Barrier(RUNS)
    results: list[tuple[str, dict[str, Any], str | None]] = []
    errors: list[BaseException] = []

    def run(n: int) -> None:
        # One connection per run, as in two pool children.
        client = Redis.from_url(redis_url, decode_responses=True)
        try:
            start.wait()
            store = DocumentStore(client, keys)
            results.append(
                store.upsert_skill(
                    "u1", "agt_1", title="Release checklist", content=f"v{n}", source_id=f"op_{n}"
                )
            )
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    apis = sorted(api for api, _, _ in results)
    assert apis == ["createSkillIfAbsent"] + ["replaceSkillContentCAS"] * (RUNS - 1)
    (current,) = DocumentStore(redis_client, keys).list_skills("u1", "agt_1")
    assert current["version"] == RUNS
    history = redis_client.hgetall(SelfIterationKeys(keys).skill_history(current["id"]))
    assert sorted(h for _, _, h in results if h) == sorted(history)
    assert sorted(int(d["version"]) for _, d, _ in results) == list(range(1, RUNS + 1))


def test_a_run_delivered_again_answers_what_it_did_without_a_second_version(
    redis_client: Redis, keys: BucketKeys
) -> None:
    store = DocumentStore(redis_client, keys)
    created = store.upsert_skill("u1", "agt_1", title="Release checklist", content="a", source_id="op_1")
    assert (
        store.upsert_skill("u1", "agt_1", title="release checklist", content="a", source_id="op_1") == created
    )
    updated = store.upsert_skill("u1", "agt_1", title="Release checklist", content="b", source_id="op_2")
    assert updated[0] == "replaceSkillContentCAS" and updated[2] is not None
    again = store.upsert_skill("u1", "agt_1", title="Release checklist", content="b", source_id="op_2")
    assert again == updated
    (current,) = store.list_skills("u1", "agt_1")
    assert current["version"] == 2 and current["content"] == "b"
    assert len(redis_client.hgetall(SelfIterationKeys(keys).skill_history(current["id"]))) == 1


def test_a_run_delivered_again_after_a_later_run_or_an_undo_writes_nothing(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """op_1 creates, op_2 replaces, op_1 comes again: it answers its create. After an undo of op_2, op_2 coming
    again does not replace the restored version."""
    store = DocumentStore(redis_client, keys)
    created = store.upsert_skill("u1", "agt_1", title="Release checklist", content="a", source_id="op_1")
    replaced = store.upsert_skill("u1", "agt_1", title="Release checklist", content="b", source_id="op_2")
    assert (
        store.upsert_skill("u1", "agt_1", title="Release checklist", content="a", source_id="op_1") == created
    )
    _, doc, history_id = replaced
    assert history_id is not None
    assert store.rollback("u1", "agt_1", doc["id"], history_id, doc["updatedAt"]) == "rolled_back"
    assert (
        store.upsert_skill("u1", "agt_1", title="Release checklist", content="b", source_id="op_2")
        == replaced
    )
    (current,) = store.list_skills("u1", "agt_1")
    assert current["content"] == "a" and current["restoredFrom"] == history_id
    assert len(redis_client.hgetall(SelfIterationKeys(keys).skill_history(current["id"]))) == 1
