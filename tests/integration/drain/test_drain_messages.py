"""drain_next messages pushed whole where the broker is the store's Redis (worker/runtime/drain_message.py): the
same message Celery's send_task would put on the broker's list, by ENQUEUE_PUSH inside the enqueue or by one
LPUSH, each with an id of its own. A real Redis and a real Celery app; the worker's side (a real worker takes
these messages and drains) is every pipeline test's, whose broker is the test's Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from celery.signals import before_task_publish
from redis import Redis
from redis.exceptions import ResponseError

from tests.conftest import SettingsFactory
from worker.core.tenancy import DEFAULT_TENANT
from worker.intake.emitter import Emitter
from worker.keys.layout import Keys
from worker.runtime.app import broker_is_store, create_app, fair_queue
from worker.runtime.drain_message import GRANT_HEADER, MARK, DrainMessages, drain_next_template
from worker.runtime.fair import DRAIN_NEXT_TASK, FairQueue
from worker.settings import Settings
from worker.store.events import EventStore
from worker.store.scripts import PUSH_CHUNK
from worker.telemetry.log_privacy import HIDDEN_TASK_ARGS

pytestmark = pytest.mark.integration


class NoSendTask:
    """A Celery app stand-in for the script's path: a send_task raises (the emitter logs a failed send and goes
    on, so the tests assert the messages' ids, which only the script writes in that shape)."""

    def send_task(self, name: str, *args: Any, **options: Any) -> None:
        raise AssertionError(f"send_task({name}) called: the messages should have been pushed whole")


def _queue_key(settings: Settings) -> str:
    return Keys(settings.key_prefix).broker_queue(settings.queue_name)


def _messages(redis_client: Redis, settings: Settings) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis_client.lrange(_queue_key(settings), 0, -1)]


SCRIPT_ID = re.compile(r"([0-9a-f]{32})-([0-9]+)")  # what the script writes: <its call's uuid4 hex>-<n>


def _script_ids(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """Each message's (call id, n), the script's id shape (a uuid4 of the door's own has dashes: no match)."""
    found = [SCRIPT_ID.fullmatch(m["headers"]["id"]) for m in messages]
    assert all(found), [m["headers"]["id"] for m in messages]
    return [(f.group(1), int(f.group(2))) for f in found if f]


def _enqueue_lone(emitter: Emitter, tag: str, count: int) -> list[str]:
    """Enqueue ``count`` events, each in a scope of its own (so each scope made ready); their statuses."""
    events = [
        {
            "sourceType": "bot.message.merged",
            "sourceId": f"{tag}{i}",
            "scopeKey": f"topic:{tag}{i}",
            "payload": {},
        }
        for i in range(count)
    ]
    return [r.status for r in emitter.enqueue([emitter.validate(e) for e in events])]


def _emitter(store: EventStore, fair: FairQueue) -> Emitter:
    return Emitter(
        store.settings,
        store,
        fair.publish,
        publish_many=fair.publish_many,
        ready=fair,
        source_types=["bot.message.merged"],
    )


def _pushing_fair(store: EventStore, template: str, *, messages_max: int = 5) -> FairQueue:
    settings = store.settings
    fair = FairQueue(
        store.client,
        store.keys,
        NoSendTask(),
        settings.queue_name,
        messages_max=messages_max,
        ticket_ttl_ms=60_000,
        drain_queue=_queue_key(settings),
    )
    fair._messages = DrainMessages(_queue_key(settings), template)  # the template made once, below
    return fair


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
def template(settings: Settings) -> str:
    return drain_next_template(create_app(settings), DRAIN_NEXT_TASK, settings.queue_name)


def test_the_template_is_what_send_task_puts_on_the_broker(redis_client: Redis, settings: Settings) -> None:
    """Rendered with an id, the template is field for field the message the same app's send_task LPUSHes on a
    real Redis broker for that task id, but for its delivery tag (kombu's own uuid there, the id here) and our
    ``grant`` header (null: the lease at enqueue's, which only the enqueue script fills in)."""
    app = create_app(settings)
    template = drain_next_template(app, DRAIN_NEXT_TASK, settings.queue_name)
    app.send_task(DRAIN_NEXT_TASK, args=[], queue=settings.queue_name, task_id="t-1", **HIDDEN_TASK_ARGS)
    [sent] = _messages(redis_client, settings)
    ours = json.loads(DrainMessages(_queue_key(settings), template).render("t-1"))
    assert ours["properties"].pop("delivery_tag") == "t-1"
    assert sent["properties"].pop("delivery_tag") not in ("", "t-1")
    assert ours["headers"].pop(GRANT_HEADER) is None and GRANT_HEADER not in sent["headers"]
    assert ours == sent
    assert (ours["headers"]["id"], ours["headers"]["root_id"], ours["properties"]["correlation_id"]) == (
        "t-1",
        "t-1",
        "t-1",
    )


def test_a_template_made_inside_a_task_names_no_parent(settings: Settings) -> None:
    """send_task inside a task makes that task the message's parent and root; the template (made lazily, so
    perhaps inside a drain) names neither: a drain_next is nobody's child."""
    app = create_app(settings)
    made: list[str] = []

    @app.task(name="test.make_template")
    def make_template() -> None:
        made.append(drain_next_template(app, DRAIN_NEXT_TASK, settings.queue_name))

    make_template.apply(task_id="the-parent")  # run here, in this process, with a task request on the stack
    headers = json.loads(made[0])["headers"]
    assert (headers["parent_id"], headers["root_id"], headers["id"]) == (None, MARK, MARK)


def test_the_enqueue_script_pushes_one_message_per_ticket_each_with_its_own_id(
    redis_client: Redis, settings: Settings, template: str
) -> None:
    """Twelve scopes, cap 5: five tickets taken, five messages on the broker's list (and no send_task), each
    with a distinct task id that is also its delivery tag; nothing left for the door to send."""
    store = EventStore(redis_client, settings)
    emitter = _emitter(store, _pushing_fair(store, template))
    statuses = _enqueue_lone(emitter, "m", 12)
    assert statuses == ["accepted"] * 12
    messages = _messages(redis_client, settings)
    ids = _script_ids(messages)
    assert len({call for call, _ in ids}) == 1 and sorted(n for _, n in ids) == [1, 2, 3, 4, 5]
    assert all(m["properties"]["delivery_tag"] == m["headers"]["id"] for m in messages)
    assert all(m["headers"]["task"] == DRAIN_NEXT_TASK and MARK not in json.dumps(m) for m in messages)
    assert redis_client.get(store.keys.drain_tickets) == "5"
    assert redis_client.llen(store.keys.ready(DEFAULT_TENANT)) == 12
    again = {"sourceType": "bot.message.merged", "sourceId": "m12", "scopeKey": "topic:m12", "payload": {}}
    emitter.enqueue([emitter.validate(again)])  # the cap is reached: a ready scope, no message
    assert len(_messages(redis_client, settings)) == 5


def test_two_enqueues_never_share_a_message_id(
    redis_client: Redis, settings: Settings, template: str
) -> None:
    """Each script call has an id of its own (the n-th message of a call is ``<id>-<n>``)."""
    store = EventStore(redis_client, settings)
    emitter = _emitter(store, _pushing_fair(store, template))
    for i in range(3):
        _enqueue_lone(emitter, f"u{i}-", 1)  # three calls, one event each
    ids = _script_ids(_messages(redis_client, settings))
    assert len(ids) == 3 and len({call for call, _ in ids}) == 3 and {n for _, n in ids} == {1}


def test_scope_buckets_push_with_an_id_per_bucket_script(
    redis_client: Redis, make_settings: SettingsFactory, template: str
) -> None:
    """With four scope buckets one enqueue runs a script per bucket: every ticket still has its one message,
    and no two messages share an id."""
    settings = make_settings(scope_buckets=4)
    store = EventStore(redis_client, settings)
    emitter = _emitter(store, _pushing_fair(store, template, messages_max=100))
    _enqueue_lone(emitter, "b", 12)
    ids = _script_ids(_messages(redis_client, settings))
    assert len(ids) == 12 and len(set(ids)) == 12 and len({call for call, _ in ids}) > 1
    assert redis_client.get(store.keys.drain_tickets) == "12"


def test_more_messages_than_one_lpush_carries_are_pushed_a_chunk_at_a_time(
    redis_client: Redis, make_settings: SettingsFactory, template: str
) -> None:
    """2,500 new scopes under a cap of 3,000: 2,500 messages in three LPUSHes of at most PUSH_CHUNK (Lua's unpack
    stops near 8,000 values), every ticket with its message."""
    settings = make_settings()
    store = EventStore(redis_client, settings)
    emitter = _emitter(store, _pushing_fair(store, template, messages_max=3000))
    _enqueue_lone(emitter, "c", 2500)
    ids = _script_ids(_messages(redis_client, settings))
    assert PUSH_CHUNK < 2500 and sorted(n for _, n in ids) == list(range(1, 2501))
    assert redis_client.get(store.keys.drain_tickets) == "2500"


def test_a_wrong_typed_broker_queue_refuses_the_batch_before_any_write(
    redis_client: Redis, settings: Settings, template: str
) -> None:
    store = EventStore(redis_client, settings)
    redis_client.set(_queue_key(settings), "not a list")
    emitter = _emitter(store, _pushing_fair(store, template))
    event = {"sourceType": "bot.message.merged", "sourceId": "w1", "scopeKey": "topic:w", "payload": {}}
    with pytest.raises(Exception, match="broker queue"):
        emitter.enqueue([emitter.validate(event)])
    home = store.keys.for_tenant(DEFAULT_TENANT)
    assert not redis_client.exists(
        store.keys.ready(DEFAULT_TENANT), store.keys.drain_tickets, home.inbox("topic:w")
    )


def test_a_worker_side_send_is_one_lpush_and_a_failed_one_gives_its_tickets_back(
    redis_client: Redis, settings: Settings, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish_many (a commit's follow-ups, the sweep) pushes its messages in one LPUSH; when that fails, the
    tickets it took are given back and the error raised."""
    store = EventStore(redis_client, settings)
    fair = _pushing_fair(store, template)
    pushes: list[int] = []
    lpush = redis_client.lpush
    monkeypatch.setattr(
        redis_client, "lpush", lambda key, *values: pushes.append(len(values)) or lpush(key, *values)
    )
    fair.publish_many(["default/topic:a", "default/topic:b"])
    assert pushes == [2] and redis_client.get(store.keys.drain_tickets) == "2"
    assert len({m["headers"]["id"] for m in _messages(redis_client, settings)}) == 2
    redis_client.delete(_queue_key(settings))
    redis_client.set(_queue_key(settings), "not a list")
    with pytest.raises(ResponseError):
        fair.publish_many(["default/topic:c"])
    assert redis_client.get(store.keys.drain_tickets) == "2"


def test_trace_context_from_a_publish_hook_stays_out_of_the_template(settings: Settings) -> None:
    """OpenTelemetry's Celery instrumentation writes the capture's span into the headers before publishing
    (a before_task_publish receiver, as here): the template drops every field the propagator writes."""
    app = create_app(settings)

    def inject(headers: dict[str, Any], **_: Any) -> None:
        headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        headers["tracestate"] = "vendor=1"

    before_task_publish.connect(inject, weak=False)
    try:
        headers = json.loads(drain_next_template(app, DRAIN_NEXT_TASK, settings.queue_name))["headers"]
    finally:
        before_task_publish.disconnect(inject)
    assert "traceparent" not in headers and "tracestate" not in headers and headers["id"] == MARK


def test_a_template_that_cannot_be_made_falls_back_to_send_task(
    redis_client: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """An app Celery cannot publish with (no ``amqp``) gives no template: said once, and its messages go
    through send_task with their tickets counted, as before the change."""
    sent: list[str] = []

    class Recorder:
        def send_task(self, name: str, *args: Any, **options: Any) -> None:
            sent.append(name)

    store = EventStore(redis_client, settings)
    fair = FairQueue(
        store.client, store.keys, Recorder(), settings.queue_name, drain_queue=_queue_key(settings)
    )
    fair.publish_many(["default/topic:a", "default/topic:b"])
    fair.publish_many(["default/topic:c"])
    assert sent == [DRAIN_NEXT_TASK] * 3 and fair.drain_queue is None
    assert redis_client.get(store.keys.drain_tickets) == "3" and not _messages(redis_client, settings)
    assert caplog.text.count("no template") == 1


def test_a_capture_keeps_the_queue_it_started_with(
    redis_client: Redis, settings: Settings, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread's failed capture clears ``drain_queue`` while this one runs: this one's messages still go
    on the queue it read when it started (not on a key of None, which would refuse every enqueue)."""
    store = EventStore(redis_client, settings)
    fair = FairQueue(
        store.client, store.keys, NoSendTask(), settings.queue_name, drain_queue=_queue_key(settings)
    )

    def capture_while_another_fails(app: Any, task: str, queue: str) -> str:
        fair.drain_queue = None  # what a failed capture in another thread does meanwhile
        return template

    monkeypatch.setattr("worker.runtime.fair.drain_next_template", capture_while_another_fails)
    messages = fair.messages()
    assert messages is not None and messages.queue_key == _queue_key(settings)
    fair.publish_many(["default/topic:r"])
    assert len(_messages(redis_client, settings)) == 1


def test_only_a_broker_on_the_stores_redis_is_written_by_us(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test's settings (broker unset: the store's Redis) push whole, unless turned off; another database,
    another server, RabbitMQ, Celery's own CELERY_BROKER_URL or a Redis Cluster store send through Celery."""
    for name in ("BROKER_URL", "CELERY_BROKER_URL", "CELERY_BROKER_WRITE_URL", "CELERY_BROKER_READ_URL"):
        monkeypatch.delenv(name, raising=False)  # Celery would prefer them to the app's broker
    same = make_settings()
    client = Redis.from_url(same.require_redis_url())
    assert fair_queue(same, EventStore(client, same), create_app(same)).drain_queue == _queue_key(same)
    off = make_settings(push_drain_messages=False)  # AGENT_SIGNAL_PUSH_DRAIN_MESSAGES=false: send_task
    assert fair_queue(off, EventStore(client, off), create_app(off)).drain_queue is None
    assert fair_queue(same, EventStore(client, same), None).drain_queue is None  # not a Celery app
    client.close()

    def pushes(**values: Any) -> bool:
        settings = Settings(**values)
        return broker_is_store(settings, create_app(settings))

    assert pushes(redis_url="redis://h:1/2")
    assert pushes(redis_url="redis://h:1/2", broker_url="redis://h:1/2")
    assert pushes(redis_url="unix:///tmp/r.sock")  # kombu spells it redis+socket://
    assert not pushes(redis_url="redis://h:1/2", broker_url="redis://h:1/3")
    assert not pushes(redis_url="redis://h:1/2", broker_url="amqp://g:g@h//")
    assert not pushes(redis_cluster_url="redis://h:7000", broker_url="amqp://g:g@h//")
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://g:g@rabbit//")  # Celery prefers it to the app's broker
    assert not pushes(redis_url="redis://h:1/2")
