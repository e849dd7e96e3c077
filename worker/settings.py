"""The engine's settings (one pydantic-settings model) and the base of every plugin's settings.

Values come from the environment (prefix-less names for the four contract settings, ``AGENT_SIGNAL_*`` for
the rest); nothing is read at import time: call :func:`load_settings`. Each plugin declares its own options
in a :class:`PluginSettings` model (its section of ``AGENT_SIGNAL_*``), validated at boot, and so do the door
(``producers/http/settings.py``) and the agent sessions (``sessions/settings.py``); keyword arguments that
belong to a section may be given to :class:`Settings` too (they are kept as extras and handed to the section's
model). An ``AGENT_SIGNAL_*`` variable that neither the engine nor a section declares stops the process at boot
with the closest valid name (:func:`check_environment`). Durations carry their unit in the
name (``lease_ttl_s``, ``retry_base_ms``).

The timeout inequalities that keep Celery-on-Redis from running a task twice are checked by
:func:`check_settings` at boot (worker and web) and the process refuses to start with a message that names
the settings involved. Why each one matters:

* ``task_soft_time_limit_s < task_time_limit_s < visibility_timeout_s``: the Redis transport redelivers any
  message not acked within the visibility timeout, so a task that may still be running then would be
  executed twice (celery docs, Redis caveats).
* ``retry_cap_ms`` (in seconds) ``+ task_time_limit_s < visibility_timeout_s``: retries are countdown messages,
  held unacked by the worker from their delivery through the countdown and the run, so a countdown longer than the
  visibility timeout is restored "again, and again in a loop" (celery#2481), and one that with its run outlasts
  it is run twice. (The reconcile sweep publishes its
  drains at once, with no countdown, so its interval is bounded only above 0.)
* ``lease_renew_interval_s <= lease_ttl_s / 3``: one missed renewal must not lose the lease.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar, get_origin
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError  # a source's own: a list setting that is not JSON

from worker.core.redis_urls import (
    broker_url_problem,
    kombu_options_for,
    kombu_url_for,
    redis_url_option_problem,
    redis_url_problem,
)
from worker.core.service_links import is_service_link

__all__ = [
    "PluginSettings",
    "Settings",
    "SettingsError",
    "check_environment",
    "check_settings",
    "env_names",
    "kombu_options_for",
    "kombu_url_for",
    "load_settings",
    "plugin_settings",
    "settings_environment",
]

ENV_PREFIX = "AGENT_SIGNAL_"
# Names no settings model reads: the CLI's (AGENT_SIGNAL_URL, AGENT_SIGNAL_TOKEN) and the image's revision
# (AGENT_SIGNAL_REVISION, which `agent-signal --version` prints), so a deployment that sets
# them is not refused at boot.
OTHER_ENV_NAMES = frozenset({"AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN", "AGENT_SIGNAL_REVISION"})


class SettingsError(ValueError):
    """The settings break an invariant; the message names the settings."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, f"AGENT_SIGNAL_{name}")


SECRET_NAME = re.compile(
    r"secret|token|password|_key$", re.IGNORECASE
)  # api_key, bootstrap_key; not key_prefix


def _without_password(url: str) -> str:
    """``url`` with the password of its user info (``redis://:pw@host``) and any query parameter named like a
    secret (``?password=…``, which redis-py reads too) shown as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if parts.password is not None:
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{user}:***@{host}")
    if parts.query:
        pairs = [pair.partition("=") for pair in parts.query.split("&")]
        hidden = [(k, eq, "***" if SECRET_NAME.search(k) else v) for k, eq, v in pairs]
        parts = parts._replace(query="&".join(f"{k}{eq}{v}" for k, eq, v in hidden))
    return urlunsplit(parts)


class _SecretsHidden:
    """Settings whose repr (a traceback's locals, a debugger, a stray ``log.info(settings)``) shows no secret:
    a field named like a secret (token, secret, password, ``*_key``) is ``'***'``, a URL's password too."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():  # type: ignore[misc]
            if name and value is not None and SECRET_NAME.search(name):
                yield name, "***"
            elif name and name.endswith("_url") and isinstance(value, str):
                yield name, _without_password(value)
            else:
                yield name, value


class Settings(_SecretsHidden, BaseSettings):
    """Process settings. The table of environment variables: docs/settings.md."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="allow", populate_by_name=True, hide_input_in_errors=True
    )

    # --- connections (contract names, no prefix) ---
    redis_url: str | None = Field(default=None, validation_alias=_env("REDIS_URL"))
    broker_url: str | None = Field(default=None, validation_alias=_env("BROKER_URL"))
    # A Redis Cluster for state (redis://host:port of any node); the broker is then BROKER_URL (never the cluster).
    redis_cluster_url: str | None = Field(default=None, validation_alias=_env("REDIS_CLUSTER_URL"))
    # Connections per state-store client pool (a web process has two: the door's and the credentials'); a thread
    # past the cap waits redis_pool_timeout_s for a free one, then gets a 503. Not applied to a cluster client.
    redis_max_connections: int = Field(default=20, ge=1)
    redis_pool_timeout_s: float = Field(default=5.0, gt=0)
    env: Literal["production", "development", "test"] = "production"

    # The key of the pseudonyms (HMAC) naming users, scopes, sources and chains in logs and the audit trail
    # (>= 32 chars; worker/telemetry/pseudonyms.py); unset: one random secret kept in Redis, shared by every process.
    pseudonym_secret: SecretStr | None = None

    # --- naming / isolation ---
    key_prefix: str = "agent-signal:"
    queue_name: str = "agent-signal"

    # --- ingress ---
    max_event_bytes: int = Field(default=256 * 1024, ge=1)  # one event's serialized payload; larger -> 413
    max_batch_events: int = Field(default=1000, ge=1)
    allow_unknown_source_types: bool = False
    extra_source_types: list[str] = Field(default_factory=list)

    # --- the store's safety (worker/store/server/safety.py) ---
    allow_evicting_redis: bool = False  # accept a maxmemory-policy other than noeviction (events may be lost)
    redis_memory_warn_ratio: float = Field(default=0.9, gt=0, le=1)  # used/maxmemory shown on /readyz at this
    store_retry_after_s: int = Field(default=5, ge=1)  # Retry-After of a 503 store_unavailable

    # --- dedupe ---
    dedupe_window_s: int = Field(default=24 * 60 * 60, ge=1)
    run_index_max: int = Field(default=10_000, ge=0)  # events kept per runs-explorer index (0: window only)

    # --- scope lease ---
    lease_ttl_s: float = Field(default=30.0, gt=0)
    lease_renew_interval_s: float = Field(default=10.0, gt=0)
    max_events_per_drain: int = Field(default=200, ge=1)
    max_inbox_depth: int = Field(default=10_000, ge=0)  # one scope's queued events; past it -> 429 (0: none)
    tenant_max_queued: int = Field(
        default=500_000, ge=0
    )  # a tenant's queued events; past it -> 429 (0: none)
    # Storage quotas (worker/store/quotas.py), checked at the door before anything is stored; over one -> 429
    # quota_exceeded. Events a tenant admitted within the dedupe window (0: none); one user's stored bytes
    # (memories, skills, receipts, conversations, session context; 0: none).
    tenant_max_events: int = Field(default=500_000, ge=0)
    # One user's share of them (events naming the user, counted alike; 0: none): one end user's token filled
    # the tenant's whole quota, and every other user and key of the tenant was refused for a window.
    user_max_events: int = Field(default=50_000, ge=0)
    # Scopes one tenant may hold paused at once (a pause mark has no TTL, and the scope listing reads every one);
    # past it, a pause -> 429 quota_exceeded until a scope is resumed (0: none).
    tenant_max_paused_scopes: int = Field(default=10_000, ge=0)
    # API keys one tenant holds not revoked (worker/ops/key_index.py): one tenant's admin made 20,000, each kept
    # for good; past it, a key create -> 429 quota_exceeded until one is revoked (0: none).
    tenant_max_keys: int = Field(default=1_000, ge=0)
    user_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # Every user's stored bytes together, and what sessions and receipts that name no user store (0: none): a
    # tenant minting tokens for many users, or writing user-less sessions, fills at most this much of Redis.
    tenant_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    fair_share: bool = (
        True  # drains take turns across tenants (worker/runtime/fair.py); off: broker arrival order
    )
    # Shared drain messages (worker/runtime/fair.py, fair share on): one drain_next message drains up to this many
    # ready scopes, one after another, and claims no new one after drain_message_budget_s; at most
    # drain_messages_max such messages are out at once (keep it at or above the fleet's total concurrency). A
    # scope's turn ends after drain_message_budget_s too (or max_events_per_drain events, whichever comes first).
    scopes_per_drain: int = Field(default=32, ge=1)
    drain_message_budget_s: float = Field(default=5.0, gt=0)
    drain_messages_max: int = Field(default=64, ge=1)
    # Where the broker is the store's own Redis, drain_next messages are pushed onto its list whole (by the
    # enqueue script, or one LPUSH: worker/runtime/drain_message.py) instead of through Celery's send_task.
    push_drain_messages: bool = True
    # ... and, when on, if the scope an enqueue makes ready is the only one ready and no message waits on that
    # list, the enqueue script takes the scope's lease and its head for the message it pushes (the lease at
    # enqueue; one Redis, one scope bucket, no wait_replicas: worker/drain/lease.py ``adopt``): a lone event's
    # worker begins with them instead of a round trip. Off by default: the event reads processing from its
    # enqueue on, and a drain begun so names no worker (docs/settings.md says what else it changes).
    lease_at_enqueue: bool = False
    # Batch commits (worker/drain/batch.py): up to this many never-delivered head events of a scope whose chains
    # meet only batch-safe handlers run back to back and commit in one script (1: one commit per event).
    commit_batch_max: int = Field(default=16, ge=1)
    # While a run's COMMIT is in flight, the next run's chains run (worker/drain/pipeline.py; one Redis, no
    # wait_replicas): the worker's Python and Redis's script overlap. Off: each run waits for its commit's reply.
    drain_ahead: bool = True

    # --- retries and dead letters ---
    max_attempts: int = Field(default=5, ge=1)
    retry_base_ms: int = Field(default=1000, ge=1)
    retry_cap_ms: int = Field(default=60_000, ge=1)

    # --- idempotency ---
    idempotency_ttl_s: int = Field(default=7 * 24 * 60 * 60, ge=1)

    # How chains and idempotency lanes are written (worker/documents/chain_codec.py): zstd frames, or the deflate
    # forms a version before them reads, for the first phase of a rolling upgrade (docs/operations.md). Every
    # form is read either way.
    stored_form: Literal["zstd", "deflate"] = "zstd"

    # --- outbox (outbound calls staged by handlers, delivered by the relay in each worker) ---
    outbox_poll_interval_s: float = Field(default=0.2, gt=0)  # how often the relay looks for due records
    # deliveries before a record is dead (kept, visible in the run detail)
    outbox_max_attempts: int = Field(default=10, ge=1)
    outbox_retry_base_ms: int = Field(default=500, ge=1)  # full-jitter backoff between deliveries
    outbox_retry_cap_ms: int = Field(default=60_000, ge=1)
    outbox_lease_ms: int = Field(default=60_000, ge=1)  # a claimed record is not claimed again for this long
    # deliveries one worker's relay makes at once (threads); one tenant at most half of them
    outbox_concurrency: int = Field(default=8, ge=1)
    # how long the relay waits on one call of a plugin's deliverer before the attempt fails (worker/outbox/bounded.py):
    # below the claim's lease, so the failure is settled under the claim that made it
    outbox_delivery_timeout_s: float = Field(default=45.0, gt=0)
    outbox_retention_s: int = Field(default=7 * 24 * 60 * 60, ge=1)

    # --- traces ---
    chain_retention_s: int = Field(default=3 * 24 * 60 * 60, ge=1)
    receipt_retention_s: int = Field(default=3 * 24 * 60 * 60, ge=1)  # LobeHub receiptTtlSeconds

    # Durability across a failover: each admission and each commit waits (Redis WAIT) until this many replicas
    # have it, else it is not acknowledged (503 at the door; the worker leaves the event for a later drain).
    wait_replicas: int = Field(default=0, ge=0)
    wait_replicas_timeout_ms: int = Field(default=1000, ge=1)
    # Redis Cluster: spread each tenant over this many hash slots by scope (worker/keys/buckets.py). Fixed for a
    # deployment's life: changing it moves every scope's keys.
    scope_buckets: int = Field(default=1, ge=1, le=256)

    # --- celery timing ---
    task_soft_time_limit_s: int = Field(default=300, ge=1)
    task_time_limit_s: int = Field(default=330, ge=1)
    visibility_timeout_s: int = Field(default=3600, ge=1)
    reconcile_interval_s: float = Field(default=15.0, gt=0)  # 0 or less: an idle worker spun on Redis
    worker_concurrency: int = Field(default=2, ge=1)
    # Celery task events (task-received/started/succeeded/failed on the broker's event channel), which Flower
    # and `celery events` need to see tasks. Off by default (Celery's own default): they cost a quarter of the
    # throughput of one-event scopes (make bench). The worker still sends its heartbeats, so Flower sees the
    # workers and `celery control enable_events` turns task events on at run time.
    task_events: bool = False
    # RabbitMQ only (BROKER_URL amqp://): declare the task queues as quorum queues (x-queue-type: quorum) on
    # topic exchanges, so countdown retries use Celery's native delayed delivery (worker/runtime/app.py).
    quorum_queues: bool = False

    # --- deployment probes (worker/runtime/heartbeat_file.py; docs/operations.md) ---
    heartbeat_file: str | None = None  # the worker beats here (unset: off): `agent-signal probe worker`

    # --- telemetry ---
    telemetry_enabled: bool = True  # OpenTelemetry spans and metrics (off: no cost)
    trace_redis_commands: bool = False  # opentelemetry-instrumentation-redis: a span per Redis command
    trace_file: str | None = None  # append finished spans as JSON lines (development, tests)
    # OTLP's export interval; buffered measurements reach the process's metrics every min(1 s, this).
    metrics_export_interval_ms: int = Field(default=5000, ge=1)
    # A worker's own Prometheus port (its prefork children's metrics, summed; 0: none). k8s sets 9808.
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    # Where it listens: loopback unless a deployment opens it (k8s: the pod's IP, behind a NetworkPolicy that
    # admits only the monitoring namespace); its series are labelled by tenant and it has no credential check.
    worker_metrics_host: str = "127.0.0.1"
    # Where a worker's processes keep their metric files (emptied at start; default: a new temporary dir).
    metrics_dir: str | None = None
    tracing_dir: str = ".agent-tracing"  # development snapshots (AGENT_SIGNAL_ENV=development)
    log_format: Literal["auto", "json", "console"] = "auto"  # auto: console in development, else JSON

    # --- plugins ("module:factory" returning a Plugin or a list of Policy), loaded in this order ---
    shipped_plugins: list[str] = Field(
        default_factory=lambda: [
            "policies.conversation_log:plugin",
            "policies.self_iteration.plugin:plugin",
            "policies.activity:plugin",
            "policies.conversation:plugin",
            "policies.dmail:plugin",
        ]
    )
    plugins: list[str] = Field(default_factory=list)  # yours, loaded after the shipped ones

    @field_validator("redis_url", "redis_cluster_url")
    @classmethod
    def _redis_url_database(cls, value: str | None) -> str | None:
        """A database that is not a number: redis-py ignored it and used database 0 (another deployment's data,
        perhaps); refused, naming the part (never the URL, which may hold a password)."""
        if value and (problem := redis_url_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_options(cls, value: str | None) -> str | None:
        """An option redis-py has no such name for (``?socket_timout=5``): every command that opened the store
        died on a TypeError's traceback; refused, naming the option (never the URL)."""
        if value and (problem := redis_url_option_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_url_transport(cls, value: str | None) -> str | None:
        """A scheme kombu has no transport for (``bogus://``): the worker died on a KeyError and the web app
        started, then failed every publish; refused at load, naming the scheme (never the URL)."""
        if value and (problem := broker_url_problem(value)) is not None:
            raise ValueError(problem)
        return value

    def effective_broker_url(self) -> str:
        """The broker URL: ``BROKER_URL``, else the Redis URL in kombu's spelling."""
        if self.broker_url:
            return self.broker_url
        if self.redis_cluster_url:
            raise SettingsError(
                "REDIS_CLUSTER_URL is set but BROKER_URL is not: Celery cannot use a Redis Cluster as its broker; "
                "set BROKER_URL to RabbitMQ (amqp://…) or a plain Redis"
            )
        return kombu_url_for(self.require_redis_url())

    def require_redis_url(self) -> str:
        """The Redis URL (the cluster's seed node when REDIS_CLUSTER_URL is set), or a clear error when none was
        configured or started."""
        if self.redis_cluster_url:
            return self.redis_cluster_url
        if not self.redis_url:
            raise SettingsError(  # every caller's words: the worker, the web app, migrate, an SDK producer
                "REDIS_URL is not set and no embedded Redis was started: set REDIS_URL to your Redis (a "
                "`make run` stack's is redisUrl in .agent-signal/stack.json)"
            )
        return self.redis_url


def scripts_build_scope_keys(settings: Settings) -> bool:
    """One Redis with one scope bucket: a script may build a scope's keys from its ref (POP_ACQUIRE, a COMMIT
    that pops the next scope, the lease at enqueue); a cluster, or scope buckets, declare every key."""
    return settings.redis_cluster_url is None and settings.scope_buckets <= 1


def leases_at_enqueue(settings: Settings) -> bool:
    """The enqueue script may take a lone scope's lease for its drain_next message (``lease_at_enqueue``): where
    it pushes the messages itself (``push_drain_messages``; the broker being this Redis is the caller's to know),
    its scripts build scope keys, and no grant waits for replicas (one the replicas did not confirm is treated
    as lost, and a door's enqueue is not the worker that would hear so)."""
    return (
        settings.lease_at_enqueue
        and settings.push_drain_messages
        and scripts_build_scope_keys(settings)
        and not settings.wait_replicas
    )


def check_settings(settings: Settings) -> None:
    """Refuse settings that would make Celery run a task twice or lose a lease; name the culprits by the
    environment variables that set them. (Each value's own range is its ``Field`` bound, checked at load.)"""
    s, named = settings, _named_value
    problems: list[str] = []
    if not s.task_soft_time_limit_s < s.task_time_limit_s:
        problems.append(f"{named(s, 'task_soft_time_limit_s')} must be < {named(s, 'task_time_limit_s')}")
    if not s.task_time_limit_s < s.visibility_timeout_s:
        problems.append(f"{named(s, 'task_time_limit_s')} must be < {named(s, 'visibility_timeout_s')}")
    if not s.retry_cap_ms / 1000 + s.task_time_limit_s < s.visibility_timeout_s:
        problems.append(
            f"{named(s, 'retry_cap_ms')} in seconds plus {named(s, 'task_time_limit_s')} must be < "
            f"{named(s, 'visibility_timeout_s')}"
        )
    if not s.lease_renew_interval_s <= s.lease_ttl_s / 3:
        problems.append(
            f"{named(s, 'lease_renew_interval_s')} must be <= "
            f"{_env_name(('lease_ttl_s',))} / 3 ({s.lease_ttl_s / 3:g})"
        )
    if not s.lease_ttl_s < s.visibility_timeout_s:
        problems.append(f"{named(s, 'lease_ttl_s')} must be < {named(s, 'visibility_timeout_s')}")
    if not s.outbox_delivery_timeout_s * 1000 < s.outbox_lease_ms:
        problems.append(
            f"{named(s, 'outbox_delivery_timeout_s')} in ms must be < {named(s, 'outbox_lease_ms')} (a call given "
            "up on after its claim lapsed may be delivered again by another relay at once, without backoff)"
        )
    if s.retry_cap_ms < s.retry_base_ms:
        problems.append(f"{named(s, 'retry_base_ms')} must be <= {named(s, 'retry_cap_ms')}")
    secret = s.pseudonym_secret
    if (
        secret is not None and len(secret.get_secret_value()) < 32
    ):  # worker/telemetry/pseudonyms.py; never the value
        problems.append("AGENT_SIGNAL_PSEUDONYM_SECRET must be at least 32 characters")
    if problems:
        raise SettingsError("refusing to start: " + "; ".join(problems))


def _named_value(settings: Settings, field: str) -> str:
    """``AGENT_SIGNAL_X (value)``: a setting as the operator wrote it, for a refusal."""
    return f"{_env_name((field,))} ({getattr(settings, field)})"


CONTRACT_ENV_NAMES = {
    "redis_url": "REDIS_URL",
    "broker_url": "BROKER_URL",
    "redis_cluster_url": "REDIS_CLUSTER_URL",
    "port": "PORT",
    "api_token": "AGENT_SIGNAL_API_TOKEN",
}


def settings_environment(settings: Settings) -> dict[str, str]:
    """The environment variables that reproduce ``settings`` (plugin extras included) in a child process."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        key = CONTRACT_ENV_NAMES.get(name, f"AGENT_SIGNAL_{name.upper()}")
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[key] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return env


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus explicit overrides) and check the invariants."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except (ValidationError, SourceError) as exc:  # one line naming the variable, not pydantic's report
        raise SettingsError(f"refusing to start: {_problems(exc, Settings)}") from None
    check_settings(settings)
    return settings


def _problems(exc: ValidationError | SourceError, model: type[BaseSettings]) -> str:
    """Each bad value as ``VARIABLE: what is wrong``. pydantic-settings' own error (a list setting that is not
    JSON: ``AGENT_SIGNAL_ALLOWED_HOSTS=example.com``) names only the field, in its text."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{_env_name(e['loc'])}: {_message(e['msg'])}" if e["loc"] else _message(e["msg"])
            for e in exc.errors()
        )
    field = re.search(r'field "([^"]+)"', str(exc))
    if field is None:
        return str(exc)
    info = model.model_fields.get(field[1])
    listed = info is not None and get_origin(info.annotation) in (list, set, tuple)
    shape = "a JSON list (e.g. '[\"a\"]')" if listed else "JSON"
    return f"{_env_name((field[1],))}: not {shape}"


def _message(msg: str) -> str:
    """pydantic's message without the "Value error, " its validators' own messages begin with."""
    return msg.removeprefix("Value error, ")


# Read bare or with the prefix; the bare name wins when both are set (pydantic-settings reports the bare one).
BARE_ENV_NAMES = ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL", "PORT")


def _env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable of an error's field (a field name, or the alias pydantic reports)."""
    name = str(loc[0]).upper() if loc else "?"
    if name in BARE_ENV_NAMES:
        return _name_in_environment(name)
    if name.startswith(ENV_PREFIX):
        return name
    return CONTRACT_ENV_NAMES.get(name.lower(), f"{ENV_PREFIX}{name}")


def _name_in_environment(bare: str) -> str:
    """``bare`` (``PORT``), or ``AGENT_SIGNAL_PORT`` when only that one is set: the name the operator wrote."""
    present = {name.upper() for name in os.environ}
    prefixed = f"{ENV_PREFIX}{bare}"
    return prefixed if prefixed in present and bare not in present else bare


class PluginSettings(_SecretsHidden, BaseSettings):
    """Base of a plugin's settings: ``AGENT_SIGNAL_<FIELD>`` variables; unknown keyword arguments fail."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", hide_input_in_errors=True)


P = TypeVar("P", bound=PluginSettings)


def plugin_settings(model: type[P], settings: Settings) -> P:
    """Validate ``model`` from the environment plus the plugin's extras given to ``settings``."""
    extras = settings.model_extra or {}
    mine = {name: value for name, value in extras.items() if name in model.model_fields}
    try:
        return model(**mine)
    except (ValidationError, SourceError) as exc:
        raise SettingsError(f"refusing to start: {model.__name__}: {_problems(exc, model)}") from None


def env_names(model: type[BaseSettings]) -> set[str]:
    """The environment variables a settings model reads."""
    names: set[str] = set()
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice) for choice in alias.choices)
        else:
            names.add(f"{ENV_PREFIX}{name.upper()}")
    return names


def _closest(name: str, known: Iterable[str]) -> str:
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


def check_environment(
    settings: Settings,
    models: Iterable[type[BaseSettings]],
    environ: Mapping[str, str] | None = None,
) -> None:
    """Refuse ``AGENT_SIGNAL_*`` variables and keyword extras that no loaded settings model declares (Kubernetes'
    service-link variables of a Service named ``agent-signal-…`` excepted: :func:`is_service_link`)."""
    models = [Settings, *models]
    known = set(OTHER_ENV_NAMES).union(*(env_names(m) for m in models))
    env = os.environ if environ is None else environ
    # pydantic-settings matches names case-insensitively, so the check does too.
    problems = [
        f"unknown setting {name}{_closest(name.upper(), known)}"
        for name in sorted(env)
        if name.upper().startswith(ENV_PREFIX)
        and name.upper() not in known
        and not is_service_link(name, env)
    ]
    fields = set().union(*(m.model_fields for m in models))
    problems += [
        f"unknown setting {name!r}{_closest(name, fields)}"
        for name in sorted(settings.model_extra or {})
        if name not in fields
    ]
    if problems:
        raise SettingsError("refusing to start: " + "; ".join(problems))
