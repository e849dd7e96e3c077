"""The store-safety decision (worker/store/server/safety.py) without a server: eviction, persistence, memory,
a disabled CONFIG, and how store errors are worded and counted."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ClusterDownError, ClusterError, OutOfMemoryError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.settings import Settings
from worker.store.server import safety as store_safety
from worker.store.server.safety import (
    NO_PERSISTENCE,
    StoreConfig,
    assess,
    describe_store_error,
    note_store_failure,
    store_error_reason,
    store_refused,
)

SAFE = StoreConfig(policy="noeviction", appendonly=True, save="", maxmemory=0, used_memory=1000)


def _config(**changes: Any) -> StoreConfig:
    values = {
        "policy": SAFE.policy,
        "appendonly": SAFE.appendonly,
        "save": SAFE.save,
        "maxmemory": SAFE.maxmemory,
        "used_memory": SAFE.used_memory,
    }
    values.update(changes)
    return StoreConfig(**values)


def _settings(**overrides: Any) -> Settings:
    return Settings(redis_url="redis://127.0.0.1:1/0", **overrides)


def test_safe_redis_has_nothing_to_say() -> None:
    """noeviction, appendonly and no maxmemory: no refusal, no log line, no /readyz entry."""
    safety = assess(SAFE, _settings())
    assert (safety.refusal, safety.errors, safety.warnings, safety.checks) == (None, (), (), {})
    assert safety.persistent is True and safety.memory_ratio is None


@pytest.mark.parametrize(
    "policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"]
)
def test_every_evicting_policy_is_refused_with_the_fix(policy: str) -> None:
    """Any policy but noeviction (volatile-* included) refuses, naming the policy, the fix and the override."""
    safety = assess(_config(policy=policy), _settings())
    assert safety.refusal is not None
    assert f"maxmemory-policy is {policy}" in safety.refusal
    assert "maxmemory-policy noeviction" in safety.refusal
    assert "AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true" in safety.refusal
    assert safety.checks["eviction"].startswith("error: ")


def test_override_accepts_eviction_loudly() -> None:
    """With the override the verdict is an ERROR line and a non-error /readyz entry, never a refusal."""
    safety = assess(_config(policy="allkeys-lru"), _settings(allow_evicting_redis=True))
    assert safety.refusal is None
    assert len(safety.errors) == 1 and "allkeys-lru" in safety.errors[0]
    assert safety.checks["eviction"].startswith("accepted: allkeys-lru")


def test_no_persistence_warns_only_in_production() -> None:
    """appendonly no and no save points: a warning and a /readyz entry in production, nothing elsewhere."""
    bare = _config(appendonly=False, save="")
    production = assess(bare, _settings(env="production"))
    assert production.checks == {"persistence": NO_PERSISTENCE} and len(production.warnings) == 1
    assert production.persistent is False
    assert assess(bare, _settings(env="test")).checks == {}


def test_save_points_count_as_persistence() -> None:
    """RDB save points alone are persistence: no warning in production."""
    safety = assess(_config(appendonly=False, save="3600 1 300 100"), _settings(env="production"))
    assert safety.persistent is True and safety.checks == {}


def test_memory_over_the_warn_ratio_shows() -> None:
    """used/maxmemory at or above the ratio is a memory entry; below it only the gauge value is there."""
    high = assess(_config(maxmemory=1000, used_memory=950), _settings(redis_memory_warn_ratio=0.9))
    assert high.checks["memory"].startswith("high: 95% of maxmemory") and high.memory_ratio == 0.95
    low = assess(_config(maxmemory=1000, used_memory=500), _settings(redis_memory_warn_ratio=0.9))
    assert low.checks == {} and low.memory_ratio == 0.5


def test_disabled_config_skips_eviction_and_persistence() -> None:
    """CONFIG renamed away: policy and persistence unknown, so nothing is refused or warned about them."""
    safety = assess(_config(policy=None, appendonly=None, save=None), _settings(env="production"))
    assert safety.refusal is None and safety.checks == {} and safety.persistent is None


def test_errors_say_whether_anything_was_stored() -> None:
    """OOM: refused before any write, nothing stored; a lost connection: maybe stored, retry is safe."""
    oom = OutOfMemoryError("command not allowed when used memory > 'maxmemory'. script: abc")
    assert store_refused(oom) and store_refused(ResponseError("OOM command not allowed"))
    assert describe_store_error(oom) == (
        "the store refused the batch (out of memory); nothing of it was stored; retry later"
    )
    for exc in (RedisConnectionError("gone"), RedisTimeoutError("slow")):
        assert not store_refused(exc)
        assert "may not have been stored; retrying is safe" in describe_store_error(exc)
    assert "may be partly stored" in describe_store_error(ResponseError("WRONGTYPE"))


class _Client:
    """A stand-in Redis whose HINCRBY fails while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.counted: list[int] = []

    def hincrby(self, key: str, field: str, amount: int) -> int:
        if self.down:
            raise OutOfMemoryError("OOM")
        self.counted.append(amount)
        return amount


def test_failure_count_is_carried_until_redis_takes_it(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failure logs one 'store unavailable' line; counts refused by a full Redis are added later."""
    monkeypatch.setattr(store_safety, "_pending", 0)  # this process may carry counts from other tests
    client = _Client()
    note_store_failure(client, "stats", OutOfMemoryError("OOM"), "drain topic:a")  # type: ignore[arg-type]
    client.down = False
    note_store_failure(client, "stats", RedisConnectionError("gone"), "enqueue")  # type: ignore[arg-type]
    assert client.counted == [2]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store unavailable: ")]
    assert lines[0] == "store unavailable: drain topic:a: OutOfMemoryError: OOM" and len(lines) == 2


def test_a_moving_cluster_slot_is_named_as_such() -> None:
    """TRYAGAIN, redis-py's "TTL exhausted" and SlotMoving read as a slot moving between nodes, not as redis-py's
    words; a cluster that is down keeps its own."""
    from worker.store.server.client import SlotMoving

    moving = "the tenant's slot is moving between Redis nodes"
    for exc in (
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        ClusterError("TTL exhausted."),
        SlotMoving("a slot is moving"),
    ):
        assert store_error_reason(exc) == moving
    assert store_error_reason(ClusterDownError("CLUSTERDOWN The cluster is down")).startswith(
        "ClusterDownError"
    )
