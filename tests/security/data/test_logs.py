"""Finding 9 of issue 26: logs and the audit trail carry no user content. A real web process and a real Celery
worker, both at DEBUG, run a workload whose user id, message text, payloads and discard reason all hold one
marker text: a user token's feedback that makes a memory run (the ``agent_run`` task), a failing event (its
handler's exception quotes the payload) that goes dead and is discarded, requests naming the user in their
path (refused and served), a plugin task that raises an error quoting its payload (sent by the engine, and
once by a publisher that does not hide task arguments), and the user's erasure. No line either process wrote
holds the marker; the user appears as the deployment's keyed pseudonym, and the audit trail names the erased
user the same way."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from redis import Redis

from tests.conftest import Proc, wait_for
from tests.support.policies import EXPLODE_TASK
from worker.keys.layout import BucketKeys
from worker.runtime.app import create_app
from worker.runtime.tasks import publish_task
from worker.settings import Settings

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-log-test-0123456789"
MARK = "qz7marker4lg"  # in the user id, message texts, payloads and the discard reason
USER = f"u-{MARK}"
AGENT, TOPIC = "agt_1", f"tpc-{MARK}"


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    return make_settings(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0)  # type: ignore[no-any-return]


@pytest.fixture
def stack(settings: Settings, start_worker: Any, start_web: Any) -> Iterator[tuple[str, list[Proc]]]:
    worker = start_worker(settings, concurrency=2, loglevel="DEBUG")
    web, url = start_web(settings, loglevel="DEBUG")
    yield url, [web, worker]


def _feedback(source_id: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "agentId": AGENT,
        "payload": {"agentId": AGENT, "topicId": TOPIC, "messageId": source_id, "message": text},
    }


def _run_workload(url: str, redis_client: Redis, keys: BucketKeys) -> str:
    """Everything that could put the marker in a log line; returns the dead event's id."""
    http = httpx.Client(base_url=url, timeout=30)
    try:
        return _steps(http, redis_client, keys)
    finally:
        http.close()


def _steps(http: httpx.Client, redis_client: Redis, keys: BucketKeys) -> str:
    operate = http.post("/v1/keys", json={"role": "operate"}, headers=_bearer(BOOT)).json()["key"]
    minted = http.post("/v1/tokens", json={"userId": USER}, headers=_bearer(operate))
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    sent = http.post(
        "/v1/events",
        json={
            "events": [
                _feedback("m1", f"Going forward, I prefer {MARK} answers."),
                _feedback("m2", f"hi {MARK}"),
            ]
        },
        headers=_bearer(token),
    )
    assert sent.status_code == 202, sent.text
    doomed = {
        "sourceType": "test.flaky",
        "sourceId": f"doomed-{MARK}",
        "userId": USER,
        "payload": {"note": f"{MARK} in a payload", "errorText": f"cannot parse {MARK!r}"},
    }
    answer = http.post("/v1/events", json=doomed, headers=_bearer(operate))
    assert answer.status_code == 202, answer.text
    dead_id = str(answer.json()["results"][0]["eventId"])

    def memory_made() -> bool:
        found = http.get("/v1/memories", params={"userId": USER}, headers=_bearer(token))
        return bool(found.json()["memories"])

    wait_for(memory_made, timeout_s=90, what="the memory run's memory")
    wait_for(
        lambda: http.get(f"/v1/events/{dead_id}", headers=_bearer(operate)).json()["status"] == "dead",
        timeout_s=60,
        what="the failing event to go dead",
    )
    assert http.get(f"/v1/users/{USER}").status_code == 401  # refused before routing: its path is logged too
    assert http.get(f"/v1/features/self-iteration/{USER}", headers=_bearer(token)).status_code in (
        200,
        404,
        405,
    )
    discarded = http.post(
        "/v1/dlq/discard",
        json={"eventIds": [dead_id], "reason": f"{MARK} was noise"},
        headers=_bearer(operate),
    )
    assert discarded.json()["discarded"] == [dead_id], discarded.text
    wait_for(
        lambda: not redis_client.scard(keys.scopes) and not redis_client.zcard(keys.outbox_due),
        timeout_s=60,
        what="the worker to go idle",
    )
    wait_for(
        lambda: http.delete(f"/v1/users/{USER}", headers=_bearer(operate)).json()["busyScopes"] == 0,
        what="an erasure with no busy scope",
    )
    return dead_id


def _failing_tasks(settings: Settings, redis_client: Redis, keys: BucketKeys) -> None:
    """The test plugin's task raising an error that quotes its payload: sent by the engine's publish_task,
    and by a plain ``send_task`` (arguments not hidden, as an older or outside publisher sends them)."""
    app = create_app(settings)
    publish_task(app, EXPLODE_TASK, {"text": f"{MARK} from the engine"}, queue=settings.queue_name)
    app.send_task(EXPLODE_TASK, args=[{"text": f"{MARK} from outside"}], queue=settings.queue_name)
    # each is tried max_attempts times, then its dead hook lists it (the retries' log lines are checked too)
    wait_for(
        lambda: redis_client.llen(f"{keys.home_prefix}test:task-dead") == 2, what="both failing tasks to die"
    )


def test_user_text_in_logs(
    stack: tuple[str, list[Proc]], settings: Settings, redis_client: Redis, keys: BucketKeys
) -> None:
    """Finding 9: no log line of the web or the worker process (DEBUG) holds the marker that was in the user
    id, the message texts, the payloads and the discard reason; the user's requests are logged under the
    user's pseudonym; the audit trail holds neither the marker nor the unsalted hash of the user id."""
    url, procs = stack
    _run_workload(url, redis_client, keys)
    _failing_tasks(settings, redis_client, keys)
    for proc in procs:
        proc.stop()
    lines = [line for proc in procs for line in proc.log().splitlines()]
    assert any('"level": "debug"' in line for line in lines), "the processes did not log at DEBUG"
    assert any("agent_run" in line for line in lines), "no memory run was logged"
    assert sum(f"Task {EXPLODE_TASK}[" in line and "raised" in line for line in lines) >= 2, "no task failed"
    leaks = [line for line in lines if MARK in line]
    assert leaks == [], f"{len(leaks)} log lines hold user content, e.g.:\n" + "\n".join(leaks[:8])
    from worker.telemetry.pseudonyms import load_pseudonyms  # here: the leak check above runs on any version

    pseudonym = load_pseudonyms(redis_client, settings).of(USER)
    assert any(pseudonym in line for line in lines), "the user's requests are not logged under a pseudonym"

    entries = cast(list[tuple[str, dict[str, str]]], redis_client.xrange(keys.audit))
    audit = [fields for _, fields in entries]
    erased = [a for a in audit if a.get("action") == "erase-user"]
    assert erased and {a["user"] for a in erased} == {pseudonym}, audit
    unsalted = hashlib.sha256(USER.encode()).hexdigest()[:16]
    assert not [a for a in audit if MARK in json.dumps(a) or unsalted in json.dumps(a)], audit
