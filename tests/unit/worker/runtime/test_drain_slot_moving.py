"""A drain refused because its scope's Redis Cluster slot is moving is published again after 1-2 s, a bounded
number of times in a row (worker/runtime/tasks.py ``drain_ref``); other store errors are left to the reconcile
sweep as before. The whole move, on real processes, is tests/integration/backends/test_redis_cluster_reshard.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ClusterError, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.keys.layout import EngineKeys
from worker.runtime import state, tasks
from worker.store.deleted_tenants import DeletedTenants
from worker.store.server.client import SlotMoving

REF = "acme/topic:a"


class _Drains:
    """The pipeline's full-store wait, running the drain: each call raises the next of ``errors`` (None: a drain
    that found nothing more to do)."""

    def __init__(self) -> None:
        self.errors: list[RedisError | None] = []
        self.published: list[tuple[str, float]] = []

    def call(self, run: Callable[[], object]) -> object:
        error = self.errors.pop(0)
        if error is not None:
            raise error
        return SimpleNamespace(next="done", delay_s=0.0, popped=None)


@pytest.fixture
def drains(redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Drains]:
    """A worker process whose drains fail as the test says; ``published`` records the drains sent again."""
    monkeypatch.setattr(tasks, "_moving_retries", tasks._MovingRetries())
    run = _Drains()
    pipeline: Any = SimpleNamespace(
        ctx=SimpleNamespace(full_wait=lambda _what: run),
        keys=EngineKeys(prefix),
        store=SimpleNamespace(
            client=redis_client, deleted_tenants=DeletedTenants(redis_client, EngineKeys(prefix))
        ),
    )
    fair: Any = SimpleNamespace(publish=lambda ref, countdown_s: run.published.append((ref, countdown_s)))
    with state.installed(lambda: state.WorkerProcess(pipeline, fair, None)):  # type: ignore[arg-type]
        yield run


@pytest.mark.parametrize(
    "error",
    [
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        ClusterError("TTL exhausted."),
        SlotMoving("x"),
    ],
)
def test_a_drain_refused_by_a_moving_slot_is_published_again_in_1_to_2_s(
    drains: Any, error: RedisError
) -> None:
    """TRYAGAIN, redis-py's "TTL exhausted" and SlotMoving: the drain comes back after 1-2 s, not after the sweep."""
    drains.errors = [error]
    assert tasks.drain_ref(None, "q", REF) is None
    assert [ref for ref, _ in drains.published] == [REF]
    assert 1.0 <= drains.published[0][1] <= 2.0


def test_the_quick_retries_stop_after_a_bounded_number_in_a_row(drains: Any) -> None:
    """A slot that keeps moving gets ``SLOT_MOVING_RETRIES`` quick retries, then the sweep's; a drain that went
    through starts the count again."""
    most = tasks.SLOT_MOVING_RETRIES
    drains.errors = [ClusterError("TTL exhausted.")] * (most + 1) + [None, ClusterError("TTL exhausted.")]
    for _ in range(most + 1):
        tasks.drain_ref(None, "q", REF)
    assert len(drains.published) == most
    tasks.drain_ref(None, "q", REF)  # went through
    tasks.drain_ref(None, "q", REF)
    assert len(drains.published) == most + 1


def test_an_unreachable_store_is_left_to_the_sweep(drains: Any) -> None:
    """A connection error is not a move: the drain is not published again (it would spin while Redis is down)."""
    drains.errors = [RedisConnectionError("gone")]
    assert tasks.drain_ref(None, "q", REF) is None
    assert drains.published == []
