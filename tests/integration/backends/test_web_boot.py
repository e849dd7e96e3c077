"""``agent-signal web`` makes the app's boot checks (producers/http/app.py ``check_boot``) before uvicorn starts: an
evicting Redis, or function definitions that do not load, stop it with one line and exit 2, as ``agent-signal
worker`` stops (an audit: uvicorn printed an 80-line traceback of a failed startup, exit 3). The app it serves is
handed their result and does not make them again; an app built otherwise (an ASGI server, the tests) still makes
them at startup. ``web`` runs in this process, its uvicorn server's run replaced by a startup and shutdown of the app."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import producers.http.app as web_app
from producers.cli.main import main
from producers.http.app import create_web_app
from sessions.functions import FunctionLoadError
from tests.conftest import ROOT, free_port
from tests.support.private_redis import private_redis
from worker.settings import Settings, settings_environment

pytestmark = pytest.mark.integration

Web = Callable[[Settings], int]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[FastAPI]:
    """The apps ``agent-signal web`` handed to uvicorn's server, each started and stopped instead of served;
    logging is left as the test's (the command would configure it for the process)."""
    import uvicorn

    apps: list[FastAPI] = []

    def run(server: uvicorn.Server, **_: Any) -> None:
        app = server.config.app
        assert isinstance(app, FastAPI)
        apps.append(app)
        with TestClient(app):
            pass

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setattr("producers.http.serve.configure_logging", lambda **_: None)
    return apps


@pytest.fixture
def web(monkeypatch: pytest.MonkeyPatch, served: list[FastAPI]) -> Web:
    """``agent-signal web`` in this process, its environment that of ``settings`` alone; returns its exit code."""

    def call(settings: Settings) -> int:
        for name in [
            n for n in os.environ if n.startswith("AGENT_SIGNAL_") or n in ("REDIS_URL", "BROKER_URL")
        ]:
            monkeypatch.delenv(name)
        settings = settings.model_copy(update={"port": free_port()})  # the command binds it before its checks
        for name, value in settings_environment(settings).items():
            monkeypatch.setenv(name, value)
        return main(["web"])

    return call


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_an_evicting_redis_is_one_line(
    tmp_path: Path, make_settings: Any, web: Web, served: list[FastAPI], capsys: pytest.CaptureFixture[str]
) -> None:
    """allkeys-lru: the one line names the policy and the fix, exit 2, and nothing is served."""
    with private_redis(tmp_path, "--maxmemory-policy", "allkeys-lru") as url:
        assert web(make_settings(redis_url=url, telemetry_enabled=False)) == 2
    line = _one_line(capsys)
    assert line.startswith(
        "agent-signal web: UnsafeStore: refusing to start: Redis maxmemory-policy is allkeys-lru"
    )
    assert "AGENT_SIGNAL_ALLOW_EVICTING_REDIS" in line and served == []


def test_function_definitions_that_do_not_load_are_one_line(
    tmp_path: Path, make_settings: Any, web: Web, served: list[FastAPI], capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing directory, or a file whose front matter is no YAML: one line naming AGENT_SIGNAL_FUNCTIONS_DIR and
    the file, exit 2; an app built otherwise still refuses at startup (FunctionLoadError, as before)."""
    missing = make_settings(functions_dir=str(tmp_path / "nowhere"), telemetry_enabled=False)
    assert web(missing) == 2
    assert _one_line(capsys) == (
        f"agent-signal web: SettingsError: refusing to start: AGENT_SIGNAL_FUNCTIONS_DIR: {tmp_path / 'nowhere'}: "
        "not a directory"
    )
    (tmp_path / "broken.md").write_text("---\nname: x\ngate: [\n---\nbody\n")
    broken = make_settings(functions_dir=str(tmp_path), telemetry_enabled=False)
    assert web(broken) == 2
    line = _one_line(capsys)
    assert line.startswith("agent-signal web: SettingsError: refusing to start: AGENT_SIGNAL_FUNCTIONS_DIR: ")
    assert f"{tmp_path / 'broken.md'}:" in line and served == []
    with pytest.raises(FunctionLoadError), TestClient(create_web_app(broken)):
        pass


def test_a_plugin_services_factory_that_raises_is_one_line(
    make_settings: Any, web: Web, served: list[FastAPI], capsys: pytest.CaptureFixture[str]
) -> None:
    """The app's producer builds the plugins' services; built at the app's startup, a factory that raised was
    uvicorn's traceback of a failed startup (its last line the PluginLoadError). ``web`` builds it before
    serving now: one line naming the plugin and the field, exit 2, nothing served."""
    settings = make_settings(plugins=["tests.plugins.broken_services:plugin"], telemetry_enabled=False)
    assert web(settings) == 2
    assert _one_line(capsys) == (
        "agent-signal web: PluginLoadError: plugin 'broken-services': services(runtime) raised RuntimeError: "
        "the ledger database is down"
    )
    assert served == []


def test_the_checks_are_made_once(
    make_settings: Any, web: Web, served: list[FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before serving, the app starts on that result: one check (one Redis round trip, one read of the
    definitions) per start, and the definitions are the ones checked."""
    calls: list[Settings] = []
    check_boot = web_app.check_boot

    def counted(settings: Settings) -> web_app.BootChecks:
        calls.append(settings)
        return check_boot(settings)

    monkeypatch.setattr(web_app, "check_boot", counted)
    functions = str(ROOT / "examples" / "functions")
    assert web(make_settings(functions_dir=functions, telemetry_enabled=False)) == 0
    (app,) = served
    assert len(calls) == 1 and app.state.function_defs
    other = create_web_app(calls[0])  # an app built otherwise makes them at its own startup
    with TestClient(other):
        assert other.state.function_defs.keys() == app.state.function_defs.keys()
    assert len(calls) == 2
