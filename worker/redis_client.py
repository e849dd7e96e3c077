"""Building Redis clients from settings (decoded strings, health checks, bounded timeouts)."""

from __future__ import annotations

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from worker.settings import Settings

__all__ = ["async_redis_from_settings", "redis_from_settings"]


def redis_from_settings(settings: Settings) -> Redis:
    """A client for the state store; connects lazily."""
    return Redis.from_url(
        settings.require_redis_url(),
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=True,
    )


def async_redis_from_settings(settings: Settings) -> AsyncRedis:
    """An asyncio client for streams (decoded strings, bounded connect time); connects lazily."""
    return AsyncRedis.from_url(
        settings.require_redis_url(),
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=30,
    )
