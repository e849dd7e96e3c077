"""Building Redis clients from settings (decoded strings, health checks, bounded timeouts).

With ``REDIS_CLUSTER_URL`` the state store is a Redis Cluster (``redis.cluster.RedisCluster``): every key a
script touches is in one tenant's slot (``worker/keys/layout.py``), so the same scripts run there unchanged. The
engine uses the command surface both clients share; the cluster client is typed as ``Redis`` for that reason.
Receipt streams subscribe through one node (classic pub/sub reaches every node of a cluster). The Celery
broker is never the cluster (``BROKER_URL``: RabbitMQ or a plain Redis).

Both cluster clients are redis-py's with one override (:class:`_Cluster`, :class:`_AsyncCluster`): an ASK
redirect to a node the client has not seen yet (a master added after it loaded its view) makes redis-py raise
``AttributeError`` on ``None`` (redis/redis-py#4015; the fix, PR #4214, is unreleased). The command is then
retried once after a topology refresh, and a second failure is :class:`SlotMoving`, a store error (503 at the
door) instead of a 500. Nothing was sent to the unknown node, so the retry cannot apply a command twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from redis import BlockingConnectionPool, Redis
from redis.asyncio import BlockingConnectionPool as AsyncBlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterPipeline, RedisCluster
from redis.connection import Connection
from redis.exceptions import ClusterError
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.settings import Settings
from worker.store.server.clock_sync import keep_in_sync
from worker.store.server.packer import hiredis_packer_kwargs

__all__ = ["PoolExhausted", "SlotMoving", "async_redis_from_settings", "is_cluster", "redis_from_settings"]


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


class SlotMoving(ClusterError):
    """A key's slot is moving to a Redis node this client cannot reach by its view of the cluster, even after
    a refresh (a master added and given no slot yet): nothing was sent to that node; retry later."""


def _unknown_node(exc: AttributeError) -> bool:
    """redis-py#4015: the ASK target was looked up in the client's node cache, found missing (None), and used
    (the sync client then fails again recording a metric for that None, hence the context too)."""
    return any(
        isinstance(error, AttributeError)
        and error.obj is None
        and error.name in {"execute_command", "redis_connection"}
        for error in (exc, exc.__context__)
    )


def _slot_moving() -> SlotMoving:
    return SlotMoving("a slot is moving to a Redis node this client does not know yet (redis-py#4015)")


def _refreshing(call: Callable[..., Any], cluster: RedisCluster) -> Callable[..., Any]:
    """``call`` (a cluster's execute_command), retried once after a topology refresh on redis-py#4015."""

    def execute(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except AttributeError as exc:
            if not _unknown_node(exc):
                raise
            cluster.nodes_manager.initialize()
        try:
            return call(*args, **kwargs)
        except AttributeError as exc:
            if not _unknown_node(exc):
                raise
            raise _slot_moving() from exc

    return execute


class _Cluster(RedisCluster):
    """redis-py's cluster client, surviving an ASK to a node added after it loaded its view (module docstring).
    Its pipelines retry a redirected command through ``parent_execute_command``: that is wrapped too."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return _refreshing(super().execute_command, self)(*args, **kwargs)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe: ClusterPipeline = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.parent_execute_command = _refreshing(pipe.parent_execute_command, self)
        return pipe


class _AsyncCluster(AsyncRedisCluster):
    """The asyncio twin of :class:`_Cluster`; its pipelines retry redirected commands through this client's
    ``execute_command``, so they are covered by it."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            if not _unknown_node(exc):
                raise
            await self.nodes_manager.initialize()
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            if not _unknown_node(exc):
                raise
            raise _slot_moving() from exc


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def redis_from_settings(settings: Settings) -> Redis:
    """A client for the state store; connects lazily. Its pool holds at most ``redis_max_connections``. The
    process's first one also puts its clock on Redis's (worker/store/server/clock_sync.py)."""
    keep_in_sync(settings)
    if settings.redis_cluster_url:
        cluster = _Cluster.from_url(
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
        **hiredis_packer_kwargs(url),  # the arguments packed by hiredis alone (worker/store/server/packer.py)
    )
    return Redis.from_pool(pool)  # the client owns the pool: close() disconnects it


def async_redis_from_settings(settings: Settings, *, pubsub: bool = False) -> AsyncRedis:
    """An asyncio client (decoded strings, bounded connect time); connects lazily. ``pubsub``: a client of one
    node, for SUBSCRIBE (on a cluster, any node hears every PUBLISH)."""
    keep_in_sync(settings)
    if settings.redis_cluster_url and not pubsub:
        cluster = _AsyncCluster.from_url(
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
