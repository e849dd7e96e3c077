"""Rendering deploy/k8s once per overlay (``kubectl kustomize``), and helpers to walk the rendered objects."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("redis-broker", "rabbitmq-broker")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

Obj = dict[str, Any]


@functools.cache
def _render(directory: str) -> tuple[Obj, ...]:
    done = subprocess.run(
        [KUBECTL, "kustomize", directory], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(overlay: str) -> list[Obj]:
    """The objects of ``deploy/k8s/overlays/<overlay>``; skips when kubectl is not installed."""
    if not Path(KUBECTL).exists():
        pytest.skip(f"kubectl is not installed ({KUBECTL}): the kustomize overlays cannot be rendered")
    return list(_render(str(K8S / "overlays" / overlay)))


@pytest.fixture(params=OVERLAYS)
def objects(request: pytest.FixtureRequest) -> list[Obj]:
    """Every object one overlay renders (the test runs once per overlay)."""
    return render(str(request.param))


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(obj: Obj) -> Obj | None:
    """The pod template's spec of a workload (Deployment, StatefulSet, CronJob); None for other kinds."""
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return dict(obj["spec"]["template"]["spec"])
    if obj["kind"] == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return None


def containers(obj: Obj) -> Iterator[Obj]:
    spec = pod_spec(obj) or {}
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


def env_of(container: Obj) -> dict[str, Obj]:
    """``{name: env entry}`` of a container."""
    return {entry["name"]: entry for entry in container.get("env", [])}
