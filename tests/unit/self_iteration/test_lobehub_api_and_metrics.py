"""``GET /v1/receipts`` limits and the instruments' descriptions exactly as LobeHub has them (lobehub/lobehub
v2.2.13, read from the public mirror find-xposed-magisk/lobe-chat): the ``listReceipts`` input of
apps/server/src/routers/lambda/agentSignal.ts and the agent-signal OTel module
packages/observability-otel/src/modules/agent-signal/index.ts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from redis import Redis

from producers.http.access.principal import LOCAL_PRINCIPAL
from producers.http.routes.receipts import router
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore
from worker.telemetry.instruments import INSTRUMENT_ATTRS, INSTRUMENT_DESCRIPTIONS
from worker.telemetry.process_metrics import ProcessMetrics
from worker.telemetry.recorder import Telemetry

OWNER = {"userId": "u1", "agentId": "agt_1", "topicId": "tpc_1"}


@pytest.fixture
def client(redis_client: Redis, keys: BucketKeys) -> TestClient:
    app = FastAPI()
    app.include_router(router)

    @app.middleware("http")
    async def local(request: Any, call_next: Any) -> Any:  # the caller auth resolves with no credential set
        request.state.principal = LOCAL_PRINCIPAL
        return await call_next(request)

    producer = SimpleNamespace(store=SimpleNamespace(client=redis_client, keys=keys))
    app.state.producer = producer
    app.state.settings = SimpleNamespace(receipt_retention_s=60)
    store = ReceiptStore(redis_client, keys, ttl_s=60)
    for i in range(60):
        store.append({"id": f"r{i}", "kind": "review", "status": "completed", "createdAt": 1000 + i, **OWNER})
    return TestClient(app)


@pytest.mark.parametrize("limit", [0, 51, 200])
def test_limit_outside_1_to_50_is_refused(client: TestClient, limit: int) -> None:
    """agentSignal.ts listReceipts (``limit: z.number().int().min(1).max(50)``): 422 naming ``limit``."""
    response = client.get("/v1/receipts", params={**OWNER, "limit": limit})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "limit"


@pytest.mark.parametrize(("limit", "count"), [(1, 1), (50, 50), (None, 20)])
def test_limit_within_1_to_50_and_default_20(client: TestClient, limit: int | None, count: int) -> None:
    """agentSignal.ts listReceipts: limits 1..50 are served and the default is 20."""
    params = {**OWNER, **({} if limit is None else {"limit": str(limit)})}
    response = client.get("/v1/receipts", params=params)
    assert response.status_code == 200
    assert len(response.json()["receipts"]) == count


def test_every_instrument_has_lobehub_description() -> None:
    """observability-otel/src/modules/agent-signal/index.ts: each of the 15 instruments carries LobeHub's description."""
    reader = InMemoryMetricReader()
    telemetry = Telemetry(TracerProvider(), MeterProvider(metric_readers=[reader]))
    for attr in INSTRUMENT_ATTRS:
        instrument = getattr(telemetry, attr)
        (instrument.add if hasattr(instrument, "add") else instrument.record)(1)
    data = reader.get_metrics_data()
    assert data is not None
    described = {
        m.name: m.description for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert described == INSTRUMENT_DESCRIPTIONS
    assert set(described) == set(INSTRUMENT_ATTRS.values())
    assert described["agent_signal_source_occurrences_total"] == (
        "Count of AgentSignal source events persisted to telemetry."
    )
    assert described["agent_signal_terminal_results_total"] == (
        "Count of AgentSignal terminal runtime results grouped by status and reason."
    )


def test_metrics_help_lines_print_the_description() -> None:
    """observability-otel/src/modules/agent-signal/index.ts: /metrics HELP lines carry the description, not the name."""
    from prometheus_client import generate_latest

    metrics = ProcessMetrics(INSTRUMENT_DESCRIPTIONS)
    metrics.add("agent_signal_chains_total", {})
    metrics.observe("agent_signal_action_duration_ms", {}, [5.0])
    text = generate_latest(metrics.registry).decode()
    help_lines = {
        line.split()[2]: line.split(" ", 3)[3] for line in text.splitlines() if line.startswith("# HELP")
    }
    for name, description in INSTRUMENT_DESCRIPTIONS.items():  # every instrument is declared, with its words
        assert help_lines[name] == description
