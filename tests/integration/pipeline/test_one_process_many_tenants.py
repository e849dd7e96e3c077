"""The tenant is a value that travels with the scope ref: one process's pipeline, store, emitter and lease drain
every tenant (real Redis, in process). Before, each tenant a process drained cloned the pipeline with a lease of
its own, and so a lease-renewer thread of its own."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from producers import Producer
from tests.support.tenants import as_tenant
from worker.core.tenancy import scope_ref
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

TENANTS = ("t-one", "t-two", "t-three", "t-four", "t-five")


def _renewers() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "lease-renewer" and thread.is_alive())


def test_five_tenants_drain_in_one_process_with_one_renewer_thread(make_settings: Any) -> None:
    """One event for each of five tenants, drained by one pipeline: every one done, and one renewer thread."""
    settings = make_settings(extra_source_types=["test.noop"])
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    before = _renewers()
    sent = {}
    for tenant in TENANTS:
        event = {"sourceType": "test.noop", "sourceId": "e1", "scopeKey": "topic:shared", "payload": {}}
        sent[tenant] = as_tenant(producer, tenant).enqueue(event).event_id
    for tenant in TENANTS:
        assert pipeline.drain(scope_ref(tenant, "topic:shared")).next == "idle"
    for tenant, event_id in sent.items():
        record = as_tenant(producer, tenant).status(event_id)
        assert record is not None and record["status"] == "done", (tenant, record)
    assert len(set(sent.values())) == len(TENANTS)  # five tenants' events, not one
    renewer = pipeline.lease._thread
    assert renewer is not None and renewer.is_alive()  # the drains started the pipeline's renewer ...
    assert _renewers() - before == 1  # ... and no other
    producer.close()
