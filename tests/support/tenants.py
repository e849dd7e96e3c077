"""A tenant's producer for tests: the same store, broker app and plugins' settings, another tenant's events and
reads (``Producer(settings, tenant=...)``, sharing the one store of the process, as the door does per request)."""

from __future__ import annotations

from producers.sdk.producer import Producer


def as_tenant(producer: Producer, tenant: str) -> Producer:
    """A producer of ``tenant`` over ``producer``'s store and Celery app."""
    return Producer(
        producer.settings,
        celery_app=producer.app,
        telemetry=producer.telemetry,
        store=producer.store,
        tenant=tenant,
    )
