"""Kubernetes' service-link variables (``enableServiceLinks``): the manifests turn them off
(test_manifests.py), and were they on again, a pod would still start inside Kubernetes and a typo outside it
would still be refused (worker/core/service_links.py)."""

from __future__ import annotations

import os

import pytest

from tests.unit.deploy.conftest import Obj, find
from tests.unit.deploy.test_manifests import WEB, _literal_env, _ours
from worker.runtime.assembly import section_models
from worker.settings import (
    OTHER_ENV_NAMES,
    Settings,
    SettingsError,
    check_environment,
    env_names,
    load_settings,
)


def _service_links(objects: list[Obj]) -> dict[str, str]:
    """The variables kubelet puts in every pod of the namespace for its Services when enableServiceLinks is on
    (pkg/kubelet/envvars): ``<SVC>_SERVICE_HOST``/``_SERVICE_PORT``/``_SERVICE_PORT_<NAME>`` and the Docker-links
    ``<SVC>_PORT``/``_PORT_<n>_<PROTO>``/``_PROTO``/``_PORT``/``_ADDR``; every Service as if it had a cluster IP
    (kubelet skips headless ones such as Redis's, which may not stay headless)."""
    env: dict[str, str] = {}
    for number, service in enumerate(o for o in objects if o["kind"] == "Service"):
        svc, ip = service["metadata"]["name"].upper().replace("-", "_"), f"10.96.0.{number + 10}"
        ports = service["spec"]["ports"]
        env |= {f"{svc}_SERVICE_HOST": ip, f"{svc}_SERVICE_PORT": str(ports[0]["port"])}
        for i, port in enumerate(ports):
            proto, n = port.get("protocol", "TCP"), port["port"]
            if port.get("name"):
                env[f"{svc}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(n)
            if i == 0:
                env[f"{svc}_PORT"] = f"{proto.lower()}://{ip}:{n}"
            prefix = f"{svc}_PORT_{n}_{proto}"
            env |= {prefix: f"{proto.lower()}://{ip}:{n}", f"{prefix}_PROTO": proto.lower()}
            env |= {f"{prefix}_PORT": str(n), f"{prefix}_ADDR": ip}
    return env


def test_service_links_would_not_stop_a_pod_inside_kubernetes(
    objects: list[Obj], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were service links on again, the Services' variables name no real setting and pass the check inside
    Kubernetes (KUBERNETES_SERVICE_HOST set), and are still refused as typos outside it."""
    links = _service_links(objects)
    assert "AGENT_SIGNAL_WEB_PORT" in links
    known = set(env_names(Settings)).union(*(env_names(m) for m in section_models()), OTHER_ENV_NAMES)
    assert not set(links) & known
    (web,) = _ours(find(objects, "Deployment", WEB))
    with monkeypatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENT_SIGNAL_")]:
            patch.delenv(name)
        for name, value in _literal_env(web).items():
            patch.setenv(name, value)
        settings = load_settings()
    environ = _literal_env(web) | links
    check_environment(settings, section_models(), environ | {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    with pytest.raises(SettingsError, match="unknown setting AGENT_SIGNAL_WEB_PORT; did you mean"):
        check_environment(settings, section_models(), environ)
