"""The TypeScript client (``clients/typescript``, npm package ``@agent-signal/client``) under ``make test``.

* The committed ``openapi.json``, which the client's generated types come from, is the document the current
  app serves: a Python change to a route or model fails here until ``npm run generate`` is rerun (the npm side
  checks the generated ``.ts`` and ``dist/`` against that snapshot; see the client's README).
* ``npm test`` (node's test runner) passes against a live stack: a real web process and worker on this test's
  Redis key prefix, with a bootstrap key. ``npm ci`` installs the dev tools from the committed lockfile once; the
  installed ``node_modules`` is reused while ``package-lock.json`` is unchanged (a stamp holds its hash).

Without node and npm the npm test is skipped with a loud reason on a developer's machine, and fails under CI
(``CI`` set), where they are expected.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from producers.http.app import create_web_app
from tests.conftest import ROOT, Proc, SettingsFactory

pytestmark = pytest.mark.integration

PACKAGE = ROOT / "clients" / "typescript"
BOOT = "bootstrap-key-for-the-typescript-client-0123456789"
NODE_MAJOR_MIN = 18
REGENERATE = "cd clients/typescript && npm run generate (then commit openapi.json, src/generated and dist)"
NO_STACK = "no live stack"  # the reason test/support.mjs gives a live suite it skips


def test_openapi_snapshot_is_the_document_the_app_serves(make_settings: SettingsFactory) -> None:
    """The snapshot the TypeScript types are generated from equals ``create_web_app(settings).openapi()``."""
    served = create_web_app(make_settings()).openapi()
    snapshot = json.loads((PACKAGE / "openapi.json").read_text(encoding="utf-8"))
    if snapshot == served:
        return
    lines = [f"clients/typescript/openapi.json is stale; run: {REGENERATE}"]
    for part, now, then in (
        ("paths", served.get("paths", {}), snapshot.get("paths", {})),
        ("schemas", served["components"]["schemas"], snapshot["components"]["schemas"]),
    ):
        added, removed = sorted(set(now) - set(then)), sorted(set(then) - set(now))
        changed = sorted(k for k in set(now) & set(then) if now[k] != then[k])
        lines += [
            f"{part} {label}: {names}"
            for label, names in (("added", added), ("removed", removed), ("changed", changed))
            if names
        ]
    pytest.fail("\n".join(lines))


def _tools() -> tuple[str, str]:
    """The node and npm executables, or a skip (a failure under CI) naming what is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    problem = None
    if node is None or npm is None:
        problem = "node and npm are not on PATH"
    else:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout
        if int(version.strip().lstrip("v").split(".")[0] or 0) < NODE_MAJOR_MIN:
            problem = f"node {version.strip()} is older than {NODE_MAJOR_MIN}"
    if problem is not None:
        message = f"the TypeScript client's tests need node >= {NODE_MAJOR_MIN} and npm: {problem}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip("SKIPPED LOUDLY: " + message)
    assert node is not None and npm is not None
    return node, npm


@contextmanager
def _install_lock() -> Iterator[None]:
    """One ``npm ci`` at a time for this checkout (xdist workers, or two test runs side by side)."""
    digest = hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"agent-signal-npm-ci-{digest}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(
    argv: list[str], env: dict[str, str] | None = None, timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _npm_ci(npm: str) -> None:
    """``npm ci`` from the committed lockfile, unless node_modules was installed from this very lockfile."""
    lock_hash = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    stamp = PACKAGE / "node_modules" / ".agent-signal-lock-sha256"
    with _install_lock():
        if stamp.exists() and stamp.read_text().strip() == lock_hash:
            return
        done = _run([npm, "ci", "--no-audit", "--no-fund"])
        if done.returncode != 0:
            pytest.fail(f"npm ci failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
        stamp.write_text(lock_hash + "\n")


@pytest.mark.timeout(420)
def test_npm_test_passes_against_a_live_stack(
    make_settings: SettingsFactory,
    start_worker: Callable[..., Proc],
    start_web: Callable[..., tuple[Proc, str]],
) -> None:
    """``npm test`` in clients/typescript: its checks, then node's test runner against a started stack."""
    _, npm = _tools()
    _npm_ci(npm)
    # the function definitions the session tests activate (approval, escalation); `make run` loads none
    functions_dir = str(ROOT / "examples" / "functions")
    settings = make_settings(
        bootstrap_key=BOOT, rate_limit_per_s=0, auth_cache_s=0, functions_dir=functions_dir
    )
    start_worker(settings)
    web, url = start_web(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SIGNAL_")}
    env.update(AGENT_SIGNAL_URL=url, AGENT_SIGNAL_TOKEN=BOOT, AGENT_SIGNAL_REQUIRE_LIVE="1", NO_COLOR="1")
    result = _run([npm, "test"], env=env)
    if result.returncode != 0:
        pytest.fail(
            f"npm test failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}\n"
            f"--- the web process's log (last 80 lines) ---\n" + "\n".join(web.log().splitlines()[-80:])
        )
    _every_live_test_ran(result)


def _every_live_test_ran(result: subprocess.CompletedProcess[str]) -> None:
    """None was skipped for want of the stack (or of the test plugin the DLQ test needs): under
    ``AGENT_SIGNAL_REQUIRE_LIVE=1`` such a test fails (test/support.mjs), so npm's exit status says it, whatever
    node's reporter counts (it counts a suite skipped whole neither as run nor as skipped); the skip's reason is
    looked for as well."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert NO_STACK not in result.stdout + result.stderr, result.stdout


def test_a_live_test_that_would_be_skipped_fails_when_the_live_tests_are_required() -> None:
    """Without a stack, the live suites are skipped (exit 0); with ``AGENT_SIGNAL_REQUIRE_LIVE=1`` they fail,
    naming the setting, and the check above fails on either run."""
    node, npm = _tools()
    _npm_ci(npm)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SIGNAL_")}
    env["NO_COLOR"] = "1"
    command = [node, "--test", "--test-reporter=spec", "test/lobehub.test.mjs"]
    skipped = _run(command, env=env)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    with pytest.raises(AssertionError):
        _every_live_test_ran(skipped)
    required = _run(command, env={**env, "AGENT_SIGNAL_REQUIRE_LIVE": "1"})
    assert required.returncode != 0
    assert "AGENT_SIGNAL_REQUIRE_LIVE=1 but AGENT_SIGNAL_URL is not set" in required.stdout + required.stderr
    with pytest.raises(AssertionError):
        _every_live_test_ran(required)
