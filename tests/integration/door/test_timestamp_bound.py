"""A producer's ``timestamp`` is bounded at the door (9999-12-31T23:59:59.999Z, below 2**53 for JS clients); a
time stored past it before the bound existed neither breaks the chain read nor the drain with telemetry on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis import Redis

from producers import Producer
from producers.http.app import create_web_app
from tests.conftest import SettingsFactory
from worker.documents.projection import MAX_ISO_MS
from worker.intake.source_event import SourceEvent, prepare
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.settings import Settings
from worker.telemetry.recorder import DISABLED, configure_telemetry

pytestmark = pytest.mark.integration

LAST_INSTANT = "9999-12-31T23:59:59.999Z"


def _event(keys: BucketKeys, source_id: str, timestamp: int) -> dict[str, Any]:
    return {
        "sourceType": "test.counter",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "timestamp": timestamp,
        "payload": {"counterKey": f"{keys.bucket_prefix}test:c"},
    }


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_web_app(settings)) as c:
        yield c


@pytest.mark.parametrize("timestamp", [MAX_ISO_MS + 1, 2**53 + 1, 10**20, 10**30])
def test_a_timestamp_past_year_9999_is_refused_by_name(
    client: TestClient, redis_client: Redis, keys: BucketKeys, timestamp: int
) -> None:
    """POST /v1/events with a timestamp past 253402300799999 answers 422 naming ``timestamp``; nothing is stored."""
    response = client.post("/v1/events", json=_event(keys, "late", timestamp))
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "timestamp")
    assert str(MAX_ISO_MS) in error["message"]
    stored = [k for k in redis_client.scan_iter(match=f"{keys.prefix}*") if ":broker:" not in k]
    assert [k for k in stored if not k.endswith(("-secret", "stats"))] == []


def test_the_last_instant_is_accepted_and_its_chain_reads(
    client: TestClient, settings: Settings, keys: BucketKeys
) -> None:
    """The bound itself is accepted, drained, and the chain's createdAt is 9999-12-31T23:59:59.999Z."""
    response = client.post("/v1/events", json=_event(keys, "last", MAX_ISO_MS))
    assert response.status_code == 202
    build_pipeline(settings, telemetry=DISABLED).drain_scope("topic:last")
    chain = client.get("/v1/chains/chain:last")
    assert chain.status_code == 200
    assert chain.json()["record"]["createdAt"] == LAST_INSTANT


def test_a_stored_time_past_the_bound_neither_breaks_the_drain_nor_the_read(
    settings: Settings, client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """An event stored with a timestamp of 1e20 (past the door, as before the bound) drains with telemetry on
    without raising, releases its lease, and its chain reads with the last ISO instant as createdAt."""
    telemetry = configure_telemetry(
        settings,
        service_name="test",
        span_processors=[SimpleSpanProcessor(InMemorySpanExporter())],
        metric_readers=[InMemoryMetricReader()],
    )
    producer = Producer(settings, telemetry=telemetry)
    try:
        fields = _event(keys, "old", 10**20)
        stored = SourceEvent.model_construct(  # past validation: what an older door let through
            source_type=fields["sourceType"],
            source_id=fields["sourceId"],
            scope_key=fields["scopeKey"],
            timestamp=fields["timestamp"],
            payload=fields["payload"],
        )
        (result,) = producer.enqueue_prepared([prepare(stored)])
        build_pipeline(settings, telemetry=telemetry, app=producer.app).drain_scope("topic:old")
        assert producer.status(result.event_id)["status"] == "done"  # type: ignore[index]
        assert redis_client.exists(producer.keys.lease("topic:old")) == 0
    finally:
        producer.close()
        telemetry.shutdown()
    chain = client.get("/v1/chains/chain:old")
    assert chain.status_code == 200
    assert chain.json()["record"]["createdAt"] == LAST_INSTANT
