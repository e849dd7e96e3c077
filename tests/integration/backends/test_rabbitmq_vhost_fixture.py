"""The private RabbitMQ vhost: usable by guest, invisible from the default vhost, and gone after."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from kombu.connection import Connection

from tests.support.rabbitmq_vhost import (
    VHOST_PREFIX,
    private_vhost,
    rabbitmq_reachable,
    sweep_stale_vhosts,
    vhost_names,
)

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not rabbitmq_reachable(),
        reason="no RabbitMQ on 127.0.0.1:5672 (the python-svc machines and CI run one)",
    ),
]


def test_a_message_sent_in_the_private_vhost_stays_there(rabbitmq_url: str) -> None:
    """A queue declared in the run's vhost carries a message and does not exist in the default vhost."""
    queue = f"fixture-{uuid.uuid4().hex[:8]}"
    with Connection(rabbitmq_url) as conn:  # type: ignore[no-untyped-call]
        simple = conn.SimpleQueue(queue)
        simple.put({"hello": "vhost"})
        assert simple.get(timeout=5).payload == {"hello": "vhost"}
        simple.close()

    with Connection("amqp://guest:guest@127.0.0.1:5672//") as root:  # type: ignore[no-untyped-call]
        with pytest.raises(root.channel_errors):
            root.default_channel.queue_declare(queue=queue, passive=True)


def test_the_vhost_is_deleted_on_exit() -> None:
    """Leaving private_vhost() deletes the vhost it created."""
    with private_vhost() as url:
        name = url.rsplit("/", 1)[1]
        assert name in vhost_names()

    assert name not in vhost_names()


def test_vhosts_left_by_a_dead_run_are_swept() -> None:
    """A test vhost named after a pid that no longer runs is deleted when the next one is made; a live
    run's vhost is kept by the sweep."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"{VHOST_PREFIX}{gone.pid}-{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "add_vhost", stale], check=True, capture_output=True)
    try:
        with private_vhost() as url:
            mine = url.rsplit("/", 1)[1]
            assert mine.startswith(f"{VHOST_PREFIX}{os.getpid()}-")
            assert stale not in vhost_names()
            assert sweep_stale_vhosts() == [] and mine in vhost_names()
    finally:
        if stale in vhost_names():
            subprocess.run(["rabbitmqctl", "delete_vhost", stale], check=True, capture_output=True)
