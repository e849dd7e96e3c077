"""What a CLI command imports before it runs: not the web framework, and for a verb over HTTP not the engine.
Every ``agent-signal`` call starts a Python process whose start is mostly imports; FastAPI's (its OpenAPI models
above all) was about 165 ms of a command's 1.1 s, for commands that never serve a request. Only ``agent-signal
web`` and ``run`` need it. redis, the settings' models, the event model and the store were another ~0.45 s of CPU
of every console verb, which sends one HTTP request."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, SettingsFactory, free_port, settings_env

# the CLI's modules every command's parser loads, and the ones `route`, `check`/`simulate` and `enqueue` load to run
MODULES = (
    "producers.cli.main",
    "producers.cli.route",
    "producers.cli.functions",
    "producers.cli.enqueue.lines",
    "producers.cli.enqueue",
)


def test_a_cli_command_does_not_import_the_web_framework() -> None:
    """Checked in a fresh interpreter (this test process has imported FastAPI long since), one per module: each
    would otherwise hide what an earlier import pulled in."""
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    web = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('fastapi', 'starlette'))\n"
        "    print(name, web)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{name} []" for name in MODULES], result.stdout


def _imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` says the process imported."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "import time:" in line}


# what a verb over HTTP never needs: the Redis client, the settings' models, the event model, the engine's store
ENGINE = {
    "redis",
    "pydantic_settings",
    "worker.settings",
    "worker.intake.source_event",
    "worker.store.events",
}


def test_a_console_verb_over_http_does_not_import_the_engine() -> None:
    """Each verb runs to its request (a port nobody listens on: exit 2, "cannot reach"), so the imports its
    command function makes count too, not only the parser's."""
    url = f"http://127.0.0.1:{free_port()}"
    for verb in (["runs", "list"], ["keys", "list"], ["inspect", "evt"], ["outbox", "dead"]):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "producers.cli", *verb, "--url", url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 2 and "cannot reach" in result.stderr, (verb, result.stderr[-2000:])
        assert not _imported(result.stderr) & ENGINE, (verb, sorted(_imported(result.stderr) & ENGINE))


def test_a_worker_start_imports_celerys_worker_command_alone(make_settings: SettingsFactory) -> None:
    """``agent-signal worker`` runs Celery's ``worker`` command without ``app.worker_main``, which imports the
    whole ``celery`` command group first: every subcommand and each installed plugin's (Flower's Tornado app,
    ``click_repl`` with ``prompt_toolkit``), about 0.3 s of CPU a worker start never uses. ``agent-signal worker
    -- --help`` goes the whole way (settings, the store's boot checks, the app) to Celery's own help, which
    shows the flags given after ``--`` reach its command; ``-X importtime`` lists what the process imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "producers.cli", "worker", "--", "--help"],
        cwd=ROOT,
        env=settings_env(make_settings()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Usage: celery worker [OPTIONS]" in result.stdout and "--concurrency" in result.stdout, (
        result.stdout
    )
    imported = _imported(result.stderr)
    assert "worker.runtime.main" in imported and "celery.bin.worker" in imported
    assert not imported & {"celery.bin.celery", "flower", "tornado.web", "click_repl", "prompt_toolkit"}


def test_every_web_app_of_a_process_shares_the_routers_routes() -> None:
    """``create_web_app`` adds the routers' own routes: ``include_router`` made a per-app copy whose parameters
    and models FastAPI built again on each app's first request (~0.1 s of CPU per app)."""
    from producers.http.app import create_web_app
    from worker.settings import Settings

    settings = Settings(redis_url="redis://unused")
    first, second = create_web_app(settings), create_web_app(settings)
    api = [route for route in first.router.routes if getattr(route, "path", "").startswith("/v1/")]
    assert len(api) > 40
    again = {id(route) for route in second.router.routes}
    assert all(id(route) in again for route in api)
