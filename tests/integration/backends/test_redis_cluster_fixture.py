"""The Redis Cluster fixture itself, on real processes: it forms, routes, refuses cross-slot commands, fails
over without losing acknowledged writes, and leaves nothing running.

One cluster serves the module; the failover test restarts the master it kills, and the stop test runs last
(tests run in file order).
"""

from __future__ import annotations

import os

import pytest
from redis.crc import key_slot
from redis.exceptions import ClusterCrossSlotError, RedisClusterException

from tests.support.redis_cluster import SLOTS, RedisClusterProcesses, hash_tag_in, write_acknowledged

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = pytest.mark.integration


def test_three_masters_own_every_slot_with_one_replica_each(redis_cluster: RedisClusterProcesses) -> None:
    """Three masters split the 16384 slots and each has its own running replica."""
    masters = redis_cluster.masters()
    owned = [last - first + 1 for m in masters for first, last in redis_cluster.slots_of(m)]
    replicas = {redis_cluster.replica_of(m).port for m in masters}

    assert len(masters) == 3 and all(redis_cluster.slots_of(m) for m in masters)
    assert sum(owned) == SLOTS
    assert len(replicas) == 3 and not replicas & {m.port for m in masters}


def test_a_key_written_through_the_cluster_client_is_readable(redis_cluster: RedisClusterProcesses) -> None:
    """A key set through one client is read back through another seeded from the fixture's URL."""
    from redis.cluster import RedisCluster

    redis_cluster.client().set("fixture:greeting", "hello")
    other = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    try:
        assert other.get("fixture:greeting") == "hello"
    finally:
        other.close()


def test_multi_key_commands_need_one_slot(redis_cluster: RedisClusterProcesses) -> None:
    """MSET on keys sharing a hash tag works; on keys in two slots the client refuses and the server says
    CROSSSLOT."""
    client = redis_cluster.client()
    client.mset({"{order:1}:a": "1", "{order:1}:b": "2"})
    assert client.mget("{order:1}:a", "{order:1}:b") == ["1", "2"]

    assert key_slot(b"order:1") != key_slot(b"order:2")
    with pytest.raises(RedisClusterException, match="same key slot"):
        client.mset({"{order:1}:a": "1", "{order:2}:a": "2"})
    node = client.get_node_from_key("{order:1}:a")  # type: ignore[no-untyped-call]
    with pytest.raises(ClusterCrossSlotError):  # the server's -CROSSSLOT reply
        client.get_redis_connection(node).mset({"{order:1}:a": "1", "{order:2}:a": "2"})


def test_a_lua_script_may_touch_two_keys_sharing_a_tag(redis_cluster: RedisClusterProcesses) -> None:
    """EVAL over two keys in one slot runs atomically on that slot's master."""
    client = redis_cluster.client()
    script = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[2], ARGV[1])"

    assert client.eval(script, 2, "{scope:9}:last", "{scope:9}:total", "5") == 5
    assert client.get("{scope:9}:last") == "5"


def test_writes_acknowledged_by_a_replica_survive_the_master_being_killed(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """Keys written with WAIT 1 acknowledged are on the replica that takes over after SIGKILL; the killed
    master comes back as that replica's replica."""
    client = redis_cluster.client()
    master = redis_cluster.masters()[0]
    replica = redis_cluster.replica_of(master)
    tag = hash_tag_in(redis_cluster.slots_of(master))
    written = {f"{tag}:acked:{i}": str(i) for i in range(20)}
    for key, value in written.items():
        assert write_acknowledged(client, key, value) == 1

    old = redis_cluster.kill_master(master)
    new = redis_cluster.wait_failover(old)

    assert new.port == replica.port
    assert client.mget(list(written)) == list(written.values())  # the client from before the kill recovers
    redis_cluster.restart(old)
    assert redis_cluster.replica_of(new).port == old.port
    assert len(redis_cluster.masters()) == 3


def test_stop_leaves_no_process_and_no_directory(redis_cluster: RedisClusterProcesses) -> None:
    """After stop() no server pid exists and the temporary directory is gone."""
    pids = [node.pid for node in redis_cluster.nodes if node.pid is not None]
    directory = redis_cluster.directory
    assert len(pids) == 6 and directory is not None and directory.exists()

    redis_cluster.stop()

    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not directory.exists()
