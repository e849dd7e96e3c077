"""deploy/ mirrors the Procfile (there is no Docker engine here, so the files are parsed, not run)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip():
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def test_procfile_has_web_and_worker() -> None:
    """The Procfile runs the two contract commands."""
    assert _procfile() == {"web": "agent-signal web", "worker": "agent-signal worker"}


def test_compose_mirrors_procfile() -> None:
    """compose.yaml has web, worker and redis; web and worker run the Procfile's commands against that redis."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"web", "worker", "redis"}
    for name, command in _procfile().items():
        assert " ".join(services[name]["command"]) == command
        assert services[name]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert "noeviction" in services["redis"]["command"]


def test_dockerfile_installs_the_package_and_copies_every_source_folder() -> None:
    """The image installs the project and contains the three source folders."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    copied = {parts[1] for parts in lines if parts[0] == "COPY"}
    assert {"worker", "producers", "policies", "sessions", "pyproject.toml"} <= copied
    assert ["RUN", "pip", "install", "--no-cache-dir", "--no-deps", "--no-build-isolation", "."] in lines
    assert any(parts[0] == "FROM" and parts[1].startswith("python:3.11") for parts in lines)


def test_grafana_dashboard_queries_series_we_export() -> None:
    """Every metric a dashboard panel queries is one the product exports (names from the code)."""
    import json
    import re

    from worker.telemetry.process_metrics import LABELS

    dashboard = json.loads((ROOT / "deploy" / "grafana" / "agent-signal.json").read_text())
    state = (ROOT / "worker" / "ops" / "state_metrics.py").read_text()
    exported = set(LABELS) | set(re.findall(r'"(agent_signal_[a-z_]+)"', state))
    titles = {p["title"] for p in dashboard["panels"]}
    assert {
        "Events by status (per second)",
        "Chain duration and enqueue-to-done latency (p50 / p99, ms)",
        "Dead letters: events, and outbound calls that failed every attempt",
    } <= titles
    # accepted counts what the door admitted and what the service enqueued itself (done + dead never exceed it)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert 'sum by (origin) (rate(agent_signal_events_total{status="accepted"}[5m]))' in exprs
    assert "origin" in LABELS["agent_signal_events_total"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"agent_signal_[a-z_]+", re.sub(r"by \([^)]*\)", "", target["expr"])):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert base in exported, f"{panel['title']}: {name} is not exported"
