"""The plugin API surface, the engine's independence, and settings that fail at boot with a suggestion."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import worker.plugin
from worker.settings import PluginSettings, Settings, SettingsError, check_environment

ROOT = Path(__file__).resolve().parents[3]


def test_plugin_module_all_is_its_public_surface() -> None:
    """Every public name of worker.plugin is in __all__, and every __all__ name exists."""
    public = sorted(n for n in vars(worker.plugin) if not n.startswith("_") and n not in {"annotations"})
    exported = sorted(worker.plugin.__all__)
    missing = [n for n in exported if not hasattr(worker.plugin, n)]
    assert missing == []
    # What else is visible is the module's own typing vocabulary, not API.
    typing_helpers = {
        "Any",
        "Callable",
        "Mapping",
        "Sequence",
        "TypeVar",
        "dataclass",
        "field",
        "Redis",
        "S",
        "PoliciesSpec",
    }
    assert sorted(set(public) - typing_helpers) == exported


def test_the_contract_names_are_exported() -> None:
    """CONTRACT.md §Plugin API names are importable from worker.plugin."""
    for name in (
        "Plugin Policy define_source_handler define_signal_handler define_action_handler Source Signal Action "
        "Dispatch ExecutorResult signal_from action_from applied failed skipped HandlerContext"
    ).split():
        assert name in worker.plugin.__all__, name


def test_importing_the_engine_imports_nothing_above_it() -> None:
    """`import worker` (and every engine module) loads no module of policies, sessions or producers."""
    engine = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "worker").rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {engine!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('policies', 'sessions', 'producers'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_outside_test_plugin_imports_only_worker_plugin() -> None:
    """tests/plugins/ledger.py is written as a user would: worker.plugin is all it takes from the engine."""
    tree = ast.parse((ROOT / "tests" / "plugins" / "ledger.py").read_text())
    engine = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "worker"
    }
    assert engine == {"worker.plugin"}


class _Demo(PluginSettings):
    demo_url: str | None = None


class TestUnknownSettings:
    def test_a_misspelled_variable_fails_with_the_closest_name(self) -> None:
        """AGENT_SIGNAL_MAX_ATEMPTS=2 is refused and AGENT_SIGNAL_MAX_ATTEMPTS suggested."""
        with pytest.raises(
            SettingsError, match="AGENT_SIGNAL_MAX_ATEMPTS; did you mean AGENT_SIGNAL_MAX_ATTEMPTS"
        ):
            check_environment(Settings(), [], environ={"AGENT_SIGNAL_MAX_ATEMPTS": "2"})

    def test_a_plugin_variable_is_known_only_when_its_plugin_is_loaded(self) -> None:
        """A loaded plugin's settings model declares its section of AGENT_SIGNAL_*."""
        env = {"AGENT_SIGNAL_DEMO_URL": "http://x"}
        check_environment(Settings(), [_Demo], environ=env)
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_DEMO_URL"):
            check_environment(Settings(), [], environ=env)

    def test_a_misspelled_keyword_fails_too(self) -> None:
        """Extras given to Settings must belong to a loaded plugin's model."""
        with pytest.raises(SettingsError, match="'demo_ulr'; did you mean demo_url"):
            check_environment(Settings(demo_ulr="x"), [_Demo], environ={})

    def test_the_worker_refuses_to_boot(self, tmp_path: Path) -> None:
        """`agent-signal worker` with a misspelled setting exits non-zero naming the closest valid name."""
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "AGENT_SIGNAL_MAX_ATEMPTS": "2",
            "REDIS_URL": "redis://127.0.0.1:1/0",
        }
        out = subprocess.run(
            [sys.executable, "-m", "producers.cli", "worker"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        assert "did you mean AGENT_SIGNAL_MAX_ATTEMPTS" in out.stderr + out.stdout


class TestBadValues:
    def test_an_engine_value_error_names_the_variable_in_one_line(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """AGENT_SIGNAL_LEASE_TTL_S=abc is refused naming the variable, not with pydantic's report."""
        from worker.settings import load_settings

        monkeypatch.setenv("AGENT_SIGNAL_LEASE_TTL_S", "abc")
        with pytest.raises(
            SettingsError, match=r"^refusing to start: AGENT_SIGNAL_LEASE_TTL_S: .*number"
        ) as caught:
            load_settings()
        assert "\n" not in str(caught.value)

    def test_a_plugin_value_error_names_its_model_and_variable(self) -> None:
        """A plugin setting with a bad value stops the boot with the plugin model and the variable."""
        from policies.self_iteration.deps import SelfIterationSettings
        from worker.settings import plugin_settings

        with pytest.raises(
            SettingsError, match="SelfIterationSettings: AGENT_SIGNAL_AGENT_RUNNER: Input should be"
        ):
            plugin_settings(SelfIterationSettings, Settings(agent_runner="bogus"))
        with pytest.raises(SettingsError, match="webhook needs AGENT_SIGNAL_AGENT_RUNNER_URL"):
            plugin_settings(SelfIterationSettings, Settings(agent_runner="webhook"))

    def test_a_webhook_runners_url_and_secret_are_checked_at_boot_without_quoting_the_secret(self) -> None:
        """Only their presence was checked: a URL that is no http(s) URL, or a whsec_ secret that is not base64,
        failed every delivery later, each run ending dead in the outbox."""
        from policies.self_iteration.deps import SelfIterationSettings
        from worker.settings import plugin_settings

        def boot(url: str, secret: str) -> None:
            given = Settings(agent_runner="webhook", agent_runner_url=url, agent_runner_secret=secret)
            plugin_settings(SelfIterationSettings, given)

        with pytest.raises(SettingsError, match="RUNNER_URL must be an http\\(s\\) URL") as caught:
            boot("not a url", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        with pytest.raises(SettingsError, match="RUNNER_URL must be an http\\(s\\) URL"):
            boot("ftp://runs.example/hook", "s3cret-value")
        with pytest.raises(SettingsError, match="RUNNER_SECRET is not a usable") as bad_secret:
            boot("https://runs.example/hook", "whsec_a")
        assert "whsec_a" not in str(bad_secret.value).replace("whsec_ followed", "")
        assert "MfKQ9r8" not in str(caught.value)
        boot("https://runs.example/hook", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        boot("http://runner.internal:8080/hook", "any other string")

    def test_a_previous_webhook_secret_is_checked_at_boot_like_the_secret(self) -> None:
        """A rotation's previous secret signs every delivery too: one that cannot sign stops the boot, named by
        its own variable and not quoted."""
        from policies.self_iteration.deps import SelfIterationSettings
        from worker.settings import plugin_settings

        def boot(previous: str) -> SelfIterationSettings:
            given = Settings(
                agent_runner="webhook",
                agent_runner_url="https://runs.example/hook",
                agent_runner_secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                agent_runner_previous_secret=previous,
            )
            return plugin_settings(SelfIterationSettings, given)

        with pytest.raises(SettingsError, match="RUNNER_PREVIOUS_SECRET is not a usable") as bad:
            boot("whsec_!!!!")
        assert "!!!!" not in str(bad.value)
        assert boot("the old one").agent_runner_previous_secret == "the old one"
        assert boot("").agent_runner_previous_secret is None  # set empty, as a manifest unsets it: none
