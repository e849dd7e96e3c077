"""A real Redis Cluster for tests: three masters and three replicas, each a ``redis-server`` child process on
free loopback ports in its own temporary directory, formed with ``redis-cli --cluster create``.

    with RedisClusterProcesses() as cluster:
        client = cluster.client()                  # redis.cluster.RedisCluster, decode_responses=True
        old = cluster.kill_master(cluster.masters()[0])
        new = cluster.wait_failover(old)           # the old master's replica, now master of its slots
        cluster.restart(old)                       # rejoins as the replica of ``new``

Every wait polls what the nodes report themselves (``CLUSTER INFO``, ``CLUSTER NODES``, ``INFO
replication``) against a bounded deadline and fails naming each node and what it still reports; nothing
sleeps a fixed time. Redis 7.0 or newer is needed: ``cluster-port`` gives each node's cluster bus its own
free port (the default, port + 10000, can pass 65535 or collide with another test's port).

Nothing outlives the test run: ``stop()`` is registered with ``atexit``, and each server dies with the
process that started it (``_redis_cluster_node``); only a killed run's temporary directory stays behind.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from signal import SIGKILL, Signals
from types import TracebackType
from typing import Any

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisError, ResponseError

from tests.conftest import free_ports, wait_for
from tests.support._redis_cluster_node import (
    FAILED_FLAGS,
    HOST,
    SLOTS,
    ClusterNotReady,
    NodeProcess,
    SlotRanges,
    cluster_info,
    redis_server_binary,
)

__all__ = [
    "SLOTS",
    "ClusterNotReady",
    "NodeProcess",
    "RedisClusterProcesses",
    "SlotRanges",
    "hash_tag_in",
    "write_acknowledged",
]


def hash_tag_in(slots: SlotRanges, stem: str = "t") -> str:
    """A hash tag (``{...}`` included) whose slot lies in ``slots``: keys that contain it live there."""
    for i in range(100_000):
        tag = f"{{{stem}{i}}}"
        slot = key_slot(tag[1:-1].encode())
        if any(first <= slot <= last for first, last in slots):
            return tag
    raise ValueError(f"no hash tag {stem}<n> falls in {slots}")


def write_acknowledged(
    client: RedisCluster, key: str, value: str, *, replicas: int = 1, timeout_ms: int = 10_000
) -> int:
    """``SET key value`` on the key's master, then ``WAIT replicas timeout_ms``; returns how many replicas
    acknowledged. WAIT counts the writes of the connection it runs on, so both go in one pipeline on one
    connection to that node (the client's slot map must be current: a MOVED reply raises)."""
    node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    with client.get_redis_connection(node).pipeline(transaction=False) as pipe:
        pipe.set(key, value)
        pipe.execute_command("WAIT", replicas, timeout_ms)  # type: ignore[no-untyped-call]
        _, acknowledged = pipe.execute()
    return int(acknowledged)


class RedisClusterProcesses:
    """``master_count`` masters with one replica each, as child processes; see the module docstring.

    ``appendonly=True`` runs every node with ``--appendonly yes --appendfsync always``; the default keeps
    data in memory only (``--save ''``), so a restarted node comes back empty and resyncs from its master.
    ``node_timeout_ms`` is ``cluster-node-timeout``: a killed master is failed over about two of those
    later. ``timeout_s`` bounds each wait.
    """

    def __init__(
        self,
        parent_dir: Path | None = None,
        *,
        master_count: int = 3,
        appendonly: bool = False,
        node_timeout_ms: int = 1000,
        timeout_s: float = 30.0,
    ) -> None:
        self.parent_dir = parent_dir
        self.master_count = master_count
        self.appendonly = appendonly
        self.node_timeout_ms = node_timeout_ms
        self.timeout_s = timeout_s
        self.directory: Path | None = None
        self.nodes: list[NodeProcess] = []
        self._clients: list[RedisCluster] = []
        self._killed: dict[int, tuple[NodeProcess, SlotRanges]] = {}  # master port -> (its replica, slots)

    def __enter__(self) -> RedisClusterProcesses:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the servers, form the cluster and wait until every node reports it whole."""
        server = redis_server_binary()
        self.directory = Path(tempfile.mkdtemp(prefix="redis-cluster-", dir=self.parent_dir))
        atexit.register(self.stop)
        try:
            ports = free_ports(4 * self.master_count)
            for port, bus_port in zip(ports[0::2], ports[1::2], strict=True):
                node = NodeProcess(port, bus_port, self.directory / f"node-{port}")
                self.nodes.append(node)
                node.spawn(*self._config())
            for node in self.nodes:
                self._wait(functools.partial(self._ping_problems, node), f"{node.address} to answer PING")
            self._create(server)
            self._wait(self._formed_problems, "the cluster to form")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Terminate every server (SIGKILL after 10 s), close clients, remove the directory. Idempotent."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        for node in self.nodes:
            node.close()
            if node.alive():
                assert node.popen is not None
                node.popen.terminate()
        for node in self.nodes:
            if node.popen is not None:
                try:
                    node.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.popen.kill()
                    node.popen.wait(timeout=10)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        atexit.unregister(self.stop)

    def restart(self, node: NodeProcess | int) -> NodeProcess:
        """Start a stopped node again on its ports and directory; wait until the cluster is whole again (a
        failed-over master rejoins as the replica of the node that took its slots)."""
        node = self._node(node)
        if node.alive():
            raise ValueError(f"{node.address} is running")
        node.spawn(*self._config())
        node.killed = False
        self._wait(functools.partial(self._ping_problems, node), f"{node.address} to answer PING")
        self._wait(self._settled_problems, f"the cluster to settle after restarting {node.address}")
        return node

    # -- clients and topology ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """A ``redis://`` seed for ``RedisCluster.from_url``: a running node."""
        return self._live()[0].url

    def client(self, **options: Any) -> RedisCluster:
        """A cluster client seeded with every running node; closed by ``stop()``."""
        startup = [ClusterNode(HOST, node.port) for node in self._live()]  # type: ignore[no-untyped-call]
        client = RedisCluster(startup_nodes=startup, decode_responses=True, **options)
        self._clients.append(client)
        return client

    def masters(self) -> list[NodeProcess]:
        """Running nodes that are masters owning slots in their own view, in slot order."""
        own = {node.port: node.view()[node.port] for node in self._live()}
        masters = [node for node in self._live() if own[node.port].owns_slots]
        return sorted(masters, key=lambda node: own[node.port].slots)

    def slots_of(self, node: NodeProcess | int) -> SlotRanges:
        """The slot ranges ``node`` owns in its own view."""
        node = self._node(node)
        return node.view()[node.port].slots

    def replica_of(self, master: NodeProcess | int) -> NodeProcess:
        """The running node replicating ``master`` (by its own ``INFO replication``)."""
        master = self._node(master)
        for node in self._live():
            info = node.admin().info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                return node
        raise LookupError(f"no running replica of {master.address}")

    # -- growth ------------------------------------------------------------------------------------------

    def add_master(self) -> NodeProcess:
        """Start one more node, introduce it (CLUSTER MEET) and wait until every node sees it as a master with
        no slot; ``stop()`` stops it too. Clients made before do not know it (their view is older)."""
        port, bus_port = free_ports(2)
        assert self.directory is not None
        node = NodeProcess(port, bus_port, self.directory / f"node-{port}")
        self.nodes.append(node)
        node.spawn(*self._config())
        self._wait(functools.partial(self._ping_problems, node), f"{node.address} to answer PING")
        self.masters()[0].admin().execute_command("CLUSTER", "MEET", HOST, port, bus_port)

        def known(other: NodeProcess) -> list[str]:
            line = other.view().get(port)
            return [] if line is not None and "master" in line.flags else [f"does not see {node.address} yet"]

        def informed(other: NodeProcess) -> list[str]:
            info = cluster_info(other)
            if info.get("cluster_state") == "ok" and info.get("cluster_slots_ok") == str(SLOTS):
                return []
            return [f"cluster_state:{info.get('cluster_state')} slots_ok:{info.get('cluster_slots_ok')}"]

        self._wait(lambda: self._each_live(known), f"every node to know {node.address}")
        self._wait(
            functools.partial(informed, node), f"{node.address} to learn every slot's owner and say ok"
        )
        return node

    def move_slot(self, slot: int, target: NodeProcess, *, finish: bool = True) -> int:
        """Move ``slot``'s keys to ``target`` the way ``redis-cli --cluster reshard`` does (IMPORTING,
        MIGRATING, MIGRATE); with ``finish`` give it the slot on every master, else leave it half-moved (open).
        Returns how many keys moved."""
        source = next(m for m in self.masters() if any(a <= slot <= b for a, b in self.slots_of(m)))
        target_id, source_id = target.cluster("MYID"), source.cluster("MYID")
        target.admin().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.admin().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while keys := source.admin().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            source.admin().execute_command(
                "MIGRATE", HOST, target.port, "", 0, 5000, "REPLACE", "KEYS", *keys
            )
            moved += len(keys)
        if finish:
            self.assign_slot(slot, target)
        return moved

    def assign_slot(self, slot: int, owner: NodeProcess) -> None:
        """``CLUSTER SETSLOT slot NODE owner`` on the owner, then on every other master (what reshard ends with)."""
        owner_id = owner.cluster("MYID")
        for node in [owner, *(m for m in self._live() if m is not owner and m.role() == "master")]:
            try:
                node.admin().execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner_id)
            except ResponseError as error:
                # a master that gave away its last slot has become the owner's replica (Redis 7)
                if node is owner or "only with masters" not in str(error):
                    raise

        def sees_owner(node: NodeProcess) -> list[str]:
            slots = node.view()[owner.port].slots
            return (
                []
                if any(a <= slot <= b for a, b in slots)
                else [f"does not see slot {slot} at {owner.address}"]
            )

        self._wait(lambda: self._each_live(sees_owner), f"every node to see slot {slot} at {owner.address}")

    # -- failure -----------------------------------------------------------------------------------------

    def kill_master(self, master: NodeProcess | int, signal: Signals = SIGKILL) -> NodeProcess:
        """Send ``signal`` (SIGKILL, or SIGTERM for a clean shutdown) to a master and wait for it to exit;
        its replica and slots are remembered for ``wait_failover``."""
        node = self._node(master)
        if node not in self.masters():
            raise ValueError(f"{node.address} is not a running master owning slots")
        self._killed[node.port] = (self.replica_of(node), self.slots_of(node))
        node.killed = True
        assert node.popen is not None
        node.popen.send_signal(signal)
        try:
            node.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise ClusterNotReady(f"{node.address} did not exit on {signal.name}") from None
        return node

    def wait_failover(self, old_master: NodeProcess | int) -> NodeProcess:
        """Wait until the killed master's replica is master of its slots, the cluster is ok in every running
        node's view, and a client can write a key in those slots; returns the new master."""
        old = self._node(old_master)
        if old.port not in self._killed:
            raise ValueError(f"{old.address} was not killed with kill_master()")
        new, slots = self._killed[old.port]
        took_over = functools.partial(self._failover_problems, old, new, slots)
        self._wait(took_over, f"{new.address} to take over from {old.address}")
        client = self.client()
        key = f"redis-cluster-fixture:probe:{hash_tag_in(slots)}"

        def written() -> list[str]:
            try:
                client.set(key, "1")
                client.delete(key)
            except RedisError as error:
                return [f"writing {key}: {error!r}"]
            return []

        self._wait(written, f"a write to the slots of {old.address}")
        return new

    # -- internals ---------------------------------------------------------------------------------------

    def _config(self) -> list[str]:
        config = ["--cluster-node-timeout", str(self.node_timeout_ms), "--save", ""]
        config += ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once, not 5 s later
        if self.appendonly:
            return [*config, "--appendonly", "yes", "--appendfsync", "always"]
        return [*config, "--appendonly", "no"]

    def _create(self, server: str) -> None:
        cli = str(Path(server).with_name("redis-cli"))
        args = [cli, "--cluster", "create", *(n.address for n in self.nodes)]
        args += ["--cluster-replicas", "1", "--cluster-yes"]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ClusterNotReady(f"redis-cli --cluster create took over {self.timeout_s}s") from None
        if done.returncode != 0 or f"All {SLOTS} slots covered" not in done.stdout:
            raise ClusterNotReady(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")

    def _node(self, node: NodeProcess | int) -> NodeProcess:
        port = node if isinstance(node, int) else node.port
        for candidate in self.nodes:
            if candidate.port == port:
                return candidate
        raise LookupError(f"no node on port {port}")

    def _live(self) -> list[NodeProcess]:
        return [node for node in self.nodes if node.alive()]

    def _wait(self, check: Callable[[], list[str]], what: str) -> None:
        """Poll ``check`` (a list of what is not ready yet) until it is empty; fail naming what is left."""
        problems: list[str] = []

        def ready() -> bool:
            for node in self.nodes:
                if not node.killed and not node.alive():
                    raise ClusterNotReady(
                        f"{node.address} exited while waiting for {what}:\n{node.log_tail()}"
                    )
            problems[:] = check()
            return not problems

        try:
            wait_for(ready, timeout_s=self.timeout_s, what=what)
        except ClusterNotReady:
            raise
        except AssertionError:
            left = "\n  ".join(problems)
            raise ClusterNotReady(
                f"timed out after {self.timeout_s}s waiting for {what}; not ready:\n  {left}"
            ) from None

    def _each_live(self, check: Callable[[NodeProcess], list[str]]) -> list[str]:
        """``check`` on every running node; a node that does not answer is a problem too."""
        problems: list[str] = []
        for node in self._live():
            try:
                problems += [f"{node.address}: {problem}" for problem in check(node)]
            except RedisError as error:
                problems.append(f"{node.address}: {error!r}")
        return problems

    def _ping_problems(self, node: NodeProcess) -> list[str]:
        try:
            node.admin().ping()
        except RedisError as error:
            return [f"{node.address}: {error!r}"]
        return []

    def _node_problems(self, node: NodeProcess) -> list[str]:
        """What keeps ``node`` from reporting a whole cluster: its state, slots, peers and replication link."""
        info, view, live = cluster_info(node), node.view(), {n.port for n in self._live()}
        out = [f"cluster_state:{info.get('cluster_state')}"] if info.get("cluster_state") != "ok" else []
        for key, want in (("slots_assigned", SLOTS), ("slots_ok", SLOTS), ("known_nodes", len(self.nodes))):
            if info.get(f"cluster_{key}") != str(want):
                out.append(f"cluster_{key}:{info.get(f'cluster_{key}')} (want {want})")
        out += [
            f"sees :{p} as {ln.flags_text()}"
            for p, ln in view.items()
            if ln.flags & FAILED_FLAGS and p in live
        ]
        owners = [p for p, line in view.items() if line.owns_slots]
        if len(owners) != self.master_count or not live.issuperset(owners):
            out.append(f"masters owning slots: {sorted(owners)} (want {self.master_count}, all running)")
        replication = node.admin().info("replication")
        if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
            out.append(f"master_link_status:{replication.get('master_link_status')}")
        return out

    def _settled_problems(self) -> list[str]:
        return self._each_live(self._node_problems)

    def _formed_problems(self) -> list[str]:
        def replicas(node: NodeProcess) -> list[str]:
            seen = sum("slave" in line.flags for line in node.view().values())
            return [] if seen == self.master_count else [f"sees {seen} replicas (want {self.master_count})"]

        return self._settled_problems() + self._each_live(replicas)

    def _failover_problems(self, old: NodeProcess, new: NodeProcess, slots: SlotRanges) -> list[str]:
        def took_over(node: NodeProcess) -> list[str]:
            view = node.view()
            out = ["not master yet"] if node is new and node.role() != "master" else []
            if "fail" not in view[old.port].flags:
                out.append(f"sees {old.address} as {view[old.port].flags_text()}")
            if view[new.port].slots != slots:
                out.append(f"sees {new.address} owning {view[new.port].slots} (want {slots})")
            return out

        return self._settled_problems() + self._each_live(took_over)
