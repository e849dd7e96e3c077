"""What a handler receives besides its node: the clock, the scope, staged writes, follow-up events and its
plugin's typed dependencies.

Every Redis write a handler makes is *staged* and fenced:

* a source or signal handler's ``ctx.effects.call(...)`` and ``ctx.emit(event)`` are collected for the whole
  chain and applied by the event's fenced commit script, only when the event commits ``done``. A retried
  attempt sees none of them; a dead event leaves no trace of them.
* an action handler's ``ctx.effects`` are applied in one server-side script together with the action's
  idempotency mark, only if the lane is still unmarked and our fencing number is still current, so an
  applied action survives a later failure of the chain and is never applied twice. A retried attempt
  therefore starts from the first attempt's state *plus* the effects of the actions that applied (whose
  results it replays instead of running them again). Action handlers cannot emit follow-up events.

Staged commands are checked when staged (:data:`STAGEABLE` commands on the deployment's own, non-engine
keys) and again by the script (the key's type) before anything is written.

A handler whose effect lives outside Redis (HTTP, a database) stages it with :meth:`HandlerContext.outbox`: the
relay delivers it after the commit, at least once, with a key the receiver dedupes on (docs/plugins.md). One that
calls the other system itself, inside the handler, holds the scope's drain for the call's length and gets
at-least-once semantics bounded only by the idempotency lane (marked after ``applied``): a crash between the call
and the commit calls it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from worker.chain.outbox_records import OutboxRecord, outbox_commands, record_id
from worker.core.clock import now_ms
from worker.core.errors import PermanentFailure
from worker.core.idempotency import effect_key
from worker.keys.buckets import slot_tag
from worker.keys.layout import BucketKeys

if TYPE_CHECKING:
    from worker.core.nodes import Action, ExecutorResult, Source

__all__ = ["ActionPort", "Deps", "EffectBuffer", "HandlerContext", "MissingDependency"]

RedisArg = str | int | float | bytes
T = TypeVar("T")


class MissingDependency(LookupError):
    """A handler asked for a dependency its plugin did not provide."""


# The write commands a handler may stage (the scripts' STAGED allow-list), each on one key: args[1].
STAGEABLE = frozenset(
    "SET SETNX INCR INCRBY DECRBY HSET HSETNX HDEL HINCRBY HINCRBYFLOAT RPUSH LPUSH LTRIM LREM SADD SREM "
    "ZADD ZREM ZREMRANGEBYSCORE ZINCRBY DEL EXPIRE PEXPIRE PERSIST PUBLISH".split()
)


@dataclass(slots=True)
class EffectBuffer:
    """Redis write commands staged by handlers, applied atomically by a fenced script (or not at all).

    A command is checked when staged: one of :data:`STAGEABLE`, on one key of this deployment's prefix that
    is not the engine's own state; a refused command is a PermanentFailure (it can never succeed)."""

    commands: list[list[RedisArg]] = field(default_factory=list)
    keys: BucketKeys | None = None
    # The engine's own staged writes (the outbox): applied after every handler command succeeded.
    _engine: list[list[RedisArg]] = field(default_factory=list)
    _outbox_ids: set[str] = field(default_factory=set)

    def call(self, *args: RedisArg) -> None:
        """Stage one Redis command (``ctx.effects.call("HSET", key, "f", "v")``); the key is ``args[1]``."""
        if len(args) < 2:
            raise PermanentFailure("an effect needs a command and a key", code="INVALID_EFFECT")
        command, key = str(args[0]).upper(), _text(args[1])
        if command == "THEN":
            raise PermanentFailure(
                "THEN is staged only by call_once, beside the SET NX it follows", code="INVALID_EFFECT"
            )
        if command not in STAGEABLE:
            raise PermanentFailure(
                f"{command} cannot be staged (allowed: {', '.join(sorted(STAGEABLE))})", code="INVALID_EFFECT"
            )
        touched = [_text(a) for a in args[1:]] if command == "DEL" else [key]  # DEL takes many keys
        keys = self.keys
        refused = [k for k in touched if keys is not None and (not keys.owns(k) or keys.is_engine_key(k))]
        if refused:  # named: with DEL's many keys, the first may be fine
            raise PermanentFailure(
                f"{command} {refused[0]!r}: a handler writes only its own tenant's keys (ctx.key(name) or "
                "ctx.keys), never the engine's",
                code="INVALID_EFFECT",
            )
        self.commands.append([command, *args[1:]])

    def call_once(self, first: Sequence[RedisArg], *then: Sequence[RedisArg]) -> None:
        """Stage ``first``, a ``SET key value NX …``, and the commands ``then`` that run only when it writes (a
        second receipt with an id its user already has adds no index entry, count or announcement). ``then``
        stays in ``first``'s key's slot, so the commands commit together where a tenant spans scope buckets."""
        if str(first[0]).upper() != "SET" or "NX" not in {_text(a).upper() for a in first[3:]}:
            raise PermanentFailure("call_once needs a SET … NX first", code="INVALID_EFFECT")
        slot = slot_tag(_text(first[1]))
        for command in then:
            named = command[1:] if str(command[0]).upper() == "DEL" else command[1:2]
            if any(slot_tag(_text(k)) != slot for k in named):
                raise PermanentFailure(
                    f"{_text(command[0])} {_text(command[1])!r}: a command after a SET NX is in that key's slot",
                    code="INVALID_EFFECT",
                )
        self.call(*first)
        checked = len(self.commands)
        try:
            for command in then:
                self.call(*command)
        except PermanentFailure:
            del self.commands[checked - 1 :]
            raise
        self.commands.insert(checked, ["THEN", str(len(then))])

    def _stage_outbox(self, record_id: str, commands: list[list[str | int]]) -> None:
        if record_id in self._outbox_ids:
            raise PermanentFailure(
                f"outbox record {record_id!r} staged twice: give each call its own key=",
                code="INVALID_EFFECT",
            )
        self._outbox_ids.add(record_id)
        self._engine.extend(list(c) for c in commands)

    def incr(self, key: str, amount: int = 1) -> None:
        self.call("INCRBY", key, amount)

    def clear(self) -> None:
        self.commands.clear()
        self._engine.clear()
        self._outbox_ids.clear()

    def to_json_list(self) -> list[list[str]]:
        """The commands as strings (the scripts' ``cjson.decode`` input): the handlers', then the engine's, so
        an outbox record is written only after every handler write applied."""
        return [
            [a if isinstance(a, str) else _text(a) for a in cmd] for cmd in [*self.commands, *self._engine]
        ]

    def __bool__(self) -> bool:
        return bool(self.commands or self._engine)


def _text(value: RedisArg) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class Deps:
    """The typed dependencies of the loaded plugins, looked up by their class (one instance per class)."""

    def __init__(self, instances: Mapping[type[Any], object] | None = None) -> None:
        self._by_type: dict[type[Any], object] = dict(instances or {})

    def add(self, instance: object) -> None:
        self._by_type[type(instance)] = instance

    def get(self, kind: type[T]) -> T:
        found = self._by_type.get(kind)
        if not isinstance(found, kind):
            raise MissingDependency(
                f"no {kind.__name__} was provided: is the plugin that builds it loaded (AGENT_SIGNAL_PLUGINS)?"
            )
        return found


class ActionPort(Protocol):
    """How the scheduler reaches idempotency storage and the lease; Redis-backed in the worker."""

    def lookup(
        self, action: Action, idempotency_key: str, aliases: Sequence[str] = ()
    ) -> ExecutorResult | None:
        """The stored result of an already-applied action with this key (else under one of ``aliases``: the key's
        other form, worker/core/idempotency.py), else None."""

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        """Apply ``effects`` and mark the lane atomically; False when another holder already applied it."""

    def ensure_live(self) -> None:
        """Raise LeaseLost when the scope lease is no longer ours."""


Emit = Callable[[Mapping[str, Any]], str]


def _no_emit(event: Mapping[str, Any]) -> str:
    raise PermanentFailure(
        "only source and signal handlers emit follow-up events (an action's effects commit with its lane)",
        code="EMIT_NOT_ALLOWED",
    )


@dataclass(slots=True)
class HandlerContext:
    """Per-node context (LobeHub's RuntimeProcessorContext, plus staged writes and typed dependencies)."""

    scope_key: str
    node_timestamp: int
    attempt: int = 1
    max_attempts: int = 1
    idempotency_key: str | None = None
    # the keys of the other form the action's lane may be under (worker/core/idempotency.py): read, never written
    idempotency_aliases: tuple[str, ...] = ()
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    keys: BucketKeys = field(default_factory=BucketKeys)
    deps_of: Deps = field(default_factory=Deps)
    emitter: Emit = _no_emit
    source: Source | None = None  # the chain's source event (who sent it: userId, agentId, workspaceId)
    outbox_retention_s: int = 7 * 24 * 60 * 60

    def now(self) -> int:
        """The node's own timestamp (fixed for every handler of the node), in ms."""
        return self.node_timestamp

    @property
    def tenant(self) -> str:
        """The tenant whose event this is (every key from ``ctx.keys`` / ``ctx.key`` is that tenant's)."""
        return self.keys.tenant

    def key(self, name: str) -> str:
        """A fully qualified key for the plugin's own data in this scope (tenant, prefix and hash tag
        included)."""
        return self.keys.plugin(self.scope_key, name)

    def deps(self, kind: type[T]) -> T:
        """The plugin's typed dependencies of class ``kind`` (raises MissingDependency when not provided)."""
        return self.deps_of.get(kind)

    def outbox(self, kind: str, payload: Mapping[str, Any], *, key: str | None = None) -> str:
        """Stage an outbound call (delivered by the relay, at least once, with ``key`` passed on as its
        idempotency key; default: the action's idempotency key hashed with the tenant, the source's user and the
        scope, :func:`~worker.core.idempotency.effect_key`, so one source id in two tenants, for two users or in
        two scopes never makes one key). Committed with this handler's writes, so a refused commit leaves none. Returns the
        record id."""

        if key:
            idem = key
        elif self.idempotency_key:
            user = self.source.user_id if self.source is not None else None
            idem = effect_key(self.keys.tenant, user, self.scope_key, self.idempotency_key)
        else:
            raise PermanentFailure("ctx.outbox needs key= outside an action handler", code="INVALID_EFFECT")
        event_id = self.source.event_id if self.source is not None and self.source.event_id else ""
        record = OutboxRecord(
            id=record_id(kind, idem),
            kind=kind,
            key=idem,
            payload=dict(payload),
            scope_key=self.scope_key,
            event_id=event_id or "",
            created_at=now_ms(),  # the service's clock (Redis's): a producer's timestamp must not postpone a delivery
            tenant=self.keys.tenant,
        )
        self.effects._stage_outbox(record.id, outbox_commands(self.keys, record, self.outbox_retention_s))
        return record.id

    def emit(self, event: Mapping[str, Any]) -> str:
        """Stage a follow-up source event (validated now, admitted by the fenced commit); returns its
        status: ``staged`` or an admission hook's verdict such as ``gated``."""
        return self.emitter(event)
