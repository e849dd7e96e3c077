"""deploy/k8s: both overlays render, every object is valid offline against Kubernetes' and KEDA's schemas, and
what the manifests say agrees with the code (settings, CLI verbs, the names the web app answers to)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from policies.self_iteration.payloads import LOBEHUB_SOURCE_TYPES, NightlyReviewPayload
from producers.cli.main import build_parser
from producers.http.routes.ops import router as ops_router
from tests.unit.deploy.conftest import (
    ROOT,
    Obj,
    containers,
    env_of,
    find,
    pod_spec,
    render,
)
from worker.core.source_types import SourceTypePolicy
from worker.intake.source_event import parse_event
from worker.runtime.assembly import section_models
from worker.runtime.heartbeat_file import default_max_age_s
from worker.settings import (
    OTHER_ENV_NAMES,
    Settings,
    check_environment,
    env_names,
    load_settings,
)

# The oldest Kubernetes we support (CronJob timeZone is GA in 1.27) and the newest the package knows.
K8S_VERSIONS = ("1.29", kubernetes_validate.latest_version())
SCHEMAS = Path(__file__).parent / "schemas"
KEDA_CRDS = {
    "ScaledObject": "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": "keda.sh_triggerauthentications.yaml",
}
GRACE_MARGIN_S = 20  # the preStop, the final acks and the pool's join on top of the hard task time limit
IMAGE = "agent-signal"
WEB, WORKER = "agent-signal-web", "agent-signal-worker"


def _is_keda(obj: Obj) -> bool:
    return str(obj["apiVersion"]).startswith("keda.sh/")


def _strict(schema: Any) -> Any:
    """A CRD schema that rejects unknown fields, as the API server's strict field validation does."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _keda_schema(kind: str) -> Any:
    crd = yaml.safe_load((SCHEMAS / KEDA_CRDS[kind]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is the API server's, not the CRD's
    return schema


def _validate_keda(obj: Obj) -> None:
    jsonschema.validate(obj, _keda_schema(obj["kind"]))


def _exec_commands(obj: Obj) -> list[list[str]]:
    """Every exec probe and lifecycle hook command of ``obj``'s containers."""
    found = []
    for container in containers(obj):
        for key in ("startupProbe", "livenessProbe", "readinessProbe"):
            if "exec" in container.get(key, {}):
                found.append(container[key]["exec"]["command"])
        for hook in container.get("lifecycle", {}).values():
            if "exec" in hook:
                found.append(hook["exec"]["command"])
    return found


def _ours(obj: Obj) -> list[Obj]:
    """The containers running our image."""
    return [c for c in containers(obj) if re.split(r"[:@]", c["image"])[0] == IMAGE]


def _expand(value: str) -> str:
    """``$(VAR)`` references as Kubernetes would expand them, with stand-in values."""
    return re.sub(r"\$\(([A-Z_]+)\)", lambda m: {"POD_IP": "10.1.2.3"}.get(m[1], "secret"), value)


# A secret's stand-in shaped like the value docs/operations.md puts in it (a broker URL's scheme is checked at load).
SECRET_STAND_INS = {"BROKER_URL": "amqp://agent-signal:secret@agent-signal-rabbitmq:5672//"}


def _literal_env(container: Obj) -> dict[str, str]:
    """The container's environment, secrets and field references replaced by stand-ins."""
    return {
        name: _expand(entry["value"])
        if "value" in entry
        else SECRET_STAND_INS.get(name, "stand-in-secret-0123456789")
        for name, entry in env_of(container).items()
    }


def _allowed_hosts(objects: list[Obj]) -> list[str]:
    (web,) = _ours(find(objects, "Deployment", WEB))
    return list(json.loads(_literal_env(web)["AGENT_SIGNAL_ALLOWED_HOSTS"]))


class TestSchemas:
    def test_every_object_is_valid_against_kubernetes_schemas(self, objects: list[Obj]) -> None:
        """Every built-in object passes the strict schema of the oldest and the newest Kubernetes we target."""
        for obj in objects:
            if _is_keda(obj):
                continue
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)

    def test_keda_objects_are_valid_against_the_vendored_crds(self, objects: list[Obj]) -> None:
        """The ScaledObject and TriggerAuthentication pass KEDA's CRD schemas, unknown fields refused."""
        keda = [obj for obj in objects if _is_keda(obj)]
        assert sorted(o["kind"] for o in keda) == ["ScaledObject", "TriggerAuthentication"]
        for obj in keda:
            _validate_keda(obj)

    def test_the_validators_refuse_a_broken_object(self, objects: list[Obj]) -> None:
        """A misspelt field fails both validators, so the two tests above can fail."""
        worker = copy.deepcopy(find(objects, "Deployment", WORKER))
        worker["spec"]["template"]["spec"]["terminationGracePeriod"] = 360
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(worker, K8S_VERSIONS[0], strict=True)
        scaled = copy.deepcopy(find(objects, "ScaledObject", WORKER))
        scaled["spec"]["minReplicas"] = 1
        with pytest.raises(jsonschema.ValidationError):
            _validate_keda(scaled)


class TestPods:
    def test_every_container_has_requests_and_limits(self, objects: list[Obj]) -> None:
        """CPU and memory requests and limits on every container, requests within limits for memory."""
        for obj in objects:
            for container in containers(obj):
                resources = container.get("resources", {})
                where = f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}"
                for part in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources.get(part, {})), f"{where}: {part}"

    def test_every_container_is_locked_down(self, objects: list[Obj]) -> None:
        """Non-root by uid, read-only root filesystem, no privilege escalation, no capabilities, seccomp."""
        for obj in objects:
            spec = pod_spec(obj)
            if spec is None:
                continue
            pod = spec.get("securityContext", {})
            assert pod.get("runAsNonRoot") is True and pod.get("runAsUser", 0) > 0, obj["metadata"]["name"]
            assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}
            assert spec.get("automountServiceAccountToken") is False
            for container in containers(obj):
                context = container.get("securityContext", {})
                assert context.get("allowPrivilegeEscalation") is False, container["name"]
                assert context.get("readOnlyRootFilesystem") is True, container["name"]
                assert context.get("capabilities") == {"drop": ["ALL"]}, container["name"]

    def test_read_only_containers_have_a_writable_tmp(self, objects: list[Obj]) -> None:
        """/tmp is an emptyDir wherever our image runs (temp files, metric files, the heartbeat file)."""
        for obj in objects:
            spec = pod_spec(obj) or {}
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for container in _ours(obj):
                mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
                assert "emptyDir" in volumes[mounts["/tmp"]], container["name"]

    def test_long_running_containers_have_probes(self, objects: list[Obj]) -> None:
        """Liveness and readiness on every Deployment and StatefulSet container; the worker has a startup probe."""
        for obj in objects:
            if obj["kind"] in ("Deployment", "StatefulSet"):
                for container in containers(obj):
                    assert {"livenessProbe", "readinessProbe"} <= set(container), container["name"]
        (worker,) = _ours(find(objects, "Deployment", WORKER))
        assert "startupProbe" in worker

    def test_probe_and_hook_commands_are_real_cli_verbs(self, objects: list[Obj]) -> None:
        """Every ``agent-signal …`` a probe or hook runs parses with the CLI's own parser."""
        commands = [c for obj in objects for c in _exec_commands(obj) if c[0] == "agent-signal"]
        assert ["agent-signal", "drain"] in commands
        assert ["agent-signal", "probe", "web", "--without-broker", "--timeout-s", "4"] in commands
        for command in commands:
            build_parser().parse_args(
                command[1:]
            )  # an unknown verb or flag exits (SystemExit fails the test)

    def test_worker_probes_read_the_heartbeat_file_and_drain_first(self, objects: list[Obj]) -> None:
        """The worker's probes read the heartbeat file under /tmp; readiness honours draining, liveness does not."""
        (worker,) = _ours(find(objects, "Deployment", WORKER))
        assert worker["lifecycle"]["preStop"]["exec"]["command"] == ["agent-signal", "drain"]
        assert worker["readinessProbe"]["exec"]["command"] == ["agent-signal", "probe", "worker"]
        for probe in ("startupProbe", "livenessProbe"):
            assert worker[probe]["exec"]["command"] == ["agent-signal", "probe", "worker", "--liveness"]
        assert env_of(worker)["AGENT_SIGNAL_HEARTBEAT_FILE"]["value"].startswith("/tmp/")
        settings = Settings()
        # The startup probe waits longer than one stale period; a beat is stale after several intervals.
        startup = worker["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] > default_max_age_s(
            settings.reconcile_interval_s
        )
        assert default_max_age_s(settings.reconcile_interval_s) >= 2 * settings.reconcile_interval_s

    def test_worker_grace_period_covers_the_task_time_limits(self, objects: list[Obj]) -> None:
        """terminationGracePeriodSeconds >= the hard (and so the soft) task time limit plus a margin."""
        settings = Settings()
        spec = pod_spec(find(objects, "Deployment", WORKER))
        assert spec is not None
        grace = spec["terminationGracePeriodSeconds"]
        assert grace >= settings.task_soft_time_limit_s + GRACE_MARGIN_S
        assert grace >= settings.task_time_limit_s + GRACE_MARGIN_S

    def test_environment_is_what_the_settings_accept(
        self, objects: list[Obj], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each of our containers' environment loads as Settings (and the door's and sessions' sections) and
        passes the unknown-variable check."""
        for obj in objects:
            for container in _ours(obj):
                env = _literal_env(container)
                known = set(env_names(Settings)).union(*(env_names(m) for m in section_models()))
                unknown = {n for n in env if n.startswith("AGENT_SIGNAL_") and n not in known}
                assert unknown <= OTHER_ENV_NAMES, f"{container['name']}: unknown {unknown - OTHER_ENV_NAMES}"
                with monkeypatch.context() as patch:
                    for name in [n for n in os.environ if n.startswith("AGENT_SIGNAL_")]:
                        patch.delenv(name)
                    for name, value in env.items():
                        patch.setenv(name, value)
                    check_environment(load_settings(), section_models())

    def test_no_pod_gets_service_link_variables(self, objects: list[Obj]) -> None:
        """enableServiceLinks is off in every pod: kubelet's AGENT_SIGNAL_WEB_PORT & co. for the Services
        agent-signal-web/-redis/-rabbitmq are unknown AGENT_SIGNAL_* names, which stopped every pod at boot."""
        specs = [(obj, pod_spec(obj)) for obj in objects]
        specs = [(obj, spec) for obj, spec in specs if spec is not None]
        assert len(specs) >= 4  # web, worker, Redis, the CronJob (and RabbitMQ)
        for obj, spec in specs:
            assert spec.get("enableServiceLinks") is False, f"{obj['kind']}/{obj['metadata']['name']}"

    def test_web_answers_to_the_names_it_is_reached_by(self, objects: list[Obj]) -> None:
        """KEDA's and the CronJob's URLs name the web Service, its port, and hosts the web app serves."""
        service = find(objects, "Service", WEB)
        namespace = service["metadata"]["namespace"]
        (port,) = [p["port"] for p in service["spec"]["ports"]]
        hosts = _allowed_hosts(objects)
        assert "10.1.2.3" in hosts  # $(POD_IP): Prometheus scrapes the pod's address
        scaled = find(objects, "ScaledObject", WORKER)
        cron = find(objects, "CronJob", "agent-signal-nightly-review")
        (enqueue,) = _ours(cron)
        urls = [trigger["metadata"]["url"] for trigger in scaled["spec"]["triggers"]]
        urls.append(env_of(enqueue)["AGENT_SIGNAL_URL"]["value"])
        for url in urls:
            parts = urlsplit(url)
            assert parts.hostname in hosts, url
            assert parts.port == port, url
            name, _, rest = str(parts.hostname).partition(".")
            assert name == WEB and (not rest or rest.split(".")[0] == namespace), url

    def test_prometheus_annotations_name_declared_ports(self, objects: list[Obj]) -> None:
        """Both pods are scraped on a port they declare; the worker's is its metrics port setting."""
        for name, port_name in ((WEB, "http"), (WORKER, "metrics")):
            deployment = find(objects, "Deployment", name)
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true"
            (container,) = _ours(deployment)
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert int(annotations["prometheus.io/port"]) == ports[port_name]
        (worker,) = _ours(find(objects, "Deployment", WORKER))
        port = int(env_of(worker)["AGENT_SIGNAL_WORKER_METRICS_PORT"]["value"])
        assert port == 9808 == {p["name"]: p["containerPort"] for p in worker["ports"]}["metrics"]


class TestScaling:
    def test_keda_scales_the_worker_on_the_backlog(self, objects: list[Obj]) -> None:
        """A metrics-api trigger reads eventsRunnable from /v1/backlog with a bearer from the Secret."""
        scaled = find(objects, "ScaledObject", WORKER)
        assert scaled["spec"]["scaleTargetRef"]["name"] == WORKER
        assert scaled["spec"]["minReplicaCount"] >= 1  # workers also sweep, relay and retry
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["type"] == "metrics-api"
        meta = trigger["metadata"]
        assert meta["valueLocation"] == "eventsRunnable"
        assert urlsplit(meta["url"]).path == "/v1/backlog"
        assert "/v1/backlog" in {getattr(route, "path", None) for route in ops_router.routes}
        assert meta["authMode"] == "bearer" and float(meta["targetValue"]) > 0
        auth = find(objects, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        (secret,) = auth["spec"]["secretTargetRef"]
        assert secret["parameter"] == "token" and secret["name"] == "agent-signal"
        for name in (WEB, WORKER):  # the autoscalers own the counts
            assert "replicas" not in find(objects, "Deployment", name)["spec"]

    def test_web_scales_on_cpu(self, objects: list[Obj]) -> None:
        """The web HPA targets the web Deployment's CPU utilisation, which its CPU request makes defined."""
        hpa = find(objects, "HorizontalPodAutoscaler", WEB)
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": WEB}
        assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
        assert hpa["spec"]["minReplicas"] >= 2

    def test_disruption_budgets_select_web_and_worker_pods(self, objects: list[Obj]) -> None:
        """Each PodDisruptionBudget selects the pods of exactly its Deployment."""
        for name in (WEB, WORKER):
            selector = find(objects, "PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"]
            selected = [
                o["metadata"]["name"]
                for o in objects
                if pod_spec(o) is not None
                and o["kind"] != "CronJob"
                and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert selected == [name]


class TestStores:
    def test_redis_keeps_an_append_only_file_and_never_evicts(self, objects: list[Obj]) -> None:
        """AOF every second, noeviction, maxmemory under the memory limit, data on a claimed volume."""
        conf = find(objects, "ConfigMap", "agent-signal-redis")["data"]["redis.conf"]
        lines = {
            line.split()[0]: line.split(None, 1)[1] for line in conf.splitlines() if line and line[0] != "#"
        }
        assert lines["appendonly"] == "yes" and lines["appendfsync"] == "everysec"
        assert lines["maxmemory-policy"] == "noeviction"
        redis = find(objects, "StatefulSet", "agent-signal-redis")
        (container,) = containers(redis)
        assert container["command"][-1].endswith(
            "exec redis-server /etc/redis/redis.conf --aclfile /tmp/users.acl"
        )
        limit_mib = int(container["resources"]["limits"]["memory"].removesuffix("Gi")) * 1024
        assert int(lines["maxmemory"].removesuffix("mb")) < limit_mib
        assert [t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]] == ["data"]

    @pytest.mark.parametrize("overlay", ["redis-broker", "rabbitmq-broker"])
    def test_each_overlay_has_its_broker(self, overlay: str) -> None:
        """redis-broker: no BROKER_URL; rabbitmq-broker: a RabbitMQ StatefulSet and quorum queues for both."""
        objects = render(overlay)
        for name in (WEB, WORKER):
            (container,) = _ours(find(objects, "Deployment", name))
            env = env_of(container)
            if overlay == "redis-broker":
                assert "BROKER_URL" not in env and "AGENT_SIGNAL_QUORUM_QUEUES" not in env
            else:
                assert env["BROKER_URL"]["valueFrom"]["secretKeyRef"]["name"] == "agent-signal-rabbitmq"
                assert env["AGENT_SIGNAL_QUORUM_QUEUES"]["value"] == "true"
        rabbit = [o for o in objects if o["kind"] == "StatefulSet" and "rabbitmq" in o["metadata"]["name"]]
        assert len(rabbit) == (overlay == "rabbitmq-broker")
        for statefulset in rabbit:
            assert statefulset["spec"]["volumeClaimTemplates"]


class TestNightlyReview:
    def _script(self, objects: list[Obj], tmp_path: Path) -> Path:
        cron = find(objects, "CronJob", "agent-signal-nightly-review")
        spec = pod_spec(cron)
        assert spec is not None
        (volume,) = [v for v in spec["volumes"] if "configMap" in v]
        data = find(objects, "ConfigMap", volume["configMap"]["name"])["data"]
        assert json.loads(data["agents.json"]) == []  # the operator lists the agents
        script = tmp_path / "nightly_review_events.py"
        script.write_text(data["nightly_review_events.py"])
        return script

    def test_cronjob_enqueues_once_a_night(self, objects: list[Obj]) -> None:
        """Daily, never two at once, and the command feeds the generated events to agent-signal enqueue."""
        cron = find(objects, "CronJob", "agent-signal-nightly-review")
        minute, hour, *rest = cron["spec"]["schedule"].split()
        assert minute.isdigit() and hour.isdigit() and rest == ["*", "*", "*"]
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        (container,) = _ours(cron)
        command = " ".join(container["command"])
        assert "nightly_review_events.py" in command and "agent-signal enqueue" in command
        assert env_of(container)["AGENT_SIGNAL_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "ingest-token"

    def test_events_are_valid_and_rerun_to_the_same_ids(self, objects: list[Obj], tmp_path: Path) -> None:
        """Two runs for one night give the same sourceIds; each event is valid and shaped like the example."""
        script = self._script(objects, tmp_path)
        agents = tmp_path / "agents.json"
        agents.write_text(
            json.dumps([{"userId": "u1", "agentId": "agt_1"}, {"userId": "u2", "agentId": "a2"}])
        )
        argv = [sys.executable, str(script), "--agents", str(agents), "--date", "2026-11-29"]
        runs = [
            [
                json.loads(line)
                for line in subprocess.run(
                    argv, capture_output=True, text=True, check=True
                ).stdout.splitlines()
            ]
            for _ in range(2)
        ]
        assert (
            [e["sourceId"] for e in runs[0]]
            == [e["sourceId"] for e in runs[1]]
            == [
                "nightly-review:u1:agt_1:2026-11-29",
                "nightly-review:u2:a2:2026-11-29",
            ]
        )
        example = next(
            json.loads(line)
            for line in (ROOT / "examples" / "events.jsonl").read_text().splitlines()
            if "agent.nightly_review.requested" in line
        )
        for event in runs[
            0
        ]:  # what the door checks: the source type is declared and its payload schema holds
            parse_event(event, SourceTypePolicy(extra=LOBEHUB_SOURCE_TYPES))
            NightlyReviewPayload.model_validate(event["payload"])
            assert set(event) == set(example) and set(event["payload"]) == set(example["payload"])
        assert runs[0][0]["payload"] | {"requestedAt": 0} == example["payload"] | {"requestedAt": 0}


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def _labels(obj: Obj) -> dict[str, str]:
    """The pod labels of a workload."""
    if obj["kind"] == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"])
    return dict(obj["spec"]["template"]["metadata"]["labels"])


def _policies(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


def _selects(policy: Obj, labels: dict[str, str]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return bool(wanted.items() <= labels.items())


def _component(objects: list[Obj], component: str) -> list[Obj]:
    """The policies that name ``component``'s pods (the default deny and DNS select every pod: not these)."""
    labels = {"app.kubernetes.io/name": "agent-signal", "app.kubernetes.io/component": component}
    return [p for p in _policies(objects) if p["spec"]["podSelector"] and _selects(p, labels)]


def _ingress_ports(policy: Obj) -> list[tuple[int, list[Obj]]]:
    return [
        (port["port"], rule.get("from", []))
        for rule in policy["spec"].get("ingress", [])
        for port in rule["ports"]
    ]


class TestNetwork:
    def test_everything_is_denied_unless_a_policy_opens_it(self, objects: list[Obj]) -> None:
        """One policy selects every pod for both directions and opens nothing."""
        deny = [
            p
            for p in _policies(objects)
            if p["spec"]["podSelector"] == {}
            and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
            and not p["spec"].get("ingress")
            and not p["spec"].get("egress")
        ]
        assert len(deny) == 1

    def test_every_workload_has_a_network_policy_of_its_own(self, objects: list[Obj]) -> None:
        """Each Deployment, StatefulSet and CronJob is selected by a policy that names its component."""
        for obj in objects:
            if pod_spec(obj) is None:
                continue
            labels = _labels(obj)
            own = [p for p in _policies(objects) if p["spec"]["podSelector"] and _selects(p, labels)]
            assert own, f"{obj['kind']}/{obj['metadata']['name']} has no NetworkPolicy of its own"

    def test_metrics_ports_admit_only_the_monitoring_namespace(self, objects: list[Obj]) -> None:
        """The worker's metrics port (tenant-labelled, no credential) is open to the monitoring namespace
        alone and to nothing else; the worker binds it on the pod's address, not every interface."""
        (worker,) = _ours(find(objects, "Deployment", WORKER))
        port = int(env_of(worker)["AGENT_SIGNAL_WORKER_METRICS_PORT"]["value"])
        assert env_of(worker)["AGENT_SIGNAL_WORKER_METRICS_HOST"]["value"] == "$(POD_IP)"
        assert env_of(worker)["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        rules = [rule for policy in _component(objects, "worker") for rule in _ingress_ports(policy)]
        assert rules and all(p == port for p, _ in rules), rules  # nothing else of the worker is reachable
        for _, peers in rules:
            assert peers == [{"namespaceSelector": {"matchLabels": MONITORING}}], peers

    def test_the_stores_admit_only_web_and_worker(self, objects: list[Obj]) -> None:
        """Redis (and RabbitMQ, where it runs) take connections from web and worker pods on their port only;
        web and worker may reach them."""
        stores = {"redis": 6379, "rabbitmq": 5672}
        for component, port in stores.items():
            present = [
                o
                for o in objects
                if pod_spec(o) and _labels(o).get("app.kubernetes.io/component") == component
            ]
            if not present:
                continue
            rules = [rule for policy in _component(objects, component) for rule in _ingress_ports(policy)]
            assert rules, component
            for rule_port, peers in rules:
                assert rule_port == port
                sources = {
                    peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in peers
                }
                assert sources == {"web", "worker"} and all(set(peer) == {"podSelector"} for peer in peers)
            for client in ("web", "worker"):
                egress = [rule for p in _component(objects, client) for rule in p["spec"].get("egress", [])]
                assert any(
                    {"protocol": "TCP", "port": port} in rule["ports"]
                    and any(
                        peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
                        == component
                        for peer in rule["to"]
                    )
                    for rule in egress
                ), (client, component)

    def test_web_admits_the_ingress_controller_keda_monitoring_and_the_cronjob(
        self, objects: list[Obj]
    ) -> None:
        """Who reaches the web port: the ingress controller's, KEDA's and the monitoring namespaces and the
        nightly CronJob's pods."""
        (policy,) = _component(objects, "web")
        ((port, peers),) = _ingress_ports(policy)
        assert port == 8000
        namespaces = {
            p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for p in peers
            if "namespaceSelector" in p
        }
        pods = {
            p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for p in peers
            if "podSelector" in p
        }
        assert namespaces == {"ingress-nginx", "keda", "monitoring"} and pods == {"nightly-review"}


class TestSupplyChain:
    def test_every_image_is_pinned_by_digest(self, objects: list[Obj]) -> None:
        """No container names an image by tag alone: a tag can be moved to other bytes, a digest cannot."""
        images = [c["image"] for obj in objects for c in containers(obj)]
        assert images and [i for i in images if not DIGEST.search(i)] == []


class TestRedisUsers:
    def _acl(self, objects: list[Obj]) -> list[str]:
        return str(find(objects, "ConfigMap", "agent-signal-redis")["data"]["app.acl"]).split()

    def test_the_app_connects_as_its_own_user_never_default(self, objects: list[Obj]) -> None:
        """web and worker use Redis's `agent-signal` user with its own password; Redis turns `default` off."""
        for name in (WEB, WORKER):
            (container,) = _ours(find(objects, "Deployment", name))
            url = urlsplit(_literal_env(container)["REDIS_URL"])
            assert url.username == "agent-signal" and url.password, url
            secret = env_of(container)["REDIS_APP_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert secret == {"name": "agent-signal", "key": "redis-app-password"}
        (redis,) = containers(find(objects, "StatefulSet", "agent-signal-redis"))
        assert "user default off" in redis["command"][-1] and "--requirepass" not in redis["command"][-1]

    def test_the_apps_acl_covers_its_key_prefix_only(self, objects: list[Obj]) -> None:
        """Keys and channels: the app's key prefix (the broker's keys and channels are under it) and nothing
        else; no dangerous or administrative command but the two read at boot."""
        rules = self._acl(objects)
        prefix = Settings().key_prefix  # the manifests do not set AGENT_SIGNAL_KEY_PREFIX
        for container in [c for obj in objects for c in _ours(obj)]:
            assert "AGENT_SIGNAL_KEY_PREFIX" not in env_of(container)
        assert [r for r in rules if r.startswith("~")] == [f"~{prefix}*"]
        assert [r for r in rules if r.startswith("&")] == [f"&{prefix}*", f"&{prefix}broker:/0.celery.pidbox"]
        assert rules[:2] == ["resetkeys", f"~{prefix}*"] and "resetchannels" in rules
        assert {"-@dangerous", "-@admin"} <= set(rules)
        assert [r for r in rules if r.startswith("+") and r != "+@all"] == ["+info", "+config|get"]

    def test_keda_reads_the_backlog_with_a_metrics_key(self, objects: list[Obj]) -> None:
        """The TriggerAuthentication's bearer is the Secret's metrics-token (a key of the `metrics` role)."""
        (secret,) = find(objects, "TriggerAuthentication", "agent-signal-backlog")["spec"]["secretTargetRef"]
        assert secret == {"parameter": "token", "name": "agent-signal", "key": "metrics-token"}
