"""Building Redis clients from settings (decoded strings, health checks, bounded timeouts).

With ``REDIS_CLUSTER_URL`` the state store is a Redis Cluster (``redis.cluster.RedisCluster``): every key a
script touches is in one tenant's slot (``worker/keys/layout.py``), so the same scripts run there unchanged. The
engine uses the command surface both clients share; the cluster client is typed as ``Redis`` for that reason.
Receipt streams subscribe through one node (classic pub/sub reaches every node of a cluster). The Celery
broker is never the cluster (``BROKER_URL``: RabbitMQ or a plain Redis).
"""

from __future__ import annotations

from typing import Any, cast

from redis import BlockingConnectionPool, Redis
from redis.asyncio import BlockingConnectionPool as AsyncBlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.settings import Settings
from worker.store.clock_sync import keep_in_sync
from worker.store.packer import hiredis_packer_kwargs

__all__ = ["PoolExhausted", "async_redis_from_settings", "is_cluster", "redis_from_settings"]


class PoolExhausted(RedisConnectionError):
    """Every connection of a bounded pool stayed busy for ``redis_pool_timeout_s``: nothing was sent to Redis.
    A ConnectionError (so every store-error path handles it), told apart so best-effort writes do not wait on
    the same full pool and the door can say the store is busy rather than unreachable."""


def _exhausted(
    exc: RedisConnectionError, max_connections: int, timeout: float | None
) -> PoolExhausted | None:
    """:class:`PoolExhausted` when ``exc`` is redis-py's own words for an empty queue after the pool's timeout
    (tests pin them); None for any other connection error (re-raised as it is)."""
    if type(exc) is RedisConnectionError and str(exc) == "No connection available.":
        return PoolExhausted(f"all {max_connections} connections of the pool stayed busy for {timeout} s")
    return None


class _BoundedPool(BlockingConnectionPool):
    """redis-py's BlockingConnectionPool, raising :class:`PoolExhausted` when its wait for a connection ends."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Connection:
        try:
            return cast(Connection, super().get_connection(*args, **kwargs))  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            exhausted = _exhausted(exc, self.max_connections, self.timeout)
            if exhausted is None:
                raise
            raise exhausted from None


class _AsyncBoundedPool(AsyncBlockingConnectionPool):
    """The asyncio twin of :class:`_BoundedPool`: :class:`PoolExhausted` when its wait for a connection ends."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            exhausted = _exhausted(exc, self.max_connections, self.timeout)
            if exhausted is None:
                raise
            raise exhausted from None


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def redis_from_settings(settings: Settings) -> Redis:
    """A client for the state store; connects lazily. Its pool holds at most ``redis_max_connections``. The
    process's first one also puts its clock on Redis's (worker/store/clock_sync.py)."""
    keep_in_sync(settings)
    if settings.redis_cluster_url:
        cluster = RedisCluster.from_url(
            settings.redis_cluster_url,
            decode_responses=True,
            socket_timeout=10,
            socket_connect_timeout=5,
            health_check_interval=30,
        )
        return cast(Redis, cluster)
    # A bounded pool: a thread past `redis_max_connections` waits up to `redis_pool_timeout_s` for a free
    # connection (then PoolExhausted, a 503 at the door) instead of opening one more socket per thread.
    url = settings.require_redis_url()
    pool = _BoundedPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_pool_timeout_s,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=True,
        **hiredis_packer_kwargs(url),  # the arguments packed by hiredis alone (worker/store/packer.py)
    )
    return Redis.from_pool(pool)  # the client owns the pool: close() disconnects it


def async_redis_from_settings(settings: Settings, *, pubsub: bool = False) -> AsyncRedis:
    """An asyncio client (decoded strings, bounded connect time); connects lazily. ``pubsub``: a client of one
    node, for SUBSCRIBE (on a cluster, any node hears every PUBLISH)."""
    keep_in_sync(settings)
    if settings.redis_cluster_url and not pubsub:
        cluster = AsyncRedisCluster.from_url(
            settings.redis_cluster_url, decode_responses=True, socket_connect_timeout=5
        )
        return cast(AsyncRedis, cluster)
    if pubsub:  # one connection per listener: the web process runs one (producers/http/streams/feed.py)
        return AsyncRedis.from_url(
            settings.redis_cluster_url or settings.require_redis_url(),
            decode_responses=True,
            socket_connect_timeout=5,
            health_check_interval=30,
        )
    # Bounded like the sync pool: a burst of requests waits up to `redis_pool_timeout_s` for one of
    # `redis_max_connections` connections (then a ConnectionError, a 503 at the door) instead of opening a socket
    # per concurrent request.
    pool = _AsyncBoundedPool.from_url(
        settings.require_redis_url(),
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_pool_timeout_s,
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=30,
    )
    return AsyncRedis.from_pool(pool)
