"""The engine's way in: validate events, ask the plugins' admission hooks, store them, publish drains.

Every event enters through an :class:`Emitter`: the SDK ``Producer`` (and so ``POST /v1/events`` and the
CLI) wraps one, plugin tasks outside a chain use ``runtime.emitter``, and handlers inside a chain use
``ctx.emit``, which validates and admits the event at once but stages it for the event's fenced commit.
One implementation of validation, the size limits and the admission hooks serves them all.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError

from worker.core.errors import EventOfAnotherUser, GuardErased, OverLimit, PermanentFailure
from worker.core.ids import scope_key_problem
from worker.core.nodes import trusted
from worker.core.scope import confined_scope_key, is_own_scope
from worker.core.source_types import SourceTypePolicy
from worker.core.tenancy import DEFAULT_TENANT, scope_ref
from worker.intake.json_paths import NOT_TEXT, unencodable
from worker.intake.source_event import (
    EnqueueResult,
    EventError,
    InvalidEvent,
    PayloadTooDeep,
    SourceEvent,
    StoreUnavailable,
    field_path,
    parse_event,
    payload_text,
    prepare,
    pydantic_error,
    resolve_user,
)
from worker.keys.layout import Keys
from worker.settings import Settings
from worker.store.events import EnqueueOutcome, EventStore, PreparedEvent, ReadyPush
from worker.store.server.safety import describe_store_error, note_store_failure
from worker.telemetry.log_privacy import describe_error

__all__ = ["NOT_TEXT", "AdmissionHook", "Emitter", "EventLike", "ReadyQueue", "StagedEmits", "UnlessErased"]

log = logging.getLogger(__name__)

EventLike = SourceEvent | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class UnlessErased:
    """An admission hook's answer for an event it admits on one condition: while the tenant's event ``event_id``
    (looked up in the admitted event's scope bucket: with one bucket, the default, wherever it is) is no tombstone.
    The enqueue script checks it with the write, so an erasure cannot slip between the hook's own look and the
    store; once one made it a tombstone, the event is answered ``status`` and not stored, and the rest of its
    batch is stored. (Events admitted by a chain's commit, follow-ups, are not checked: they run under their
    scope's lease, which an erasure takes too.)"""

    event_id: str
    status: str = "gated"


AdmissionHook = Callable[[Sequence[PreparedEvent]], Mapping[int, str | UnlessErased]]
"""Called with a validated batch; answers ``{index: status}`` for the events it refuses (e.g. ``gated``), or
``{index: UnlessErased(event_id)}`` for one it admits only while another event is no tombstone."""

# what a field holding a lone surrogate is told (the door's words, producers/http/strict_json.py): json writes it,
# UTF-8 cannot, so it could be neither stored nor sent


class ReadyQueue(Protocol):
    """Making scopes ready inside the enqueue script, where the store allows it (worker.runtime.fair.FairQueue)."""

    def admission_push(self, client: Any, tenant: str) -> ReadyPush | None:
        """ENQUEUE_PUSH's fair-share fields for ``tenant``, or None: publish after the enqueue."""

    def send(self, count: int) -> None:
        """Send ``count`` drain_next messages (tickets ENQUEUE_PUSH took)."""


STORED = (
    "accepted",
    "duplicate",
)  # what an enqueue stored or found stored (others: an admission hook's verdict)


class Emitter:
    """Validate, admit and enqueue source events: one per process, for every tenant (the tenant given to
    :meth:`validate` travels in each prepared event); ``publish(scopeRef)`` sends a drain task."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        publish: Callable[[str], None],
        *,
        publish_many: Callable[[Sequence[str]], None] | None = None,
        ready: ReadyQueue | None = None,
        source_types: Iterable[str] = (),
        admission: Sequence[AdmissionHook] = (),
        payload_schemas: Iterable[tuple[str, type[BaseModel]]] = (),
        user_fields: Iterable[tuple[str, Sequence[str]]] = (),
    ) -> None:
        self.settings = settings
        self.store = store
        self.publish = publish
        # Many scopes' drains at once (one round trip): FairQueue.publish_many; else one publish each.
        self.publish_many = publish_many
        # Where the store is one Redis, the enqueue script makes the scopes ready itself (ENQUEUE_PUSH).
        self.ready = ready
        self.types = SourceTypePolicy(
            allow_unknown=settings.allow_unknown_source_types,
            extra=[*settings.extra_source_types, *source_types],
        )
        self.admission = tuple(admission)
        self.payload_schemas: dict[str, list[type[BaseModel]]] = {}
        for (
            source_type,
            model,
        ) in payload_schemas:  # the plugins' payload models, each must accept the payload
            self.payload_schemas.setdefault(source_type, []).append(model)
        # Where the plugins' handlers read a user in a payload (besides its userId): each must name the event's.
        self.user_fields: dict[str, list[str]] = {}
        for source_type, paths in user_fields:
            self.user_fields.setdefault(source_type, []).extend(paths)
        # The door (SDK, HTTP, CLI) enforces the inbox and tenant limits; the engine's own emits (plugin
        # tasks reporting a run) do not: refusing those would lose what a run already did.
        self.enforce_limits = False
        # Where a worker counts the events it enqueues itself (``counted(statuses, tenant)``, each accepted or
        # duplicate: origin follow_up); the door's Producer counts its own, so its emitter leaves this None.
        self.counted: Callable[[Sequence[str], str], None] | None = None

    def validate(
        self,
        event: EventLike,
        *,
        tenant: str = DEFAULT_TENANT,
        prefix: str = "",
        own_user: str | None = None,
        scope_key: str | None = None,
    ) -> PreparedEvent:
        """Validate and prepare one of ``tenant``'s events (its id, keys and scope ref are that tenant's), or
        raise InvalidEvent naming the field. ``own_user``: the user in whose own scopes the event must run (a
        follow-up of a chain in that user's own scope, :class:`StagedEmits`): a scope it names or derives
        outside them is put under ``user:<id>/``, as the door does for a user token's event. ``scope_key``: the
        scope the engine resolved for it (a plugin task's event that runs where the event that asked for it ran):
        held to the scope-key rule, not to a producer's ``scopeKey`` id rule, since a derived or confined scope
        may be longer (``topic:`` + a 256-character topic id; :data:`~worker.core.ids.SCOPE_KEY_MAX_LENGTH`)."""
        data = event.model_dump(by_alias=True, exclude_none=True) if isinstance(event, SourceEvent) else event
        parsed = parse_event(data, self.types, prefix=prefix)
        if scope_key is not None:
            parsed = _in_scope(parsed, scope_key, _at(prefix, "scopeKey"))
        if own_user is not None:
            parsed = _in_own_scope(parsed, own_user)
        self.check_payload(parsed.source_type, parsed.payload, prefix=prefix)
        user = resolve_user(parsed, self.user_fields.get(parsed.source_type, ()), prefix=prefix)
        field = f"{prefix}.payload" if prefix else "payload"
        try:
            text = payload_text(parsed.payload)  # also the stored body's payload
            # a key not a str (nested: the Source's path writes it as json does), or a nan or an inf, refused here
            # as the door and HttpProducer refuse it (allow_nan=False), not stored as null
            measured = (
                text
                if text is not None
                else json.dumps(parsed.payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            )
        except PayloadTooDeep as exc:
            raise InvalidEvent(
                EventError(code="invalid_field", message=f"{field} {exc}", field=field)
            ) from None
        # an SDK caller's datetime, bytes, set, nan or inf; an int too long: named by its path where one value is
        # to blame (payload.score), as the door names a body's
        except (TypeError, ValueError) as exc:
            at, message = unencodable(parsed.payload, field) or (field, f"{field} must be JSON: {exc}")
            raise InvalidEvent(EventError(code="invalid_field", message=message, field=at)) from None
        try:
            size = len(measured.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate, named by its path as the door names a body's
            at, message = unencodable(parsed.payload, field) or (field, f"{field} {NOT_TEXT}")
            raise InvalidEvent(EventError(code="invalid_field", message=message, field=at)) from None
        _utf8(parsed.source_type, _at(prefix, "sourceType"))  # the one text field no id rule keeps to ASCII
        if size > self.settings.max_event_bytes:
            raise InvalidEvent(
                EventError(
                    code="payload_too_large",
                    message=f"{field} is {size} bytes; the limit is {self.settings.max_event_bytes}",
                    field=field,
                ),
                status_code=413,
            )
        return prepare(parsed, tenant=tenant, user_id=user, payload_json=text)

    def check_payload(self, source_type: str, payload: Mapping[str, Any], *, prefix: str = "") -> None:
        """Raise InvalidEvent naming ``payload.<field>`` when a plugin's payload model for ``source_type``
        refuses ``payload`` (the 422 the door answers, instead of an event that dies in the worker)."""
        for model in self.payload_schemas.get(source_type, ()):
            try:
                model.model_validate(payload)
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                where = field_path(("payload",), prefix) or "payload"
                error = pydantic_error(first, prefix=where, model_name=f"{source_type} payload")
                raise InvalidEvent(error) from None

    def validate_many(
        self, events: Sequence[EventLike], *, tenant: str = DEFAULT_TENANT, single: bool = False
    ) -> list[PreparedEvent]:
        """Validate a batch (all or nothing): InvalidEvent names ``events[i].field`` (``field`` when single)."""
        if len(events) > self.settings.max_batch_events:
            raise InvalidEvent(
                EventError(
                    code="batch_too_large",
                    message=f"events has {len(events)} items; the limit is {self.settings.max_batch_events}",
                    field="events",
                ),
                status_code=413,
            )
        return [
            self.validate(e, tenant=tenant, prefix="" if single else f"events[{i}]")
            for i, e in enumerate(events)
        ]

    def verdicts(self, prepared: Sequence[PreparedEvent]) -> dict[int, str]:
        """What the admission hooks refuse: ``{index: status}`` (the first hook to refuse an event wins)."""
        return self.answers(prepared)[0]

    def answers(self, prepared: Sequence[PreparedEvent]) -> tuple[dict[int, str], dict[int, UnlessErased]]:
        """The admission hooks' answers: the events they refuse (``{index: status}``, the first refusal wins) and
        those admitted on a condition (``{index: UnlessErased}``, the first one wins; a refusal beats it). An
        answer that is neither a non-empty str nor an UnlessErased with one is a plugin's bug, raised here,
        before anything is stored."""
        refused: dict[int, str] = {}
        guarded: dict[int, UnlessErased] = {}
        for hook in self.admission:
            for index, answer in hook(prepared).items():
                if isinstance(answer, UnlessErased) and answer.event_id and answer.status:
                    guarded.setdefault(index, answer)
                elif isinstance(answer, str) and answer:
                    refused.setdefault(index, answer)
                else:
                    raise TypeError(
                        f"admission hook {hook!r} answered {answer!r} for event {index}: not a status"
                    )
        return refused, {i: g for i, g in guarded.items() if i not in refused}

    def enqueue(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueResult]:
        """Admit, claim and append each event, then publish one drain per scope that needs one; a store error
        raises :class:`StoreUnavailable` (worded by :func:`worker.store.server.safety.describe_store_error`). One
        tenant's events (the batch of one request)."""
        if not prepared:
            return []
        keys = self.store.keys.for_tenant(prepared[0].tenant)
        try:
            refused, guarded = self.answers(prepared)
        except RedisError as exc:  # a hook could not read the store (the self-iteration gate): nothing stored
            message = describe_store_error(exc, "the batch")
            raise StoreUnavailable(message, retry_after_s=self.settings.store_retry_after_s) from exc
        batch = prepared
        if guarded:
            batch = [
                replace(p, unless_erased=guarded[i].event_id) if i in guarded else p
                for i, p in enumerate(prepared)
            ]
        while True:
            try:
                return self._store(batch, refused, keys)
            except GuardErased as exc:  # nothing stored: the event answered as its hook asked, the rest again
                tripped = [i for i in guarded if batch[i].event_id == exc.event_id and i not in refused]
                if not tripped:  # not one of this batch's guards: never loop on it
                    raise StoreUnavailable(str(exc), retry_after_s=self.settings.store_retry_after_s) from exc
                refused.update({i: guarded[i].status for i in tripped})  # a repeat of it in the batch too
                log.info("an event refused at the write: the event its admission named was erased")

    def _store(
        self, prepared: Sequence[PreparedEvent], refused: Mapping[int, str], keys: Keys
    ) -> list[EnqueueResult]:
        """:meth:`enqueue`'s store call for the events no hook refused. GuardErased: nothing was stored."""
        allowed = [p for i, p in enumerate(prepared) if i not in refused]
        store, limits = self.store, self.enforce_limits
        # Not while writes wait for replicas: a WAIT that fails after the script would leave its tickets taken
        # and unsent (NotReplicated is raised once the script has run).
        ready = self.ready if allowed and not self.settings.wait_replicas else None
        push = ready.admission_push(store.client, keys.tenant) if ready is not None else None

        stored_before: list[EnqueueOutcome] = []

        def partly(done: list[EnqueueOutcome], taken: int) -> None:  # scope buckets: a later bucket failed
            stored_before.extend(o for o in done if o.status == "accepted")
            self._publish([keys.scope_ref(o.scope_key) for o in done if o.schedule], taken)

        try:
            if push is None:
                stored, tickets = store.enqueue_many(allowed, enforce_limits=limits, on_stored=partly), 0
            else:
                stored, tickets = store.enqueue_and_push(
                    allowed, push, enforce_limits=limits, on_stored=partly
                )
            outcomes = iter(stored)
        except RedisError as exc:  # one script per batch: a refused batch stored none of it
            note_store_failure(store.client, keys.tenant_stats, exc, "enqueue")
            message = describe_store_error(exc, "the batch")
            raise StoreUnavailable(message, retry_after_s=self.settings.store_retry_after_s) from exc
        except EventOfAnotherUser as exc:
            raise _of_another_user(prepared, exc, len(stored_before)) from None
        except GuardErased as exc:
            if not stored_before:
                raise
            message = (
                f"an event's admission named an event erased meanwhile{_partly_stored(len(stored_before))}"
            )
            raise StoreUnavailable(message, retry_after_s=self.settings.store_retry_after_s) from exc
        except OverLimit as exc:
            if not stored_before:
                raise
            message = f"{exc.message}{_partly_stored(len(stored_before))}"
            raise OverLimit(exc.what, message, retry_after_s=exc.retry_after_s, field=exc.field) from None
        results: list[EnqueueResult] = []
        scheduled: dict[str, None] = {}  # scope keys to drain, in first-seen order
        for index, event in enumerate(prepared):
            if index in refused:
                results.append(_result(event.event_id, event.source_id, refused[index]))  # checked: verdicts
                continue
            outcome = next(outcomes)
            if outcome.schedule:
                scheduled.setdefault(outcome.scope_key)
            results.append(_result(outcome.event_id, outcome.source_id, outcome.status))
        self._publish([keys.scope_ref(scope_key) for scope_key in scheduled], tickets)
        if self.counted is not None:
            self.counted([r.status for r in results if r.status in STORED], keys.tenant)
        return results

    def admit(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueOutcome]:
        """Store events their chain already admitted (a follow-up journaled to its own bucket,
        worker/store/journal.py): no admission hooks and no limits, as the commit would have stored them; drains
        sent for the scopes that need one."""
        stored = self._admitted(prepared)
        refs = [
            scope_ref(ev.tenant, o.scope_key) for ev, o in zip(prepared, stored, strict=True) if o.schedule
        ]
        self._publish(refs)
        if self.counted is not None and prepared:
            self.counted([o.status for o in stored], prepared[0].tenant)
        return stored

    def _admitted(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueOutcome]:
        """:meth:`admit`'s store call, as the commit admits follow-ups: uncounted toward the retained-events
        quota, and one whose dedupe key holds another user's event answered ``duplicate`` (the commit's admission
        does not compare users; refused here, it held its bucket's journal up, then went dead: a review)."""
        pending = list(enumerate(prepared))  # (place in ``prepared``, event)
        others: set[int] = set()
        while True:
            try:
                stored = self.store.enqueue_many([p for _, p in pending], retained=False) if pending else []
                break
            except EventOfAnotherUser as exc:
                at = next(
                    i
                    for i, (_, p) in enumerate(pending)
                    if (p.event_id, p.user_id or "") == (exc.event_id, exc.user_id)
                )
                others.add(pending.pop(at)[0])
        outcomes = iter(stored)
        return [
            EnqueueOutcome(p.event_id, p.source_id, p.scope_key, "duplicate", False)
            if i in others
            else next(outcomes)
            for i, p in enumerate(prepared)
        ]

    def _publish(self, refs: list[str], tickets: int = 0) -> None:
        """Send the drains: of ``refs``, the scopes this enqueue made ready, and ``tickets`` drain_next messages
        for those ENQUEUE_PUSH made ready itself. The events are stored by now, so a broker failure must not
        fail the call: each scope keeps its ``sched`` marker (and its place on the ready list), and the
        reconcile sweep sends for it."""
        if not refs and not tickets:
            return
        try:
            if tickets and self.ready is not None:
                self.ready.send(tickets)
            if refs and self.publish_many is not None:
                self.publish_many(refs)
            else:
                for ref in refs:
                    self.publish(ref)
        except Exception as exc:
            what = f"drains for {len(refs)} scope(s)" if refs else f"{tickets} drain message(s)"
            log.warning(
                "%s not sent (%s); the reconcile sweep will send for their scopes",
                what,
                describe_error(exc),
                extra={"scopeRef": refs[0]} if refs else None,
            )

    def emit(
        self, event: EventLike, *, tenant: str = DEFAULT_TENANT, scope_key: str | None = None
    ) -> EnqueueResult:
        """Validate and enqueue one of ``tenant``'s events now (plugin tasks outside a chain); ``scope_key``: as
        :meth:`validate` takes it."""
        return self.enqueue([self.validate(event, tenant=tenant, scope_key=scope_key)])[0]


class StagedEmits:
    """The follow-up events of one chain: validated and admitted when emitted, stored by the fenced commit.

    A chain whose event runs in its user's own scope (a user token's event: the door put it there) keeps its
    follow-ups in that user's own scopes (:meth:`confine`), else a token could reach another user's scope through
    its chain: a follow-up deriving ``topic:<topicId>`` would run in that topic beside the other user's events,
    past the door's inbox and quota checks. The follow-ups of other events (an API key's) keep their scopes."""

    def __init__(self, emitter: Emitter | None, tenant: str) -> None:
        self.emitter = emitter
        self.tenant = tenant  # the chain's: its follow-ups are its tenant's events
        # the chain's event's scope and user (confine): whether its follow-ups are confined is decided at the
        # first follow-up (most chains emit none, and this is on every drained event's path)
        self._chain: tuple[str, str | None] = ("", None)
        self.events: list[PreparedEvent] = []

    def confine(self, scope_key: str, user_id: str | None) -> None:
        """The chain's event runs in ``scope_key`` for ``user_id``: when that is one of the user's own scopes,
        every follow-up runs in one of them too (:func:`~worker.core.scope.own_scope_key`)."""
        self._chain = (scope_key, user_id)

    @property
    def own_user(self) -> str | None:
        """The user in whose own scopes the follow-ups run, or None: each runs where it names or derives."""
        scope_key, user_id = self._chain
        return user_id if user_id and is_own_scope(scope_key, user_id) else None

    def __call__(self, event: Mapping[str, Any]) -> str:
        if self.emitter is None:
            raise RuntimeError("this pipeline has no emitter: follow-up events cannot be staged")
        try:
            prepared = self.emitter.validate(event, tenant=self.tenant, own_user=self.own_user)
        except InvalidEvent as exc:  # a follow-up that can never be stored: retrying will not fix it
            raise PermanentFailure(f"follow-up event rejected: {exc}", code="INVALID_FOLLOWUP") from None
        refused = self.emitter.verdicts([prepared])
        if refused:
            return refused[0]
        self.events.append(prepared)
        return "staged"


def _in_own_scope(event: SourceEvent, user_id: str) -> SourceEvent:
    """``event`` with the scope it names, or derives as :func:`prepare` would, in ``user_id``'s own scopes."""
    scope = confined_scope_key(
        event.scope_key, event.payload, own_user=user_id, user_id=event.user_id, agent_id=event.agent_id
    )
    return event.model_copy(update={"scope_key": scope})


def _in_scope(event: SourceEvent, scope_key: str, field: str) -> SourceEvent:
    """``event`` in the engine-resolved ``scope_key``, or InvalidEvent naming ``field`` when no scope could be."""
    if (problem := scope_key_problem(scope_key)) is not None:
        raise InvalidEvent(EventError(code="invalid_id", message=f"{field} {problem.message}", field=field))
    return event.model_copy(update={"scope_key": scope_key})


def _at(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _utf8(text: str, field: str) -> bytes:
    """``text`` as UTF-8; InvalidEvent naming ``field`` for a lone surrogate (a str UTF-8 has no form for)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEvent(
            EventError(code="invalid_field", message=f"{field} {NOT_TEXT}", field=field)
        ) from None


_RESULT_GIVEN = frozenset({"event_id", "source_id", "status"})


def _result(event_id: str, source_id: str, status: str) -> EnqueueResult:
    """An event's answer, unvalidated: its strings are the store's, or a status verdicts checked."""
    return trusted(
        EnqueueResult, {"event_id": event_id, "source_id": source_id, "status": status}, set(_RESULT_GIVEN)
    )


def _partly_stored(count: int) -> str:
    """What a refusal adds when, with scope buckets, earlier buckets' scripts stored part of the batch."""
    return (
        f" (with scope buckets a batch is stored bucket by bucket: {count} of its events, in other buckets, were"
        " stored before this refusal; sending the batch again answers them duplicate)"
    )


def _of_another_user(batch: Sequence[PreparedEvent], exc: EventOfAnotherUser, stored: int) -> InvalidEvent:
    """The 422 for an event whose dedupe key is another user's event (named by its place in the batch)."""
    index = next(
        (i for i, p in enumerate(batch) if p.event_id == exc.event_id and (p.user_id or "") == exc.user_id), 0
    )
    event = batch[index]
    where = f"events[{index}]."  # a request of one event (not a batch) says it without: as_single
    owner = "another user's event, or one that names no user" if event.user_id else "a user's event"
    message = (
        f"{where}userId: sourceId {event.source_id!r} of type {event.source_type!r} in scope {event.scope_key!r}"
        f" is already {owner} (a scope's source id names one event, of one user or of none); give this event a"
        " sourceId or a scopeKey of its own"
    )
    if stored:
        message += _partly_stored(stored)
    return InvalidEvent(EventError(code="user_mismatch", message=message, field=f"{where}userId"))
