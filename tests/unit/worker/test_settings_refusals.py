"""Values refused at load, each naming the environment variable the operator set: a number out of its range,
a list that is not JSON, a broker URL kombu has no transport for, and the message when no Redis is configured;
unknown ``AGENT_SIGNAL_*`` names, Kubernetes' service-link variables excepted inside Kubernetes only."""

from __future__ import annotations

import types
from typing import Union, get_args, get_origin

import pytest
from annotated_types import Ge, Gt
from pydantic_settings import BaseSettings

from producers.http.settings import DoorSettings, door_settings
from sessions.settings import SessionLimitSettings, session_limit_settings
from worker.runtime.assembly import section_models
from worker.settings import Settings, SettingsError, check_environment, env_names, load_settings

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


# What kubelet injected into every pod of the namespace for the Services agent-signal-web (port 8000, named
# http), agent-signal-redis (6379) and agent-signal-rabbitmq (5672): the pods refused to start on them.
SERVICE_LINKS = {
    "AGENT_SIGNAL_WEB_SERVICE_HOST": "10.96.12.34",
    "AGENT_SIGNAL_WEB_SERVICE_PORT": "8000",
    "AGENT_SIGNAL_WEB_SERVICE_PORT_HTTP": "8000",
    "AGENT_SIGNAL_WEB_PORT": "tcp://10.96.12.34:8000",
    "AGENT_SIGNAL_WEB_PORT_8000_TCP": "tcp://10.96.12.34:8000",
    "AGENT_SIGNAL_WEB_PORT_8000_TCP_PROTO": "tcp",
    "AGENT_SIGNAL_WEB_PORT_8000_TCP_PORT": "8000",
    "AGENT_SIGNAL_WEB_PORT_8000_TCP_ADDR": "10.96.12.34",
    "AGENT_SIGNAL_REDIS_SERVICE_HOST": "10.96.0.7",
    "AGENT_SIGNAL_REDIS_SERVICE_PORT": "6379",
    "AGENT_SIGNAL_REDIS_PORT": "tcp://10.96.0.7:6379",
    "AGENT_SIGNAL_REDIS_PORT_6379_TCP": "tcp://10.96.0.7:6379",
    "AGENT_SIGNAL_REDIS_PORT_6379_TCP_PROTO": "tcp",
    "AGENT_SIGNAL_REDIS_PORT_6379_TCP_PORT": "6379",
    "AGENT_SIGNAL_REDIS_PORT_6379_TCP_ADDR": "10.96.0.7",
    "AGENT_SIGNAL_RABBITMQ_SERVICE_HOST": "fd00::5",
    "AGENT_SIGNAL_RABBITMQ_SERVICE_PORT": "5672",
    "AGENT_SIGNAL_RABBITMQ_PORT": "tcp://[fd00::5]:5672",
    "AGENT_SIGNAL_RABBITMQ_PORT_5672_TCP": "tcp://[fd00::5]:5672",
    "AGENT_SIGNAL_RABBITMQ_PORT_5672_TCP_PROTO": "tcp",
    "AGENT_SIGNAL_RABBITMQ_PORT_5672_TCP_PORT": "5672",
    "AGENT_SIGNAL_RABBITMQ_PORT_5672_TCP_ADDR": "fd00::5",
}
IN_KUBERNETES = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _check(environ: dict[str, str]) -> None:
    check_environment(Settings(), section_models(), environ=environ)


class TestServiceLinks:
    def test_a_services_links_pass_inside_kubernetes(self) -> None:
        """Every pod created after the Services refused to start ("unknown setting AGENT_SIGNAL_WEB_PORT; did
        you mean AGENT_SIGNAL_PORT?"): inside Kubernetes those variables are kubelet's, not settings."""
        _check(IN_KUBERNETES | SERVICE_LINKS)

    @pytest.mark.parametrize("name", sorted(SERVICE_LINKS))
    def test_the_same_names_are_refused_outside_kubernetes(self, name: str) -> None:
        """Without KUBERNETES_SERVICE_HOST nothing injects them: each is an operator's typo, refused."""
        with pytest.raises(SettingsError, match=rf"unknown setting {name}\b"):
            _check(SERVICE_LINKS)

    def test_outside_kubernetes_a_typo_keeps_its_hint(self) -> None:
        with pytest.raises(
            SettingsError, match=r"unknown setting AGENT_SIGNAL_WEB_PORT; did you mean AGENT_SIGNAL_PORT\?"
        ):
            _check({"AGENT_SIGNAL_WEB_PORT": "8000"})

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("AGENT_SIGNAL_WEB_PORT", "8000"),  # a link's _PORT is tcp://ip:port
            ("AGENT_SIGNAL_WORKER_METRICS_PORTT", "9808"),
            ("AGENT_SIGNAL_METRICS_PORT", "9808"),  # no AGENT_SIGNAL_METRICS_SERVICE_HOST
            ("AGENT_SIGNAL_METRICS_SERVICE_PORT", "9808"),  # nor here
            ("AGENT_SIGNAL_WEB_SERVICE_PORT_HTTP", "http"),
            ("AGENT_SIGNAL_WEB_PORT_8000_TCP", "tcp://10.96.12.34:8001"),  # port differs from the name's
            ("AGENT_SIGNAL_WEB_PORT_8000_TCP_PROTO", "udp"),
            ("AGENT_SIGNAL_WEB_PORT_8000_TCP_ADDR", "agent-signal-web"),
            ("AGENT_SIGNAL_WEB_PORT_8000_TCP_PORT", "80"),
            ("agent_signal_web_port", "tcp://10.96.12.34:8000"),  # kubelet's names are upper case
        ],
    )
    def test_a_typo_inside_kubernetes_not_shaped_like_a_link_is_refused(self, name: str, value: str) -> None:
        """Inside Kubernetes, next to real links, a name of a link's form is skipped only with a link's value
        and its Service's _SERVICE_HOST and _SERVICE_PORT set: a misspelt setting is still refused."""
        environ = IN_KUBERNETES | {k: v for k, v in SERVICE_LINKS.items() if k.upper() != name.upper()}
        with pytest.raises(SettingsError, match=rf"unknown setting {name}\b"):
            _check(environ | {name: value})

    def test_a_real_setting_is_still_read_and_validated(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A real setting is never skipped as a link: AGENT_SIGNAL_PORT (a link's form for a Service named
        agent-signal) with a link's value fails its own validation, and every real name stays known."""
        known = set(env_names(Settings)).union(*(env_names(m) for m in section_models()))
        link_shaped = {name: "tcp://10.96.0.9:8000" for name in known if name.startswith("AGENT_SIGNAL_")}
        _check(IN_KUBERNETES | SERVICE_LINKS | link_shaped)  # no name is unknown: the link check never ran
        for name, value in IN_KUBERNETES.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AGENT_SIGNAL_SERVICE_HOST", "10.96.0.9")
        monkeypatch.setenv("AGENT_SIGNAL_SERVICE_PORT", "8000")
        monkeypatch.setenv("AGENT_SIGNAL_PORT", "tcp://10.96.0.9:8000")
        with pytest.raises(SettingsError, match=r"AGENT_SIGNAL_PORT: .*integer"):
            _load_every_section()
