"""The kustomize overlays' claimed volumes (tests/unit/deploy/conftest.py renders each overlay)."""

from __future__ import annotations

from tests.unit.deploy.conftest import Obj


def test_claimed_volumes_change_group_once(objects: list[Obj]) -> None:
    """A StatefulSet with an ``fsGroup`` sets ``fsGroupChangePolicy: OnRootMismatch``: with the default
    (``Always``) each mount made every file of the volume group-readable, RabbitMQ's Erlang cookie among them,
    which Erlang then refuses (the broker crash-looped on its second start)."""
    checked = []
    for statefulset in (o for o in objects if o["kind"] == "StatefulSet"):
        context = statefulset["spec"]["template"]["spec"].get("securityContext", {})
        if "fsGroup" in context:
            assert context.get("fsGroupChangePolicy") == "OnRootMismatch", statefulset["metadata"]["name"]
            checked.append(statefulset["metadata"]["name"])
    assert "agent-signal-redis" in checked  # and RabbitMQ's, in its overlay
