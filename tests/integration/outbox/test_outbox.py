"""External effects leave through the outbox: exactly one effect per idempotency key at a receiver that
dedupes, even when the lease holder is paused past its TTL or partitioned from Redis mid-action; a delivery
that keeps failing is retried with backoff and ends ``dead``, visible in the event's run detail."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from producers import Producer
from tests.chaos.processes import TcpProxy
from tests.conftest import wait_for
from tests.support.private_redis import private_redis
from worker.keys.layout import BucketKeys
from worker.ops.state_metrics import state_exposition
from worker.outbox.relay import records_of_event

pytestmark = pytest.mark.integration

PLUGINS = ["tests.support.policies:bundle", "tests.plugins.notify:plugin"]
SCOPE = "topic:notify"


class Receiver:
    """A webhook receiver that dedupes on Idempotency-Key: counts deliveries and effects per key."""

    def __init__(self, *, fail: bool = False, hang: bool = False) -> None:
        self.deliveries: Counter[str] = Counter()
        self.effects: Counter[str] = Counter()
        self.fail = fail
        self.released = threading.Event()  # with ``hang``: no answer until it is set
        if not hang:
            self.released.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                key = self.headers.get("Idempotency-Key", "")
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.deliveries[key] += 1
                receiver.released.wait()
                if not receiver.fail and receiver.effects[key] == 0:
                    receiver.effects[key] += 1
                self.send_response(500 if receiver.fail else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def _settings(make_settings: Any, **overrides: Any) -> Any:
    return make_settings(plugins=PLUGINS, extra_source_types=["notify.send", "notify.ping"], **overrides)


def _send(producer: Producer, url: str, source_id: str, scope: str = SCOPE, **payload: Any) -> str:
    event = {
        "sourceType": "notify.send",
        "sourceId": source_id,
        "scopeKey": scope,
        "payload": {"url": url, **payload},
    }
    return producer.enqueue(event).event_id


def _settled(producer: Producer, event_id: str) -> list[dict[str, Any]]:
    """The event's outbox records once none is pending and nothing is due (the relay can deliver nothing else)."""
    records = records_of_event(producer.keys, producer.store, SCOPE, event_id)
    if not records or producer.store.client.zcard(producer.keys.for_bucket(0).outbox_due):
        return []
    return [] if any(r["state"] == "pending" for r in records) else records


def _final(producer: Producer, event_id: str, scope: str = SCOPE) -> list[dict[str, Any]]:
    """The event's outbox records once none of them is pending (others may be)."""
    records = records_of_event(producer.keys, producer.store, scope, event_id)
    return records if records and all(r["state"] != "pending" for r in records) else []


def test_a_paused_lease_holder_causes_no_second_effect(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys, receiver: Receiver
) -> None:
    """SIGSTOP the holder mid-action past its TTL; another worker takes over; on SIGCONT its late action
    stages nothing that commits: one outbox record, one delivery, one effect."""
    settings = _settings(make_settings)
    producer = Producer(settings)
    start_worker(settings)
    event_id = _send(producer, receiver.url, "n-pause", sleepMs=3000)
    paused = int(wait_for(lambda: redis_client.get(keys.plugin(SCOPE, "probe")), what="the action"))
    os.kill(paused, signal.SIGSTOP)
    try:
        start_worker(settings)
        wait_for(lambda: producer.status(event_id)["status"] == "done", timeout_s=60, what="the takeover")
    finally:
        os.kill(paused, signal.SIGCONT)
    wait_for(
        lambda: producer.store.stats(producer.keys).get("fenceRejected", 0) >= 1,
        timeout_s=30,
        what="the late commit",
    )
    records = wait_for(lambda: _settled(producer, event_id), timeout_s=30, what="the delivery")
    assert [r["state"] for r in records] == ["delivered"]
    assert dict(receiver.effects) == {records[0]["key"]: 1}
    assert dict(receiver.deliveries) == {records[0]["key"]: 1}
    producer.close()


def test_a_partitioned_worker_causes_no_second_effect(
    make_settings: Any, start_worker: Any, tmp_path: Path, receiver: Receiver
) -> None:
    """A worker cut off from Redis mid-action loses the scope to another; when the partition heals, its
    action commits nothing: one outbox record, one effect per key."""
    with private_redis(tmp_path) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        proxy = TcpProxy(port)
        direct = _settings(make_settings, redis_url=url)
        keys, admin = BucketKeys(direct.key_prefix), Redis.from_url(url, decode_responses=True)
        producer = Producer(direct)
        try:
            start_worker(direct.model_copy(update={"redis_url": proxy.url}), wait=False)
            wait_for(lambda: admin.hlen(keys.workers) >= 1, timeout_s=60, what="the proxied worker")
            event_id = _send(producer, receiver.url, "n-split", sleepMs=4000)
            wait_for(lambda: admin.get(keys.plugin(SCOPE, "probe")), what="the action")
            proxy.cut(hard=False)
            start_worker(direct, wait=False)
            wait_for(lambda: producer.status(event_id)["status"] == "done", timeout_s=60, what="the takeover")
            proxy.restore()
            records = wait_for(lambda: _settled(producer, event_id), timeout_s=60, what="the delivery")
            assert len(records) == 1 and records[0]["state"] == "delivered"
            assert dict(receiver.effects) == {records[0]["key"]: 1}
            assert dict(receiver.deliveries) == {records[0]["key"]: records[0]["attempts"]}
        finally:
            proxy.close()
            producer.close()
            admin.close()


def test_a_failing_delivery_is_retried_then_dead_listed_and_redriven(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys, start_web: Any
) -> None:
    """A receiver that always fails: the relay retries with backoff, the record ends dead after
    outbox_max_attempts, and GET /v1/events/{id} shows it with its attempts and last error. It is listed by
    GET /v1/outbox/dead and counted by agent_signal_outbox_dead (before, only the run detail said so, and its
    event read done); once the receiver is back, POST /v1/outbox/redrive delivers it, under the same key."""
    failing = Receiver(fail=True)
    try:
        settings = _settings(
            make_settings, outbox_max_attempts=3, outbox_retry_base_ms=10, outbox_retry_cap_ms=50
        )
        start_worker(settings)
        _, base = start_web(settings)
        producer = Producer(settings)
        # a key in the URL's query and user info: shown to any reader of the outbox, it must not be (an audit)
        secret_url = failing.url.replace("://", "://hook:PASSWORD1@") + "?api_key=SUPERSECRET1"
        event_id = _send(producer, secret_url, "n-fail")
        records = wait_for(lambda: _settled(producer, event_id), timeout_s=60, what="the record to die")
        assert [(r["state"], r["attempts"]) for r in records] == [("dead", 3)]
        assert sum(failing.deliveries.values()) == 3 and not failing.effects
        detail = httpx.get(f"{base}/v1/events/{event_id}").json()
        (shown,) = detail["outbox"]
        assert shown["state"] == "dead" and shown["attempts"] == 3 and "500" in shown["lastError"]
        assert "SUPERSECRET1" not in shown["lastError"] and "PASSWORD1" not in shown["lastError"]
        assert "/hook?…" in shown["lastError"]  # the host and path stay: what an operator needs
        listed = httpx.get(f"{base}/v1/outbox/dead").json()["records"]
        assert "SUPERSECRET1" not in str([r.get("lastError") for r in listed])
        dead = httpx.get(f"{base}/v1/outbox/dead").json()
        assert dead["total"] == 1 and [(r["scopeKey"], r["recordId"]) for r in dead["records"]] == [
            (SCOPE, shown["id"])
        ]
        assert (
            'agent_signal_outbox_dead{tenant="default"} 1.0'
            in state_exposition(producer.store, settings.queue_name).decode()
        )
        failing.fail = False
        refused = httpx.post(f"{base}/v1/outbox/redrive", json={"records": [{"scopeKey": SCOPE}]})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "records[0].recordId"
        answer = httpx.post(f"{base}/v1/outbox/redrive", json={"all": True}).json()
        assert answer == {"redriven": [{"scopeKey": SCOPE, "recordId": shown["id"]}], "notDead": []}
        again = wait_for(
            lambda: [r for r in _settled(producer, event_id) if r["state"] == "delivered"], timeout_s=60
        )
        assert again[0]["key"] == shown["key"] and dict(failing.effects) == {shown["key"]: 1}
        assert httpx.get(f"{base}/v1/outbox/dead").json() == {"records": [], "total": 0}
        repeat = httpx.post(
            f"{base}/v1/outbox/redrive", json={"records": [{"scopeKey": SCOPE, "recordId": shown["id"]}]}
        )
        assert repeat.json()["notDead"] == [{"scopeKey": SCOPE, "recordId": shown["id"]}]
        producer.close()
    finally:
        failing.server.shutdown()


def test_one_source_id_in_two_tenants_and_for_two_users_makes_three_effects(
    make_settings: Any, start_worker: Any, receiver: Receiver
) -> None:
    """The default outbox key (no ``key=``) was the action's idempotency key, ``<sourceId>:signal:…``, the same in
    every tenant and for every user: a receiver that dedupes took the second tenant's webhook as a repeat of the
    first's and dropped it. It is now hashed with the tenant and the source's user (CONTRACT §Trust)."""
    settings = _settings(make_settings)
    start_worker(settings)
    acme, globex = Producer(settings, tenant="acme"), Producer(settings, tenant="globex")
    sent = []
    for producer, user in ((acme, "alice"), (acme, "bob"), (globex, "alice")):
        scope = f"topic:notify-{user}"  # one scope would dedupe the two users' events at the door
        event = {"sourceType": "notify.send", "sourceId": "msg_1", "scopeKey": scope, "userId": user}
        sent.append((producer, scope, producer.enqueue({**event, "payload": {"url": receiver.url}}).event_id))

    def delivered(producer: Producer, scope: str, event_id: str) -> list[dict[str, Any]]:
        found = records_of_event(producer.keys, producer.store, scope, event_id)
        return found if found and found[0]["state"] == "delivered" else []

    records = [wait_for(partial(delivered, *one), timeout_s=60, what="a delivery") for one in sent]
    assert [r[0]["state"] for r in records] == ["delivered"] * 3
    keys = {r[0]["key"] for r in records}
    assert len(keys) == 3 and all(k.startswith("as-effect-") for k in keys)
    assert dict(receiver.effects) == dict.fromkeys(keys, 1)
    for producer in (acme, globex):
        producer.close()


def _delivered_keys(producer: Producer, sent: list[tuple[str, str]]) -> set[str]:
    records = [
        wait_for(partial(_final, producer, event_id, scope), timeout_s=60, what="a delivery")
        for scope, event_id in sent
    ]
    assert [[r["state"] for r in found] for found in records] == [["delivered"]] * len(sent)
    return {found[0]["key"] for found in records}


def test_one_source_id_in_two_scopes_makes_two_effects(
    make_settings: Any, start_worker: Any, receiver: Receiver
) -> None:
    """Two events the door tells apart by their ``scopeKey``, with one ``sourceId``: the default outbox key left
    out the scope, so they posted two bodies under one ``Idempotency-Key`` (a receiver that dedupes drops one).
    It hashes the scope now."""
    settings = _settings(make_settings)
    start_worker(settings)
    producer = Producer(settings)
    sent = [
        (scope, producer.enqueue({**_event("notify.send", scope), "payload": {"url": receiver.url}}).event_id)
        for scope in ("topic:n-a", "topic:n-b")
    ]
    keys = _delivered_keys(producer, sent)
    assert len(keys) == 2 and dict(receiver.effects) == dict.fromkeys(keys, 1)
    producer.close()


def test_one_source_id_under_two_source_types_in_one_scope_makes_two_effects(
    make_settings: Any, start_worker: Any, receiver: Receiver
) -> None:
    """Two events of one scope the door tells apart by their ``sourceType``, with one ``sourceId``: their actions
    have one id, and an action's lane was keyed by its id alone, so the second one replayed the first one's lane
    and its action never ran (no record, no delivery). Their lanes are typed now: two effects, two keys."""
    settings = _settings(make_settings)
    start_worker(settings)
    producer = Producer(settings)
    sent = [
        (
            "topic:n-a",
            producer.enqueue({**_event(kind, "topic:n-a"), "payload": {"url": receiver.url}}).event_id,
        )
        for kind in ("notify.send", "notify.ping")
    ]
    try:
        keys = _delivered_keys(producer, sent)
        assert len(keys) == 2 and dict(receiver.effects) == dict.fromkeys(keys, 1)
    finally:
        producer.close()


def _event(source_type: str, scope: str) -> dict[str, Any]:
    return {"sourceType": source_type, "sourceId": "msg_same", "scopeKey": scope}


def test_a_deliverer_that_never_returns_fails_its_attempt_and_the_relay_goes_on(
    make_settings: Any, start_worker: Any, receiver: Receiver
) -> None:
    """A plugin's deliverer with no timeout, at a receiver that never answers, held its relay thread for good:
    with one delivery at a time, no other record of any tenant was delivered by that worker again, and the
    record read ``pending`` with nothing listed. The relay now waits on a call at most
    ``outbox_delivery_timeout_s``: the attempt fails (here the last: dead, naming the timeout) and the next
    record is delivered."""
    hanging = Receiver(hang=True)
    try:
        settings = _settings(
            make_settings, outbox_concurrency=1, outbox_max_attempts=1, outbox_delivery_timeout_s=1.0
        )
        start_worker(settings)
        producer = Producer(settings)
        stuck = _send(producer, hanging.url, "n-hang", unbounded=True)
        wait_for(lambda: sum(hanging.deliveries.values()) == 1, timeout_s=60, what="the call that hangs")
        after = _send(producer, receiver.url, "n-after", scope="topic:notify-after")
        delivered = wait_for(
            lambda: _final(producer, after, "topic:notify-after"), timeout_s=60, what="the next delivery"
        )
        assert [r["state"] for r in delivered] == ["delivered"] and sum(receiver.effects.values()) == 1
        (dead,) = wait_for(lambda: _final(producer, stuck), timeout_s=60, what="the hung record to die")
        assert dead["state"] == "dead" and dead["attempts"] == 1
        assert "DeliveryTimedOut" in dead["lastError"] and "test-webhook" in dead["lastError"]
        producer.close()
    finally:
        hanging.released.set()
        hanging.server.shutdown()
