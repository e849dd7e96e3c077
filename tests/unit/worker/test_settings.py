"""The boot-time timeout inequalities."""

from __future__ import annotations

import pytest

from worker.settings import Settings, SettingsError, check_settings, kombu_url_for


def test_defaults_are_consistent() -> None:
    """The shipped defaults pass the checks."""
    check_settings(Settings(redis_url="redis://x"))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"task_soft_time_limit_s": 400}, "task_soft_time_limit_s (400) must be < task_time_limit_s (330)"),
        ({"task_time_limit_s": 4000}, "task_time_limit_s (4000) must be < visibility_timeout_s (3600)"),
        ({"retry_cap_ms": 4_000_000}, "retry_cap_ms (4000000) must be < visibility_timeout_s"),
        ({"lease_renew_interval_s": 11}, "lease_renew_interval_s (11.0) must be <= lease_ttl_s / 3 (10)"),
        ({"max_attempts": 0}, "max_attempts (0) must be >= 1"),
    ],
)
def test_refuses_and_names_the_settings(overrides: dict[str, float], named: str) -> None:
    """Each broken inequality is refused with a message naming the settings and values."""
    with pytest.raises(SettingsError) as info:
        check_settings(Settings(redis_url="redis://x", **overrides))  # type: ignore[arg-type]
    assert named in str(info.value)
    assert str(info.value).startswith("refusing to start:")


def test_broker_url_follows_redis_url() -> None:
    """BROKER_URL defaults to REDIS_URL, spelled for kombu when it is a Unix socket."""
    assert Settings(redis_url="redis://h:1/2").effective_broker_url() == "redis://h:1/2"
    assert kombu_url_for("unix:///tmp/r.sock") == "redis+socket:///tmp/r.sock"
    assert (
        Settings(redis_url="redis://h", broker_url="amqp://g:g@h//").effective_broker_url()
        == "amqp://g:g@h//"
    )


def test_reads_contract_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """REDIS_URL, BROKER_URL, PORT and AGENT_SIGNAL_API_TOKEN are read without a prefix."""
    monkeypatch.setenv("REDIS_URL", "redis://a")
    monkeypatch.setenv("BROKER_URL", "amqp://b")
    monkeypatch.setenv("PORT", "9001")
    monkeypatch.setenv("AGENT_SIGNAL_API_TOKEN", "t")
    monkeypatch.setenv("AGENT_SIGNAL_LEASE_TTL_S", "45")
    s = Settings()
    assert (s.redis_url, s.broker_url, s.port, s.api_token, s.lease_ttl_s) == (
        "redis://a",
        "amqp://b",
        9001,
        "t",
        45.0,
    )
