"""Every setting of Agent Signal, in one pydantic-settings model.

Values come from the environment (prefix-less names for the four contract settings, ``AGENT_SIGNAL_*`` for
the rest); nothing is read at import time: call :func:`load_settings`. Durations carry their unit in the
name (``lease_ttl_s``, ``retry_base_ms``).

The timeout inequalities that keep Celery-on-Redis from running a task twice are checked by
:func:`check_settings` at boot (worker and web) and the process refuses to start with a message that names
the settings involved. Why each one matters:

* ``task_soft_time_limit_s < task_time_limit_s < visibility_timeout_s``: the Redis transport redelivers any
  message not acked within the visibility timeout, so a task that may still be running then would be
  executed twice (celery docs, Redis caveats).
* ``retry_cap_ms`` and the reconcile interval ``< visibility_timeout_s``: retries are countdown messages, and a
  countdown longer than the visibility timeout is restored "again, and again in a loop" (celery#2481).
* ``lease_renew_interval_s <= lease_ttl_s / 3``: one missed renewal must not lose the lease.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "SettingsError", "check_settings", "load_settings", "settings_environment"]


class SettingsError(ValueError):
    """The settings break an invariant; the message names the settings."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, f"AGENT_SIGNAL_{name}")


class Settings(BaseSettings):
    """Process settings. See README "Settings" for the table of environment variables."""

    model_config = SettingsConfigDict(env_prefix="AGENT_SIGNAL_", extra="ignore", populate_by_name=True)

    # --- connections (contract names, no prefix) ---
    redis_url: str | None = Field(default=None, validation_alias=_env("REDIS_URL"))
    broker_url: str | None = Field(default=None, validation_alias=_env("BROKER_URL"))
    api_token: str | None = Field(default=None, validation_alias=AliasChoices("AGENT_SIGNAL_API_TOKEN"))
    port: int = Field(default=8000, validation_alias=_env("PORT"))
    host: str = "127.0.0.1"
    env: Literal["production", "development", "test"] = "production"

    # --- naming / isolation ---
    key_prefix: str = "agent-signal:"
    queue_name: str = "agent-signal"

    # --- ingress ---
    max_event_bytes: int = 256 * 1024  # one event's serialized payload; larger -> 413
    max_request_bytes: int = 8 * 1024 * 1024  # one HTTP request body; larger -> 413
    max_batch_events: int = 1000
    allow_unknown_source_types: bool = False
    extra_source_types: list[str] = Field(default_factory=list)

    # --- dedupe ---
    dedupe_window_s: int = 24 * 60 * 60

    # --- scope lease ---
    lease_ttl_s: float = 30.0
    lease_renew_interval_s: float = 10.0
    max_events_per_drain: int = 200

    # --- retries and dead letters ---
    max_attempts: int = 5
    retry_base_ms: int = 1000
    retry_cap_ms: int = 60_000

    # --- idempotency ---
    idempotency_ttl_s: int = 7 * 24 * 60 * 60

    # --- traces ---
    chain_retention_s: int = 3 * 24 * 60 * 60
    receipt_retention_s: int = 3 * 24 * 60 * 60  # LobeHub receiptTtlSeconds

    # --- celery timing ---
    task_soft_time_limit_s: int = 300
    task_time_limit_s: int = 330
    visibility_timeout_s: int = 3600
    reconcile_interval_s: float = 15.0
    worker_concurrency: int = 2

    # --- routing (conversation signals) ---
    router_config: str | None = None  # path of a vLLM Semantic Router YAML; reloaded when it changes
    route_record_events: bool = True  # POST /v1/route also enqueues a chat.request source event

    # --- agent sessions ---
    functions_dir: str | None = None  # rolebox function definitions (*.md with YAML front matter)
    functions_workspace_dir: str | None = None  # where plan_incomplete() looks for .rolebox/plans/*.md

    # --- self-iteration ---
    self_iteration_enabled: bool = True  # the feature gate's default (per-user overrides in Redis)
    agent_runner: Literal["reference", "celery", "webhook"] = "reference"
    agent_runner_url: str | None = None  # webhook runner: where run requests are POSTed
    agent_runner_secret: str | None = None  # webhook runner: HMAC-SHA256 key of X-Agent-Signal-Signature
    agent_runner_queue: str | None = None  # celery runner: the app's queue (default: ours, reference agent)
    judge_url: str | None = None  # OpenAI-compatible base URL (…/v1); unset: the rule-based judges
    judge_model: str = "gpt-4o-mini"
    judge_api_key: str | None = None

    # --- telemetry ---
    telemetry_enabled: bool = True  # OpenTelemetry spans and metrics (off: no cost)
    trace_redis_commands: bool = False  # opentelemetry-instrumentation-redis: a span per Redis command
    trace_file: str | None = None  # append finished spans as JSON lines (development, tests)
    metrics_export_interval_ms: int = 5000  # how often each process adds its metric deltas to Redis
    tracing_dir: str = ".agent-tracing"  # development snapshots (AGENT_SIGNAL_ENV=development)
    log_format: Literal["auto", "json", "console"] = "auto"  # auto: console in development, else JSON

    # --- handler bundles ("module:attribute" factories returning a list of Policy) ---
    policies: list[str] = Field(default_factory=lambda: ["policies.builtin:default_policies"])

    def effective_broker_url(self) -> str:
        """The broker URL: ``BROKER_URL``, else the Redis URL in kombu's spelling."""
        if self.broker_url:
            return self.broker_url
        return kombu_url_for(self.require_redis_url())

    def require_redis_url(self) -> str:
        """The Redis URL, or a clear error when none was configured or started."""
        if not self.redis_url:
            raise SettingsError("REDIS_URL is not set and no embedded Redis was started")
        return self.redis_url


def kombu_url_for(redis_url: str) -> str:
    """Spell a redis-py URL the way kombu wants it (``unix://`` becomes ``redis+socket://``)."""
    if redis_url.startswith("unix://"):
        path, _, query = redis_url[len("unix://") :].partition("?")
        db = ""
        for part in query.split("&"):
            if part.startswith("db="):
                db = part[3:]
        return f"redis+socket://{path}" + (f"?virtual_host={db}" if db else "")
    return redis_url


def check_settings(settings: Settings) -> None:
    """Refuse settings that would make Celery run a task twice or lose a lease; name the culprits."""
    problems: list[str] = []
    if not settings.task_soft_time_limit_s < settings.task_time_limit_s:
        problems.append(
            f"task_soft_time_limit_s ({settings.task_soft_time_limit_s}) must be < "
            f"task_time_limit_s ({settings.task_time_limit_s})"
        )
    if not settings.task_time_limit_s < settings.visibility_timeout_s:
        problems.append(
            f"task_time_limit_s ({settings.task_time_limit_s}) must be < "
            f"visibility_timeout_s ({settings.visibility_timeout_s})"
        )
    if not settings.retry_cap_ms / 1000 < settings.visibility_timeout_s:
        problems.append(
            f"retry_cap_ms ({settings.retry_cap_ms}) must be < visibility_timeout_s "
            f"({settings.visibility_timeout_s}) in seconds"
        )
    if not settings.lease_renew_interval_s <= settings.lease_ttl_s / 3:
        problems.append(
            f"lease_renew_interval_s ({settings.lease_renew_interval_s}) must be <= "
            f"lease_ttl_s / 3 ({settings.lease_ttl_s / 3:g})"
        )
    if not settings.lease_ttl_s < settings.visibility_timeout_s:
        problems.append(
            f"lease_ttl_s ({settings.lease_ttl_s}) must be < visibility_timeout_s ({settings.visibility_timeout_s})"
        )
    if settings.retry_base_ms <= 0 or settings.retry_cap_ms < settings.retry_base_ms:
        problems.append(
            f"retry_base_ms ({settings.retry_base_ms}) must be > 0 and <= retry_cap_ms ({settings.retry_cap_ms})"
        )
    if settings.max_attempts < 1:
        problems.append(f"max_attempts ({settings.max_attempts}) must be >= 1")
    if problems:
        raise SettingsError("refusing to start: " + "; ".join(problems))


CONTRACT_ENV_NAMES = {
    "redis_url": "REDIS_URL",
    "broker_url": "BROKER_URL",
    "port": "PORT",
    "api_token": "AGENT_SIGNAL_API_TOKEN",
}


def settings_environment(settings: Settings) -> dict[str, str]:
    """The environment variables that reproduce ``settings`` in a child process (lists as JSON)."""
    import json

    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        key = CONTRACT_ENV_NAMES.get(name, f"AGENT_SIGNAL_{name.upper()}")
        env[key] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return env


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus explicit overrides) and check the invariants."""
    settings = Settings(**overrides)  # type: ignore[arg-type]
    check_settings(settings)
    return settings
