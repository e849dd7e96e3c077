"""The Redis ACL user of deploy/k8s (finding 10 of issue 26: the app used Redis's superuser): a private Redis
with ``default`` off and the manifests' own rules for the app's user (``app.acl`` of the ConfigMap
agent-signal-redis, the key prefix swapped for this test's), a real worker and a real web process connecting
as that user, and a workload that touches every kind of command the app sends: admission and drains (scripts,
the broker's lists), a memory run with its receipt announced on a stream (pub/sub), a dead event discarded, the
readiness check (INFO, CONFIG GET), Celery's remote control (its pidbox channels), an erasure (SCAN). Redis
refuses nothing: its ACL LOG stays empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis import Redis

from tests.conftest import ROOT, wait_for
from tests.support.private_redis import private_redis
from worker.keys.layout import BucketKeys
from worker.runtime.app import create_app

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-acl-test-0123456789"
MANIFEST_PREFIX = (
    "agent-signal:"  # the prefix the manifests' rules name (the default AGENT_SIGNAL_KEY_PREFIX)
)
ADMIN_PASSWORD, APP_PASSWORD = "admin-0123456789abcdef", "app-0123456789abcdef"


def manifest_rules() -> str:
    """The app user's rules as deploy/k8s ships them."""
    for doc in yaml.safe_load_all((ROOT / "deploy/k8s/base/redis.yaml").read_text()):
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "agent-signal-redis":
            return str(doc["data"]["app.acl"]).strip()
    raise AssertionError("no ConfigMap agent-signal-redis in deploy/k8s/base/redis.yaml")


@pytest.fixture
def acl_redis(tmp_path: Path, prefix: str) -> Iterator[tuple[str, Redis]]:
    """(the app user's URL, an admin client) of a private Redis whose ``default`` user is off."""
    rules = manifest_rules()
    assert f"~{MANIFEST_PREFIX}*" in rules and f"&{MANIFEST_PREFIX}*" in rules
    acl = tmp_path / "users.acl"
    acl.write_text(
        "user default on nopass ~* &* +@all\n"  # until private_redis has seen it answer; turned off below
        f"user admin on >{ADMIN_PASSWORD} ~* &* +@all\n"
        f"user agent-signal on >{APP_PASSWORD} {rules.replace(MANIFEST_PREFIX, prefix)}\n"
    )
    with private_redis(tmp_path, "--aclfile", str(acl)) as url:
        host_port = url.removeprefix("redis://")
        admin = Redis.from_url(f"redis://admin:{ADMIN_PASSWORD}@{host_port}", decode_responses=True)
        admin.acl_setuser("default", enabled=False)
        admin.acl_log_reset()
        yield f"redis://agent-signal:{APP_PASSWORD}@{host_port}", admin
        admin.close()


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _feedback(source_id: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_1",
            "messageId": source_id,
            "message": "Going forward, I prefer short answers.",
        },
    }


def test_the_app_runs_as_the_redis_acl_user_of_the_manifests(
    acl_redis: tuple[str, Redis], make_settings: Any, start_worker: Any, start_web: Any, prefix: str
) -> None:
    """A worker and a web process on the manifests' ACL user do the whole workload; Redis logs no refusal."""
    url, admin = acl_redis
    keys = BucketKeys(prefix)
    settings = make_settings(redis_url=url, bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0)
    start_worker(settings, wait=False)
    wait_for(lambda: admin.hlen(keys.workers) > 0, timeout_s=60, what="the worker to register")
    _, base = start_web(settings)
    with httpx.Client(base_url=base, timeout=30) as http:
        operate = _bearer(
            http.post("/v1/keys", json={"role": "operate"}, headers=_bearer(BOOT)).json()["key"]
        )
        stream = {"userId": "u1", "agentId": "agt_1", "topicId": "tpc_1"}
        with http.stream("GET", "/v1/receipts/stream", params=stream, headers=operate) as live:
            lines = live.iter_lines()
            assert next(lines) == ": connected"  # subscribed (pub/sub on the receipts channel)
            assert http.post("/v1/events", json=_feedback("m1"), headers=operate).status_code == 202
            assert next(line for line in lines if line.startswith("event: ")) == "event: receipt"
        doomed = {"sourceType": "test.flaky", "sourceId": "doomed", "userId": "u1", "payload": {}}
        dead_id = http.post("/v1/events", json=doomed, headers=operate).json()["results"][0]["eventId"]
        wait_for(
            lambda: http.get(f"/v1/events/{dead_id}", headers=operate).json()["status"] == "dead",
            timeout_s=60,
            what="the failing event to go dead",
        )
        assert http.post("/v1/dlq/discard", json={"eventIds": [dead_id]}, headers=operate).status_code == 200
        ready = http.get("/readyz", headers=_bearer(BOOT))
        assert ready.status_code == 200 and ready.json()["checks"]["redis"] == "ok", ready.text
        # limit=1: back at the one worker's answer, not after collecting answers for the whole timeout
        pong = create_app(settings).control.ping(timeout=10.0, limit=1)
        assert pong, "no worker answered Celery's remote control"
        wait_for(
            lambda: http.delete("/v1/users/u1", headers=operate).json()["busyScopes"] == 0,
            what="an erasure with no busy scope",
        )
        assert http.get("/v1/memories", params={"userId": "u1"}, headers=operate).json()["memories"] == []
    assert admin.acl_log() == []
