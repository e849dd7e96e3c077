"""The plugin model: what a plugin contributes (:class:`Plugin`), what the engine hands it per process
(:class:`PluginRuntime`), and its Celery tasks (:class:`PluginTask`). ``worker.plugin`` re-exports them: plugins
import that module, never this one (worker/runtime/assembly.py loads and assembles them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel as _BaseModel  # payload schemas are pydantic models
from redis import Redis

from worker import settings as _settings
from worker.chain.context import Deps
from worker.chain.outbox_records import Deliverer, record_id
from worker.chain.registry import Policy, check_takes
from worker.intake.emitter import AdmissionHook, Emitter
from worker.keys.layout import EngineKeys
from worker.ops.erasure import UserEraser
from worker.outbox.dead import fail_delivered
from worker.settings import PluginSettings, Settings
from worker.store.receipts import ReceiptStore
from worker.store.scripts import Scripts

__all__ = ["Plugin", "PluginRuntime", "PluginTask", "PoliciesSpec"]

S = TypeVar("S", bound=PluginSettings)


@dataclass(frozen=True, slots=True)
class PluginRuntime:
    """What the engine hands a plugin when it builds its policies, services, hooks and tasks (per process).

    ``redis`` is for reads (handlers write through ``ctx.effects``); ``emitter`` enqueues now (for tasks
    that run outside a chain; handlers use ``ctx.emit``); ``publish(task, payload)`` sends one of the
    plugins' tasks (None in the web process)."""

    settings: Settings
    redis: Redis
    keys: EngineKeys  # the layout: ``keys.for_tenant(t)`` is a tenant's (a handler's own: ``ctx.keys``)
    emitter: Emitter | None = None
    publish: Callable[[str, dict[str, Any], str | None], None] | None = None
    deps: Deps = field(default_factory=Deps)  # every loaded plugin's typed dependencies (for deliverers)

    def settings_for(self, model: type[S]) -> S:
        """The plugin's validated settings."""
        return _settings.plugin_settings(model, self.settings)

    def fail_record(self, tenant: str, scope_key: str, kind: str, key: str, error: str) -> bool:
        """Settle the outbox record a handler of ``tenant`` staged with ``ctx.outbox(kind, …, key=key)`` in
        ``scope_key`` ``dead`` after its delivery: the work its deliverer handed on (a plugin task) failed for good.
        ``GET /v1/outbox/dead`` lists it with ``error`` and ``POST /v1/outbox/redrive`` delivers it again. True when
        it is dead now (it was ``delivered``, or still claimed by the relay that handed it on); False when it is gone
        (retention, erasure), dead already, or pending unclaimed (it will be delivered again)."""
        keys = self.keys.for_tenant(tenant)
        return fail_delivered(Scripts.register(self.redis), keys, scope_key, record_id(kind, key), error)

    def receipts(self, tenant: str) -> ReceiptStore:
        """``tenant``'s receipts (append-once by id, indexed by user, agent and topic)."""
        return ReceiptStore(self.redis, self.keys.for_tenant(tenant), ttl_s=self.settings.receipt_retention_s)


@dataclass(frozen=True, slots=True)
class PluginTask:
    """A Celery task owned by a plugin: ``run(runtime, payload)``; delivered at least once (acks late).

    A run that raises is tried again after a full-jitter backoff (``AGENT_SIGNAL_RETRY_BASE_MS`` /
    ``AGENT_SIGNAL_RETRY_CAP_MS``, as an event's retries), ``max_attempts`` runs in all (None:
    ``AGENT_SIGNAL_MAX_ATTEMPTS``); one that raises PermanentFailure is not tried again. After the last,
    ``dead(runtime, payload, error)`` puts the work where it is listed and redriven (the agent run:
    :meth:`PluginRuntime.fail_record` settles the outbox record that asked for it ``dead``); one that raises is
    called again after the backoff, up to ``max_attempts`` more times, the work not run again; without a hook, or
    past those, the failure is logged and the message acked (worker/runtime/tasks.py)."""

    name: str
    run: Callable[[PluginRuntime, dict[str, Any]], None]
    max_attempts: int | None = None
    dead: Callable[[PluginRuntime, dict[str, Any], str], None] | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"plugin task {self.name}: max_attempts must be at least 1")


PoliciesSpec = Sequence[Policy] | Callable[[PluginRuntime], Sequence[Policy]]


@dataclass(frozen=True, slots=True)
class Plugin:
    """One concern's policies, settings, typed services, tasks and door checks (see the module docstring)."""

    name: str
    policies: PoliciesSpec = ()
    settings: type[PluginSettings] | None = None
    services: Callable[[PluginRuntime], object] | None = None
    tasks: Sequence[PluginTask] = ()
    admission: Callable[[PluginRuntime], AdmissionHook] | None = None
    source_types: Sequence[str] = field(default_factory=tuple)
    payload_schemas: Mapping[str, type[_BaseModel]] = field(default_factory=dict)
    deliverers: Mapping[str, Callable[[PluginRuntime], Deliverer]] = field(default_factory=dict)
    user_fields: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # What it stores of a user, erased with the engine's part of ``DELETE /v1/users/{userId}``.
    erase_user: UserEraser | None = None

    def __post_init__(self) -> None:
        """What can be checked of the fields before anything runs (each wrong one failed only when used: every
        event of a type, every erasure, every delivery); the plugin loader names the plugin with it."""
        for name in ("source_types",):
            if isinstance(
                getattr(self, name), str
            ):  # a str is a sequence of letters: "a.b" would admit "a", "."
                raise TypeError(f"Plugin({self.name!r}): {name} is a list of types, not one string")
        for source_type, model in dict(self.payload_schemas).items():
            if not (isinstance(model, type) and issubclass(model, _BaseModel)):
                raise TypeError(
                    f"Plugin({self.name!r}): payload_schemas[{source_type!r}] must be a pydantic model class "
                    f"(a BaseModel subclass), not {model!r}"
                )
        if self.erase_user is not None:
            check_takes(
                self.erase_user, 4, f"Plugin({self.name!r}): erase_user", "(redis, keys, user_id, scopes)"
            )
        for kind, factory in dict(self.deliverers).items():
            check_takes(factory, 1, f"Plugin({self.name!r}): deliverers[{kind!r}]", "(runtime), a factory")

    def build_policies(self, runtime: PluginRuntime) -> list[Policy]:
        """The plugin's policies for this process."""
        return list(self.policies(runtime) if callable(self.policies) else self.policies)
