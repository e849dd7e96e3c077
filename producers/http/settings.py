"""The door's settings (:class:`DoorSettings`): the HTTP app's address, credentials, request and connection limits,
and receipt streams; only the web app and the CLI that starts or probes it read them.

A section of ``AGENT_SIGNAL_*`` like a plugin's (:class:`worker.settings.PluginSettings`): the environment names
are the ones the engine's model used to hold (``PORT``, ``AGENT_SIGNAL_BOOTSTRAP_KEY``, …), and the engine's boot
check knows them (worker/runtime/assembly.py ``SECTIONS``), so a typo is still refused with the closest name.
Keyword arguments given to :class:`~worker.settings.Settings` for these fields are kept as its extras and
handed here by :func:`door_settings` (tests, embedding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from worker.settings import ENV_PREFIX, PluginSettings, Settings, plugin_settings

if TYPE_CHECKING:
    from worker.ops.tenant_deletion import Settle

__all__ = ["DoorSettings", "deletion_settle", "door_settings"]


DEFAULT_BODY_BYTES_IN_FLIGHT = 32 * 1024 * 1024
REVOKE_SETTLE_MARGIN_S = 10.0


class DoorSettings(PluginSettings):
    """The web app's section. The table of environment variables: docs/settings.md#the-door."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", populate_by_name=True, hide_input_in_errors=True
    )

    # --- address ---
    port: int = Field(
        default=8000, ge=1, le=65535, validation_alias=AliasChoices("PORT", "AGENT_SIGNAL_PORT")
    )
    host: str = "127.0.0.1"

    # --- credentials (worker/ops/credentials.py, producers/http/access/auth.py; docs/security.md) ---
    bootstrap_key: SecretStr | None = None  # admin key of tenant "default" (>= 16 characters)
    api_token: str | None = Field(default=None, validation_alias=AliasChoices("AGENT_SIGNAL_API_TOKEN"))
    # ^ deprecated alias of bootstrap_key (used only when AGENT_SIGNAL_BOOTSTRAP_KEY is unset)
    token_secret: SecretStr | None = None  # user-token signing secret (>= 32 chars); unset: one kept in Redis
    rate_limit_per_s: float | None = Field(default=None, ge=0)  # per credential; unset: 100 with credentials
    # All of a tenant's credentials and user tokens together, charged with the credential's bucket in one
    # script (worker/ops/rate_limit.py); unset: 500 with credentials (DEFAULT_TENANT_RATE_LIMIT_PER_S), 0: none.
    tenant_rate_limit_per_s: float | None = Field(default=None, ge=0)
    auth_cache_s: float = Field(default=2.0, ge=0)  # verified keys are cached this long (a revoke's delay)
    auth_failures_per_s: float = Field(default=1.0, ge=0)  # failed auths refilled per client address; 0: off
    auth_failure_burst: int = Field(
        default=20, ge=1
    )  # failed auths before 429 (producers/http/access/throttle.py)
    ops_open: Literal["always", "never"] = "never"  # ops surfaces without a credential (make run: always)

    # --- requests and connections (producers/http/door.py, connections.py) ---
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1)  # one HTTP request body; larger -> 413
    max_connections: int = Field(default=2000, ge=1)  # per web process, else 503
    # One client address's share of them (0: none), else 429: one client holding 2,100 idle sockets had 70% of
    # another tenant's new connections refused. Half the connections by default, so one backend holding a
    # process's every receipt stream (AGENT_SIGNAL_MAX_STREAMS) for its users still fits. Behind a proxy or a NAT
    # every client is its address: raise it.
    max_connections_per_client: int = Field(default=1000, ge=0)
    header_timeout_s: float = Field(default=10.0, gt=0)  # a request's head must arrive within this, else 408
    body_timeout_s: float = Field(default=60.0, gt=0)  # its body within this of the head, else closed
    # Requests whose body the process waits for (a route began to read it), per credential and per tenant, in
    # one web process; more -> 429 rate_limited (producers/http/door.py PendingBodies). Tenant 0: none.
    max_pending_bodies_per_credential: int = Field(default=32, ge=1)
    tenant_max_pending_bodies: int = Field(default=500, ge=0)
    # Bytes of request bodies one web process holds at once, from a body's first byte until its request is
    # answered (a parse takes up to ~32x); one credential at most half. Over -> 503 busy (the credential's
    # half: 429). 0: none. Unset: 32 MiB or twice max_request_bytes, whichever is larger; a value given is at
    # least twice max_request_bytes, so a body of the largest size fits one caller.
    max_body_bytes_in_flight: int | None = Field(default=None, ge=0)
    # Host names served besides the loopback names and `host` (unless 0.0.0.0): DNS rebinding. "*": any.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Origins allowed besides the request's own (scheme://host[:port]); a browser request from any other -> 403.
    allowed_origins: list[str] = Field(default_factory=list)
    # A tenant's events/s through POST /v1/events, bursts alike (0: none).
    tenant_events_per_s: float = Field(default=5000, ge=0)

    # Dead events one redrive or discard request acts on: {"all": true} takes this many (the answer says "more"),
    # a longer eventIds or events list -> 413 batch_too_large. A request stays seconds long, whatever the DLQ holds.
    dlq_batch_max: int = Field(default=1000, ge=1)
    # --- receipt streams (producers/http/streams/) ---
    max_streams: int = Field(default=1000, ge=1)  # open receipts streams per web process; more -> 429
    max_streams_per_credential: int = Field(default=50, ge=1)  # the same, per credential; more -> 429
    tenant_max_streams: int = Field(
        default=500, ge=0
    )  # one tenant's open streams, all web processes (0: none)

    @property
    def body_bytes_in_flight(self) -> int:
        """``max_body_bytes_in_flight``, or its default: 32 MiB or twice the largest body, whichever is larger."""
        if self.max_body_bytes_in_flight is not None:
            return self.max_body_bytes_in_flight
        return max(DEFAULT_BODY_BYTES_IN_FLIGHT, 2 * self.max_request_bytes)

    @property
    def revoke_settle_ms(self) -> int:
        """How long after a key's revoke a request it authenticated may still write: every process's auth cache
        window, then the body that request may still be reading, then a margin for its store call (a tenant's
        deletion waits this out: worker/ops/tenant_deletion.py)."""
        return int((self.auth_cache_s + self.body_timeout_s + REVOKE_SETTLE_MARGIN_S) * 1000)

    @model_validator(mode="after")
    def _a_largest_body_fits_one_caller(self) -> DoorSettings:
        budget, largest = self.max_body_bytes_in_flight, self.max_request_bytes
        if budget and budget < 2 * largest:
            raise ValueError(
                f"AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT ({budget}) must be 0 or at least twice "
                f"AGENT_SIGNAL_MAX_REQUEST_BYTES ({largest}): one credential may hold half of it"
            )
        return self

    @field_validator("bootstrap_key", "api_token", mode="before")
    @classmethod
    def _without_surrounding_space(cls, value: object) -> object:
        """The newline or CR a secret file or ``"$(cat key.txt)"`` leaves: no client could send it (a header
        cannot carry it), and the CLI sends the key without it."""
        return value.strip() if isinstance(value, str) else value

    @field_validator("ops_open", mode="before")
    @classmethod
    def _no_loopback(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() == "loopback":
            raise ValueError(
                "'loopback' was removed (behind a proxy every caller is loopback): use always or never"
            )
        return value


def deletion_settle(settings: Settings, door: DoorSettings) -> Settle:
    """How long a tenant's deletion waits (worker/ops/tenant_deletion.py): after its last revoke, for a request let
    in before it (:attr:`DoorSettings.revoke_settle_ms`); after its first call, for work begun before its tombstone
    was read (a drain under its lease, a relay under its claim, a plugin task within its hard time limit); after its
    end, before its name is used again (a message redelivered after the visibility timeout)."""
    from worker.ops.tenant_deletion import Settle  # the engine's, loaded by the verbs that delete only

    margin_ms = int(REVOKE_SETTLE_MARGIN_S * 1000)
    running_ms = max(
        int(settings.lease_ttl_s * 1000), settings.outbox_lease_ms, settings.task_time_limit_s * 1000
    )
    return Settle(door.revoke_settle_ms, running_ms + margin_ms, settings.visibility_timeout_s * 1000)


def door_settings(settings: Settings) -> DoorSettings:
    """The door's section: the environment plus the door's keyword extras given to ``settings``; a bad value
    raises :class:`~worker.settings.SettingsError` naming the variable."""
    return plugin_settings(DoorSettings, settings)
