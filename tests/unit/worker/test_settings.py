"""The boot-time timeout inequalities, the contract names, and the door's and sessions' sections."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from producers.http.settings import door_settings
from sessions.settings import session_limit_settings
from worker.runtime.assembly import load_plugins, section_models
from worker.settings import (
    Settings,
    SettingsError,
    check_environment,
    check_settings,
    kombu_options_for,
    kombu_url_for,
    load_settings,
    settings_environment,
)


def test_defaults_are_consistent() -> None:
    """The shipped defaults pass the checks."""
    check_settings(Settings(redis_url="redis://x"))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"task_soft_time_limit_s": 400},
            "AGENT_SIGNAL_TASK_SOFT_TIME_LIMIT_S (400) must be < AGENT_SIGNAL_TASK_TIME_LIMIT_S (330)",
        ),
        (
            {"task_time_limit_s": 4000},
            "AGENT_SIGNAL_TASK_TIME_LIMIT_S (4000) must be < AGENT_SIGNAL_VISIBILITY_TIMEOUT_S (3600)",
        ),
        (
            {"retry_cap_ms": 4_000_000},
            "AGENT_SIGNAL_RETRY_CAP_MS (4000000) in seconds plus AGENT_SIGNAL_TASK_TIME_LIMIT_S (330) must be < "
            "AGENT_SIGNAL_VISIBILITY_TIMEOUT_S",
        ),
        (  # each below the visibility timeout, but a retry's countdown and its run together outlast it
            {"retry_cap_ms": 3_400_000},
            "AGENT_SIGNAL_RETRY_CAP_MS (3400000) in seconds plus AGENT_SIGNAL_TASK_TIME_LIMIT_S (330) must be < "
            "AGENT_SIGNAL_VISIBILITY_TIMEOUT_S (3600)",
        ),
        (
            {"lease_renew_interval_s": 11},
            "AGENT_SIGNAL_LEASE_RENEW_INTERVAL_S (11.0) must be <= AGENT_SIGNAL_LEASE_TTL_S / 3 (10)",
        ),
        (
            {"retry_base_ms": 2000, "retry_cap_ms": 1000},
            "AGENT_SIGNAL_RETRY_BASE_MS (2000) must be <= AGENT_SIGNAL_RETRY_CAP_MS (1000)",
        ),
        (  # a call given up on after its claim lapsed: another relay may send it again at once (a review)
            {"outbox_delivery_timeout_s": 60.0},
            "AGENT_SIGNAL_OUTBOX_DELIVERY_TIMEOUT_S (60.0) in ms must be < AGENT_SIGNAL_OUTBOX_LEASE_MS (60000)",
        ),
    ],
)
def test_refuses_and_names_the_settings(overrides: dict[str, float], named: str) -> None:
    """Each broken inequality is refused with a message naming the environment variables and values (an
    audit: ``lease_ttl_s`` and ``task_time_limit_s`` named fields no operator sets)."""
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


@pytest.mark.parametrize(
    ("redis_url", "broker_url", "options"),
    [
        (
            "redis://:p@h:6379/0?socket_timeout=5&health_check_interval=3",
            "redis://:p@h:6379/0",
            {"socket_timeout": 5.0, "health_check_interval": 3},
        ),
        ("redis://h:6379/1?db=3", "redis://h:6379/3", {}),  # redis-py reads ?db= first
        (
            "rediss://h:6380/0?ssl_cert_reqs=required&socket_timeout=2",
            "rediss://h:6380/0?ssl_cert_reqs=required",
            {"socket_timeout": 2.0},
        ),
        (  # the store would log in and the broker not (NOAUTH at the first publish)
            "redis://h:6379/0?username=u&password=s%2Fx&client_name=w",
            "redis://u:s%2Fx@h:6379/0",
            {"client_name": "w"},
        ),
        (
            "unix:///tmp/r.sock?db=2&socket_timeout=1",
            "redis+socket:///tmp/r.sock?virtual_host=2",
            {"socket_timeout": 1.0},
        ),
    ],
)
def test_a_redis_urls_options_reach_kombu_as_transport_options(
    redis_url: str, broker_url: str, options: dict[str, object]
) -> None:
    """kombu's Connection refuses redis-py's options in its URL (a TypeError at the first connection: the broker
    of a store URL with ``?socket_timeout=5`` never connected); they become transport options."""
    assert (kombu_url_for(redis_url), kombu_options_for(redis_url)) == (broker_url, options)


def test_a_redis_url_option_redis_py_does_not_know_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``?socket_timout=5``: every command that opened the store died on a TypeError's traceback."""
    monkeypatch.setenv("REDIS_URL", "redis://:secret@h:6379/0?socket_timout=5")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "REDIS_URL" in str(info.value) and "'socket_timout'" in str(info.value)
    assert "secret" not in str(info.value)
    monkeypatch.setenv(
        "REDIS_URL", "redis://:Zq8?Xk3=Vb@h:6379/0"
    )  # a ? in the password: its tail is the query
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "%3F" in str(info.value) and "Xk3" not in str(info.value) and "Vb" not in str(info.value)
    for url in ("redis://h:6379/0?password=p@ss&username=svc@corp", "unix:///tmp/r.sock?password=a@b"):
        assert Settings(redis_url=url).redis_url == url  # an @ in a password given by ?password= is fine
    monkeypatch.setenv(
        "REDIS_URL", "unix://:se/cret@/tmp/nope.sock"
    )  # redis-py read the socket path from /cret@
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "%2F" in str(info.value) and "cret" not in str(info.value)
    assert Settings(redis_url="rediss://h:6380/0?ssl_cert_reqs=required&socket_timeout=2").redis_url


def test_reads_contract_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """REDIS_URL, BROKER_URL, PORT and AGENT_SIGNAL_API_TOKEN are read without a prefix."""
    monkeypatch.setenv("REDIS_URL", "redis://a")
    monkeypatch.setenv("BROKER_URL", "amqp://b")
    monkeypatch.setenv("PORT", "9001")
    monkeypatch.setenv("AGENT_SIGNAL_API_TOKEN", "t")
    monkeypatch.setenv("AGENT_SIGNAL_LEASE_TTL_S", "45")
    s = Settings()
    door = door_settings(s)  # PORT and the deprecated token are the door's (producers/http/settings.py)
    assert (s.redis_url, s.broker_url, door.port, door.api_token, s.lease_ttl_s) == (
        "redis://a",
        "amqp://b",
        9001,
        "t",
        45.0,
    )


class TestSections:
    """The door's and the sessions' settings are their own sections, under the same environment names."""

    def test_each_section_reads_its_variables(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """AGENT_SIGNAL_MAX_REQUEST_BYTES reaches the door, AGENT_SIGNAL_SESSION_TTL_S the sessions; the engine
        holds neither."""
        monkeypatch.setenv("AGENT_SIGNAL_MAX_REQUEST_BYTES", "1234")
        monkeypatch.setenv("AGENT_SIGNAL_SESSION_TTL_S", "77")
        s = Settings()
        assert door_settings(s).max_request_bytes == 1234
        assert session_limit_settings(s).session_ttl_s == 77
        assert (
            "max_request_bytes" not in Settings.model_fields and "session_ttl_s" not in Settings.model_fields
        )

    def test_keyword_arguments_are_routed_to_their_section(self) -> None:
        """A test's ``Settings(max_request_bytes=…, port=…)`` reaches the door's section, and its child
        process gets the same values under the same names."""
        s = Settings(max_request_bytes=99, port=8123, max_message_bytes=5)
        assert (door_settings(s).max_request_bytes, door_settings(s).port) == (99, 8123)
        assert session_limit_settings(s).max_message_bytes == 5
        env = settings_environment(s)
        assert (
            env["AGENT_SIGNAL_MAX_REQUEST_BYTES"],
            env["PORT"],
            env["AGENT_SIGNAL_MAX_MESSAGE_BYTES"],
        ) == (
            "99",
            "8123",
            "5",
        )

    def test_a_bad_value_names_the_variable(self) -> None:
        """A section's invalid value is refused with the environment name, not pydantic's report."""
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_MAX_CONNECTIONS"):
            door_settings(Settings(max_connections=0))
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_MAX_SESSION_BYTES"):
            session_limit_settings(Settings(max_session_bytes=0))

    def test_the_boot_check_knows_every_section(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every process's boot check (the worker's too) accepts the sections' variables and refuses their
        typos with the closest name, although the engine imports neither section."""
        monkeypatch.setenv("AGENT_SIGNAL_MAX_REQUEST_BYTES", "1234")
        monkeypatch.setenv("AGENT_SIGNAL_MAX_SESSION_MESSAGES", "10")
        load_plugins(Settings())
        monkeypatch.setenv("AGENT_SIGNAL_MAX_SESION_BYTES", "10")
        with pytest.raises(SettingsError, match="did you mean AGENT_SIGNAL_MAX_SESSION_BYTES"):
            load_plugins(Settings())
        with pytest.raises(SettingsError, match="'max_reqest_bytes'; did you mean max_request_bytes"):
            check_environment(Settings(max_reqest_bytes=1), section_models(), environ={})
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_MAX_CONNECTIONS"):
            load_plugins(Settings(max_connections=0), check_env=False)  # validated at boot like a plugin's


def test_an_unknown_stored_form_is_refused_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENT_SIGNAL_STORED_FORM takes zstd or deflate (a rolling upgrade's first phase); anything else is named."""
    monkeypatch.setenv("AGENT_SIGNAL_STORED_FORM", "gzip")
    with pytest.raises(
        SettingsError, match=r"^refusing to start: AGENT_SIGNAL_STORED_FORM: .*'zstd' or 'deflate'"
    ):
        load_settings()
    monkeypatch.setenv("AGENT_SIGNAL_STORED_FORM", "deflate")
    assert load_settings().stored_form == "deflate"


def test_a_settings_repr_shows_no_secret() -> None:
    """A traceback's locals or a stray log of the settings showed the API token, the webhook secret and the
    password in REDIS_URL; now each is '***' (the engine's model with its extras, and a plugin's)."""
    from policies.self_iteration.deps import SelfIterationSettings
    from worker.settings import plugin_settings

    given = Settings(
        redis_url="redis://:hunter2pw@127.0.0.1:6379/0",
        api_token="tok-abcdef",
        pseudonym_secret="p" * 40,
        agent_runner="webhook",
        agent_runner_url="https://runner:urlpw@runs.example/hook",
        agent_runner_secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        judge_api_key="sk-judgekey",
        bootstrap_key="bootstrap-key-0123456789",
        broker_url="redis://127.0.0.1:6379/1?password=querypw&db=1",
    )
    shown = repr(given) + str(given) + repr(plugin_settings(SelfIterationSettings, given))
    for secret in (
        "hunter2pw",
        "tok-abcdef",
        "p" * 40,
        "urlpw",
        "MfKQ9r8",
        "sk-judgekey",
        "bootstrap-key-01",
    ):
        assert secret not in shown
    assert (
        "key_prefix=" in shown
        and "redis://:***@127.0.0.1:6379/0" in shown
        and "https://runner:***@runs.example/hook" in shown
    )
    assert given.api_token == "tok-abcdef"  # type: ignore[attr-defined]  # only the repr hides it


def test_a_tool_reads_the_prefixed_redis_url_before_looking_for_a_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``AGENT_SIGNAL_REDIS_URL`` is read as ``REDIS_URL`` (docs/settings.md); a tool (celery inspect) given only
    it looked for a ``make run`` stack instead and failed with "REDIS_URL is not set"."""
    from worker.runtime.celery_app import load_tool_settings

    for name in ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"AGENT_SIGNAL_{name}", raising=False)
    monkeypatch.setenv("AGENT_SIGNAL_REDIS_URL", "redis://127.0.0.1:6379/9")
    assert load_tool_settings(tmp_path).redis_url == "redis://127.0.0.1:6379/9"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "redis://:hunter2-secret@127.0.0.1:6379/abc",
            "database (after the last /, or ?db=) must be a number",
        ),
        ("redis://:hunter2/secret@127.0.0.1:6379/0", "a / in the password must be written %2F"),
        ("unix:///tmp/redis.sock?db=two", "must be a number"),
        ("http://127.0.0.1:6379/0", "must start with redis://"),
    ],
)
def test_a_redis_url_whose_database_is_not_a_number_is_refused_without_its_password(
    url: str, problem: str
) -> None:
    """An SDK audit: ``REDIS_URL=…/abc`` was taken, and redis-py used database 0 (another deployment's data,
    perhaps) without a word. Refused, naming the variable and the part, never the password."""
    with pytest.raises(SettingsError) as refused:
        load_settings(redis_url=url)
    message = str(refused.value)
    assert (
        "REDIS_URL" in message and problem in message and "hunter2" not in message and "secret" not in message
    )
    with pytest.raises(ValidationError) as raw:  # pydantic's own report, when Settings is built directly
        Settings(redis_url=url)
    assert "hunter2" not in str(raw.value) and "secret@" not in str(raw.value)
    for fine in ("redis://127.0.0.1:6379/9", "rediss://h", "redis://h:6379/", "unix:///tmp/r.sock?db=1"):
        assert load_settings(redis_url=fine).redis_url == fine


@pytest.mark.parametrize("url", ["redis://127.0.0.1:abc/0", "redis://:s3cret@h:99999/0", "redis://h:0/0"])
def test_a_redis_url_port_that_is_no_port_is_refused_naming_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI audit: ``ValueError: Port could not be cast to integer value as 'abc'`` named no setting."""
    monkeypatch.setenv("REDIS_URL", url)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "REDIS_URL: its port" in str(info.value) and "s3cret" not in str(info.value)
