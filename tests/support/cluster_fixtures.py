"""Fixtures for the tests that run on a real Redis Cluster with RabbitMQ as the broker (issue 14).

A test module that needs them loads them itself, so the rest of the suite starts no cluster and no vhost:

    pytest_plugins = ["tests.support.cluster_fixtures"]

    def test_something(redis_cluster: RedisClusterProcesses, rabbitmq_url: str) -> None:
        client = redis_cluster.client()
        ...

``redis_cluster`` is one cluster per module (about 2 s to start): a test that kills a master should restart
it (``redis_cluster.restart(old)``) so the tests after it find three masters with a replica each again.
``rabbitmq_url`` is one private vhost per test run; tests that share it still give their Celery queues
distinct names (``make_settings`` already names the queue after the test's key prefix).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.rabbitmq_vhost import private_vhost, rabbitmq_reachable
from tests.support.redis_cluster import RedisClusterProcesses

__all__ = ["rabbitmq_url", "redis_cluster"]


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """Three masters with one replica each, as child processes on free loopback ports; stopped after."""
    with RedisClusterProcesses(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """``amqp://`` URL of a vhost private to this test run on the local RabbitMQ; deleted after."""
    if not rabbitmq_reachable():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 (the python-svc machines and CI run one)")
    with private_vhost() as url:
        yield url
