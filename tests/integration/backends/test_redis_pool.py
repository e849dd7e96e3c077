"""The state store's client pool is bounded (``redis_max_connections``): a thread past the cap waits up to
``redis_pool_timeout_s`` for a connection and then fails with a ConnectionError (a 503 at the door), instead
of opening one socket per thread. A web process serving 40 threads at once stays under the server's limits."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.store.server.client import PoolExhausted, redis_from_settings
from worker.store.server.safety import describe_store_error, note_store_failure, store_error_reason


def test_a_thread_past_the_cap_waits_for_a_free_connection(make_settings: Any) -> None:
    client = redis_from_settings(make_settings(redis_max_connections=2, redis_pool_timeout_s=5))
    pool = client.connection_pool
    held = [pool.get_connection(), pool.get_connection()]
    answered = threading.Event()

    def ping() -> None:
        client.ping()
        answered.set()

    waiter = threading.Thread(target=ping)
    waiter.start()
    try:
        pool.release(held.pop())
        assert answered.wait(5), "a released connection was not handed to the waiting thread"
    finally:
        waiter.join(5)
        for connection in held:
            pool.release(connection)
        client.close()
    assert len(pool._connections) == 2  # the waiter took the released one: no third socket was opened


class _NoCalls:
    """A client that fails the test if anything is asked of it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the client was used ({name}) while its pool was full")


def test_past_the_timeout_the_caller_gets_pool_exhausted(make_settings: Any) -> None:
    """A ConnectionError (every store-error path handles it) of its own kind: nothing was sent, and the store
    failure is counted later rather than waiting on the same full pool."""
    settings = make_settings(redis_max_connections=1, redis_pool_timeout_s=0.2)
    client = redis_from_settings(settings)
    pool = client.connection_pool
    held = pool.get_connection()
    try:
        with pytest.raises(
            PoolExhausted, match=r"all 1 connections of the pool stayed busy for 0\.2 s"
        ) as caught:
            client.ping()
        assert isinstance(caught.value, RedisConnectionError)
        assert "busy" in store_error_reason(caught.value)
        assert "nothing of the batch was stored" in describe_store_error(caught.value)
        # The failure count does not touch the full pool (it would wait there): it is carried to the next one.
        note_store_failure(_NoCalls(), "unused-stats-key", caught.value, "POST /v1/events")
    finally:
        pool.release(held)
    assert client.ping() is True
    client.close()


def test_the_cap_is_a_setting_with_a_clear_error(make_settings: Any) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="redis_max_connections"):
        make_settings(redis_max_connections=0)
