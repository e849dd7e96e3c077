"""A Redis URL with redis-py's options in its query (``?socket_timeout=5``), as the store and, with no BROKER_URL,
the broker: a real worker drains an event enqueued through it. kombu's Connection refused those options in its URL
(a TypeError at the first connection), so every publish failed and the producer said, once per process, that its
drain messages went through send_task; the options now reach kombu as transport options (worker/settings.py
``kombu_options_for``)."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys
from worker.runtime.app import create_app

pytestmark = pytest.mark.integration


def test_a_store_url_with_options_is_also_a_working_broker(
    redis_url: str, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    url = redis_url + ("&" if "?" in redis_url else "?") + "socket_timeout=30&health_check_interval=10"
    settings = make_settings(redis_url=url)
    app = create_app(settings)
    assert app.conf.broker_transport_options["socket_timeout"] == 30.0
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
    app.close()
    worker = start_worker(settings)
    producer = Producer(settings)
    counter = f"{keys.bucket_prefix}test:opts"
    try:
        event = {
            "sourceType": "test.counter",
            "sourceId": "opts",
            "scopeKey": "topic:opts",
            "payload": {"counterKey": counter},
        }
        event_id = producer.enqueue(event).event_id
        wait_for(
            lambda: (producer.status(event_id) or {}).get("status") == "done",
            what="the event to be done",
            explain=worker.log,
        )
    finally:
        producer.close()
    assert redis_client.get(counter) == "1"
