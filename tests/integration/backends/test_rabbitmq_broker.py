"""The pipeline with RabbitMQ as broker and Redis as store (BROKER_URL)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


def _rabbit_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.skipif(
    not _rabbit_up(), reason="no RabbitMQ on 127.0.0.1:5672 (the python-svc machines and CI run one)"
)
def test_pipeline_over_rabbitmq(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Events enqueued with BROKER_URL=amqp://… are drained in order, once, by a worker on that broker."""
    settings = make_settings(broker_url=AMQP_URL)
    start_worker(settings)
    producer = Producer(settings)
    counter = f"{keys.bucket_prefix}test:amqp"
    results = producer.enqueue_many(
        [
            {
                "sourceType": "test.counter",
                "sourceId": f"amqp-{i}",
                "scopeKey": f"topic:{i % 2}",
                "payload": {"counterKey": counter},
            }
            for i in range(10)
        ]
    )
    wait_for(
        lambda: all((producer.status(r.event_id) or {}).get("status") == "done" for r in results),
        what="10 events",
    )
    assert redis_client.get(counter) == "10"
    assert not [k for k in redis_client.scan_iter(match=f"{keys.prefix}broker:*")], (
        "nothing went through Redis as broker"
    )
    with producer.app.connection_for_write() as conn:
        conn.default_channel.queue_delete(settings.queue_name)
    producer.close()
