"""A private RabbitMQ virtual host for one test run: its queues, exchanges and messages are invisible to
every other run on the shared broker (127.0.0.1:5672, used by every engineer and CI on the machine).

    with private_vhost() as url:        # amqp://guest:guest@127.0.0.1:5672/agent-signal-test-<pid>-<hex>
        settings = make_settings(broker_url=url)

AMQP cannot create a vhost and the management plugin is not enabled on these machines, so ``rabbitmqctl``
does it (it needs the broker's Erlang cookie, which root has here). A run killed before its cleanup leaves
its vhost behind; the next run deletes every ``agent-signal-test-<pid>-…`` vhost whose pid is not alive.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from worker.runtime.embedded import pid_alive

__all__ = ["VHOST_PREFIX", "private_vhost", "rabbitmq_reachable", "sweep_stale_vhosts", "vhost_names"]

HOST = "127.0.0.1"
PORT = 5672
VHOST_PREFIX = "agent-signal-test-"
_OURS = re.compile(rf"^{VHOST_PREFIX}(\d+)-[0-9a-f]+$")


def rabbitmq_reachable(host: str = HOST, port: int = PORT) -> bool:
    """Whether something accepts TCP connections on the broker's port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _rabbitmqctl(*args: str) -> str:
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def vhost_names() -> list[str]:
    """Every vhost on the broker."""
    return _rabbitmqctl("list_vhosts", "--quiet", "--no-table-headers").split()

    return True


def sweep_stale_vhosts() -> list[str]:
    """Delete the test vhosts whose creating process is gone; returns their names."""
    stale = [name for name in vhost_names() if (m := _OURS.match(name)) and not pid_alive(int(m[1]))]
    for name in stale:
        try:
            _rabbitmqctl("delete_vhost", name)
        except RuntimeError:
            # another xdist worker's sweep listed it too and deleted it first: gone is what we wanted
            if name in vhost_names():
                raise
    return stale


@contextmanager
def private_vhost(user: str = "guest", password: str = "guest") -> Iterator[str]:
    """Create a vhost that ``user`` may use fully, yield its ``amqp://`` URL, and delete it (with everything
    in it) after."""
    sweep_stale_vhosts()
    name = f"{VHOST_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", name)
    try:
        _rabbitmqctl("set_permissions", "-p", name, user, ".*", ".*", ".*")
        yield f"amqp://{user}:{password}@{HOST}:{PORT}/{name}"
    finally:
        _rabbitmqctl("delete_vhost", name)
