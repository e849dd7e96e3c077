"""An event the self-iteration gate applies to, sent while the store is unreachable, raises StoreUnavailable (503
over HTTP): the gate's read failing answered it ``gated``, as if its user had the feature off, so it was not
stored and the caller, told nothing was wrong, never sent it again. The store is a port held bound and not
listening: every connection is refused, and no other server can take it meanwhile."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from producers import Producer, StoreUnavailable

pytestmark = pytest.mark.integration

MESSAGE = {
    "sourceType": "agent.user.message",
    "sourceId": "msg_gate_down",
    "scopeKey": "topic:gate-down",
    "userId": "u_gate",
    "payload": {"message": "hello"},
}


def test_a_gated_type_sent_while_the_store_is_down_is_store_unavailable(make_settings: Any) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = held.getsockname()[1]
        producer = Producer(make_settings(redis_url=f"redis://127.0.0.1:{port}/0"))
        try:
            with pytest.raises(StoreUnavailable):
                producer.enqueue(MESSAGE)
        finally:
            producer.close()


def test_liveness_with_a_credential_does_not_read_the_store(make_settings: Any) -> None:
    """A contract audit: ``/healthz`` answered 200 without a credential and 503 ``store_unavailable`` with one
    while the store was down (the credential was looked up); liveness reads nothing, so it answers 200 both
    ways. A route that needs the store still answers 503."""
    from fastapi.testclient import TestClient

    from producers.http.app import create_web_app

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = held.getsockname()[1]
        settings = make_settings(
            redis_url=f"redis://127.0.0.1:{port}/0", bootstrap_key="boot-key-0123456789abcdef"
        )
        with TestClient(create_web_app(settings)) as client:
            auth = {"Authorization": "Bearer boot-key-0123456789abcdef"}
            assert client.get("/healthz").status_code == 200
            assert client.get("/healthz", headers=auth).status_code == 200
            assert client.get("/v1/dlq", headers=auth).status_code == 503
