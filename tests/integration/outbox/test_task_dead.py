"""Plugin tasks that keep failing end in a dead list, on a real worker (worker/runtime/tasks.py, PluginTask).

Before, a plugin task that raised was logged and acked: the reference agent's run of a memory request that failed
once was lost, its outbox record reading ``delivered`` and no receipt ever coming. Now a task is tried again with
backoff, ``max_attempts`` runs in all (one when it raises PermanentFailure), and then handed to its dead hook; the
agent run's hook settles the outbox record that asked for it ``dead`` (``GET /v1/outbox/dead``), and a redrive
hands the run over again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from policies.self_iteration.keys import SelfIterationKeys
from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.support.policies import EXPLODE_TASK, REFUSE_TASK, WHOSE_TASK
from worker.core.tenancy import working_for
from worker.keys.layout import BucketKeys, Keys
from worker.runtime.app import create_app
from worker.runtime.tasks import publish_task
from worker.settings import Settings

pytestmark = pytest.mark.integration

TRIES = 3  # AGENT_SIGNAL_MAX_ATTEMPTS of these tests (tests/conftest.py FAST)
SCOPE = "topic:tpc_dead"


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    return make_settings(max_attempts=TRIES)  # type: ignore[no-any-return]


@pytest.fixture
def client(settings: Settings, start_worker: Any) -> Iterator[TestClient]:
    start_worker(settings)
    with TestClient(create_web_app(settings)) as http:
        yield http


def _preference(source_id: str) -> dict[str, Any]:
    """A memory request of u1 in SCOPE (its run writes a memory, and its completion a receipt)."""
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_dead",
            "messageId": source_id,
            "message": "Going forward, I prefer tables.",
        },
    }


def _dead(client: TestClient) -> list[dict[str, Any]]:
    return list(client.get("/v1/outbox/dead").json()["records"])


def _receipts(client: TestClient) -> list[dict[str, Any]]:
    owner = {"userId": "u1", "agentId": "agt_1", "topicId": "tpc_dead"}
    return list(client.get("/v1/receipts", params=owner).json()["receipts"])


def test_a_run_that_fails_every_attempt_is_listed_dead_and_redriven(
    client: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    """The user's memories key holds a value of another type, so every memory write of the run is refused: the run
    is tried TRIES times, and its outbox record, ``delivered`` when the task was published, is listed dead with the
    run's error (type only: it may quote data). Once the key is repaired, a redrive runs it and its receipt comes."""
    memories = SelfIterationKeys(tenant_keys).memories("u1")
    redis_client.set(memories, "not a hash")
    sent = client.post("/v1/events", json=_preference("msg_dead"))
    assert sent.status_code == 202, sent.text

    (record,) = wait_for(lambda: _dead(client), what="the failed run's record in the outbox's dead list")
    assert (record["kind"], record["scopeKey"], record["state"]) == ("agent-run", SCOPE, "dead")
    assert record["lastError"] == f"agent_signal.agent_run failed: ResponseError (after {TRIES} attempts)"
    assert _receipts(client) == []

    redis_client.delete(memories)
    named = {"scopeKey": record["scopeKey"], "recordId": record["recordId"]}
    redriven = client.post("/v1/outbox/redrive", json={"records": [named]})
    assert redriven.json() == {"redriven": [named], "notDead": []}, redriven.text

    (receipt,) = wait_for(lambda: _receipts(client), what="the redriven run's receipt")
    assert receipt["id"].startswith("msg_dead:memory:msg_dead:writeMemory")
    assert _dead(client) == [] and redis_client.hlen(memories) == 1


def test_a_failing_task_is_tried_max_attempts_times_and_a_refused_one_once(
    settings: Settings, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """``test.explode`` raises every time: TRIES runs, then its dead hook. ``test.refuse`` raises PermanentFailure:
    one run, then its dead hook (no attempt would change it)."""
    start_worker(settings)
    app = create_app(settings)
    publish_task(app, EXPLODE_TASK, {"task": "explode", "text": "x"}, queue=settings.queue_name)
    publish_task(app, REFUSE_TASK, {"task": "refuse", "text": "r"}, queue=settings.queue_name)
    app.close()
    dead_list = f"{keys.home_prefix}test:task-dead"
    wait_for(lambda: redis_client.llen(dead_list) == 2, what="both tasks' dead hooks")
    died = {entry["task"]: entry for entry in map(json.loads, redis_client.lrange(dead_list, 0, -1))}
    assert died["explode"]["error"] == f"{EXPLODE_TASK} failed: RuntimeError (after {TRIES} attempts)"
    assert died["refuse"]["error"] == f"{REFUSE_TASK} failed: PermanentFailure TEST_REFUSED (after 1 attempt)"
    assert redis_client.get(f"{keys.home_prefix}test:exploded") == str(TRIES)
    assert redis_client.get(f"{keys.home_prefix}test:refused") == "1"


def test_a_dead_hook_that_fails_is_tried_again_and_the_work_is_not_run_again(
    settings: Settings, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The dead hook fails three times between the two tasks (the store it writes to is down, as it likely was when
    the work failed): the work was logged and acked, listed nowhere. Now the burial alone is tried again after
    the backoff, with the first failure's error, and neither task's own run is repeated. ``test.refuse`` fails
    for good at its first attempt, before its last (a first version of the retry computed its backoff from the
    attempts left, below 1 there, and crashed: a review)."""
    failing = f"{keys.home_prefix}test:dead-hook-fails"
    # a task has TRIES + 1 burials: three failures, however they fall between the two, leave each one that lists
    redis_client.set(failing, TRIES)
    worker = start_worker(settings)
    app = create_app(settings)
    publish_task(app, EXPLODE_TASK, {"task": "explode", "text": "x"}, queue=settings.queue_name)
    publish_task(app, REFUSE_TASK, {"task": "refuse", "text": "r"}, queue=settings.queue_name)
    app.close()
    dead_list = f"{keys.home_prefix}test:task-dead"
    wait_for(
        lambda: redis_client.llen(dead_list) == 2,
        timeout_s=60,
        what="both tasks' burials",
        explain=worker.log,
    )
    died = {entry["task"]: entry for entry in map(json.loads, redis_client.lrange(dead_list, 0, -1))}
    assert died["explode"]["error"] == f"{EXPLODE_TASK} failed: RuntimeError (after {TRIES} attempts)"
    assert died["refuse"]["error"] == f"{REFUSE_TASK} failed: PermanentFailure TEST_REFUSED (after 1 attempt)"
    assert redis_client.get(failing) == str(
        TRIES - 5
    )  # three failed burials, then the two that listed the work
    assert redis_client.get(f"{keys.home_prefix}test:exploded") == str(TRIES)
    assert redis_client.get(f"{keys.home_prefix}test:refused") == "1"


def test_a_task_published_for_a_tenant_names_it_in_each_run_and_retry(
    settings: Settings, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A task published where one tenant's work is done (a deliverer given that tenant's outbox record) carries the
    tenant in its message, and so does its retry (Celery copies the message's headers to it): a task of a tenant
    deleted meanwhile is dropped though its payload does not name it (tests/security/tenants)."""
    start_worker(settings)
    app = create_app(settings)
    with working_for("delta"):
        publish_task(app, WHOSE_TASK, {"text": "no tenant in here"}, queue=settings.queue_name)
    app.close()
    whose = f"{keys.home_prefix}test:whose"
    wait_for(lambda: redis_client.llen(whose) == 2, what="the task's run and its retry")
    assert redis_client.lrange(whose, 0, -1) == ["delta", "delta"]
