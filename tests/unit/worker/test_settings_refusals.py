"""Values refused at load, each naming the environment variable the operator set: a number out of its range,
a list that is not JSON, a broker URL kombu has no transport for, and the message when no Redis is configured."""

from __future__ import annotations

import types
from typing import Union, get_args, get_origin

import pytest
from annotated_types import Ge, Gt
from pydantic_settings import BaseSettings

from producers.http.settings import DoorSettings, door_settings
from sessions.settings import SessionLimitSettings, session_limit_settings
from worker.settings import Settings, SettingsError, load_settings

# Read by the CLI's own check before anything listens ("PORT is 99999: a TCP port is 1..65535", exit 2).
CHECKED_ELSEWHERE = {"port"}
CONNECTION_NAMES = ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL", "PORT")


@pytest.fixture(autouse=True)
def _no_connection_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CONNECTION_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"AGENT_SIGNAL_{name}", raising=False)


def _load_every_section() -> None:
    settings = load_settings(redis_url="redis://127.0.0.1:6379/0")
    door_settings(settings)
    session_limit_settings(settings)


def _is_number(annotation: object) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_number(arg) for arg in get_args(annotation) if arg is not type(None))
    return annotation in (int, float)


class TestRanges:
    @pytest.mark.parametrize(
        ("name", "value", "message"),
        [
            ("AGENT_SIGNAL_RECONCILE_INTERVAL_S", "-1", "greater than 0"),
            ("AGENT_SIGNAL_RECONCILE_INTERVAL_S", "0", "greater than 0"),
            ("AGENT_SIGNAL_OUTBOX_POLL_INTERVAL_S", "0", "greater than 0"),
            ("AGENT_SIGNAL_MAX_EVENT_BYTES", "-1", "greater than or equal to 1"),
            ("AGENT_SIGNAL_MAX_BATCH_EVENTS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_LEASE_TTL_S", "-1", "greater than 0"),
            ("AGENT_SIGNAL_LEASE_RENEW_INTERVAL_S", "-1", "greater than 0"),
            ("AGENT_SIGNAL_DEDUPE_WINDOW_S", "-1", "greater than or equal to 1"),
            ("AGENT_SIGNAL_MAX_EVENTS_PER_DRAIN", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_MAX_ATTEMPTS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_RETRY_BASE_MS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_IDEMPOTENCY_TTL_S", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_OUTBOX_MAX_ATTEMPTS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_OUTBOX_RETRY_BASE_MS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_OUTBOX_LEASE_MS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_OUTBOX_RETENTION_S", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_CHAIN_RETENTION_S", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_RECEIPT_RETENTION_S", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_TASK_SOFT_TIME_LIMIT_S", "-1", "greater than or equal to 1"),
            ("AGENT_SIGNAL_TASK_TIME_LIMIT_S", "-1", "greater than or equal to 1"),
            ("AGENT_SIGNAL_VISIBILITY_TIMEOUT_S", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_WORKER_CONCURRENCY", "-1", "greater than or equal to 1"),
            ("AGENT_SIGNAL_METRICS_EXPORT_INTERVAL_MS", "0", "greater than or equal to 1"),
            ("AGENT_SIGNAL_MAX_REQUEST_BYTES", "-1", "greater than or equal to 1"),
        ],
    )
    def test_a_value_out_of_range_is_refused_by_its_variable(
        self, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
    ) -> None:
        """An audit: RECONCILE_INTERVAL_S=-1 or OUTBOX_POLL_INTERVAL_S=0 started a worker that spun at 65% CPU on
        Redis, MAX_EVENT_BYTES=-1 refused every event; each now stops the boot in one line naming the variable."""
        monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError, match=rf"^refusing to start: (DoorSettings: )?{name}: .*{message}"):
            _load_every_section()

    @pytest.mark.parametrize("model", [Settings, DoorSettings, SessionLimitSettings])
    def test_every_number_has_a_lower_bound(self, model: type[BaseSettings]) -> None:
        """A new numeric setting declares its range (gt=0, ge=1, or ge=0 where 0 means off), so a negative
        interval or size cannot reach the code that reads it."""
        unbounded = [
            name
            for name, info in model.model_fields.items()
            if _is_number(info.annotation)
            and name not in CHECKED_ELSEWHERE
            and not any(isinstance(bound, Ge | Gt) for bound in info.metadata)
        ]
        assert not unbounded, f"{model.__name__}: no lower bound on {unbounded}"

    def test_the_defaults_and_a_documented_zero_still_load(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The bounds refuse no default, nor a 0 a row documents ("0: no limit", "0 turns it off")."""
        for name in (
            "RUN_INDEX_MAX",
            "MAX_INBOX_DEPTH",
            "WAIT_REPLICAS",
            "AUTH_CACHE_S",
            "TENANT_EVENTS_PER_S",
        ):
            monkeypatch.setenv(f"AGENT_SIGNAL_{name}", "0")
        monkeypatch.setenv("AGENT_SIGNAL_RECONCILE_INTERVAL_S", "0.01")
        _load_every_section()


class TestNames:
    @pytest.mark.parametrize(
        ("name", "section"),
        [
            ("AGENT_SIGNAL_ALLOWED_HOSTS", "DoorSettings: "),
            ("AGENT_SIGNAL_ALLOWED_ORIGINS", "DoorSettings: "),
            ("AGENT_SIGNAL_PLUGINS", ""),
            ("AGENT_SIGNAL_EXTRA_SOURCE_TYPES", ""),
        ],
    )
    def test_a_list_that_is_not_json_names_its_variable(
        self, monkeypatch: pytest.MonkeyPatch, name: str, section: str
    ) -> None:
        """``AGENT_SIGNAL_ALLOWED_HOSTS=example.com`` stopped the boot with pydantic-settings' report naming the
        field ``allowed_hosts`` and its source class; now one line names the variable and the shape."""
        monkeypatch.setenv(name, "example.com")
        with pytest.raises(SettingsError) as refused:
            _load_every_section()
        assert str(refused.value) == f"""refusing to start: {section}{name}: not a JSON list (e.g. '["a"]')"""

    @pytest.mark.parametrize(
        ("environment", "named"),
        [
            ({"AGENT_SIGNAL_PORT": "abc"}, "AGENT_SIGNAL_PORT"),
            ({"PORT": "abc"}, "PORT"),
            ({"PORT": "abc", "AGENT_SIGNAL_PORT": "8000"}, "PORT"),  # PORT wins, and is the one refused
        ],
    )
    def test_a_bare_or_prefixed_name_is_the_one_set(
        self, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], named: str
    ) -> None:
        """``AGENT_SIGNAL_PORT=abc`` was refused as ``PORT`` (pydantic reports the first alias), a variable the
        operator never set."""
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError, match=rf"^refusing to start: DoorSettings: {named}: .*integer"):
            _load_every_section()


class TestBroker:
    @pytest.mark.parametrize(
        ("name", "url", "problem"),
        [
            ("BROKER_URL", "bogus://user:hunter2@127.0.0.1//", "unknown scheme 'bogus' (one of amqp, "),
            ("AGENT_SIGNAL_BROKER_URL", "unix:///tmp/r.sock", "unknown scheme 'unix' (one of amqp, "),
            ("BROKER_URL", "user:hunter2@127.0.0.1", "not a URL with a scheme"),
        ],
    )
    def test_a_scheme_kombu_cannot_serve_is_refused_without_the_password(
        self, monkeypatch: pytest.MonkeyPatch, name: str, url: str, problem: str
    ) -> None:
        """``BROKER_URL=bogus://x``: the worker died with two KeyError tracebacks, the web app started and every
        drain message failed; now the load refuses it, naming the variable and the scheme, never the URL."""
        monkeypatch.setenv(name, url)
        with pytest.raises(SettingsError) as refused:
            _load_every_section()
        message = str(refused.value)
        assert message.startswith(f"refusing to start: {name}: {problem}") and "hunter2" not in message

    @pytest.mark.parametrize(
        "url",
        [
            "amqp://guest:guest@127.0.0.1:5672//",
            "amqps://h//",
            "pyamqp://h//",
            "redis://h:6379/1",
            "rediss://h:6380/0",
            "redis+socket:///tmp/r.sock",
        ],
    )
    def test_the_brokers_we_run_on_load(self, url: str) -> None:
        """RabbitMQ and Redis, as kombu spells them (``redis+socket`` is its Redis transport)."""
        assert load_settings(redis_url="redis://h", broker_url=url).effective_broker_url() == url


def test_no_redis_says_so_for_every_caller() -> None:
    """The worker and the web app were told to "send through the web app (HttpProducer, --url)": advice for a
    producer, wrong for the processes that are the web app and its worker. The line now fits every caller."""
    with pytest.raises(SettingsError) as refused:
        Settings(redis_url=None, redis_cluster_url=None).require_redis_url()
    message = str(refused.value)
    assert message.startswith("REDIS_URL is not set and no embedded Redis was started: set REDIS_URL")
    assert "web app" not in message and "--url" not in message
