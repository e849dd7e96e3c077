"""The per-session store: settings, the context (messages, checkpoints, token usage) and the D-Mail slot.

Semantics follow kimi-cli's ``Context`` (reference kimi-dmail.md §2.3, §2.5):

* checkpoints are numbered from 0; each writes a ``_checkpoint`` record and, when the session enabled
  D-Mail, the user message ``<system>CHECKPOINT n</system>``;
* ``revert_to(id)`` keeps exactly what came before the target's ``_checkpoint`` record; the token count is
  the last ``_usage`` record kept; ``Checkpoint {id} does not exist`` for an id not yet issued;
* ``clear`` (and compaction, which clears, checkpoints 0 and appends the summary) resets ids to 0.

Bounds (:class:`SessionLimits`, from the sessions' settings (sessions/settings.py) ``session_ttl_s``, ``max_session_messages``,
``max_session_bytes``, ``max_message_bytes``): a write that would pass a cap raises :class:`SessionFull` and
stores nothing (the scripts check before writing, so concurrent appends cannot pass a cap together); every write
refreshes the TTL of all of the session's keys (:func:`session_keys`) in the same script or transaction.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis, WatchError
from redis.commands.core import Script

from sessions.scripts import SessionScripts
from sessions.settings import SessionLimitSettings
from worker.core.retry import backoff_ms
from worker.keys.layout import Keys
from worker.settings import Settings

__all__ = [
    "ContentionError",
    "ContextView",
    "SessionFull",
    "SessionLimits",
    "SessionSettings",
    "SessionStore",
    "SettingsChange",
    "TooManySessions",
    "UnknownCheckpoint",
    "UserQuotaExceeded",
    "session_keys",
    "session_scope",
]

RECORD_ROLES = ("_checkpoint", "_usage", "_system_prompt")
# What a new session's settings hash and its user-index entry take in Redis, counted toward its user's and tenant's
# stored bytes when a user token makes it (measured: MEMORY USAGE of a settings hash 296 B, an index entry ~24 B).
SESSION_BYTES = 320
FORGET_CHUNK = 256  # index entries one cleanup script checks and removes
FORGET_EVERY_S = 60  # a full index is cleaned at most this often per user
SETTINGS_RETRIES = 200  # a settings write's tries while other writes keep changing the session
INCARNATION = "incarnation"  # the settings hash's field: SessionStore.record_identity
# ctxmeta's ``countedFor`` (and a pending D-Mail's ``countedIn``) once the session moved to another user, or its user
# was erased (worker/store/lua/forget_user_bytes.lua): never a key name nor '' (no user), so the next write forgets
# the per-day bookkeeping and nothing is taken back meanwhile (sessions/lua/lib/session.lua); it names no user.
MOVED = "moved"


def session_scope(session_id: str) -> str:
    """The scope key of a session: its events and its state serialize together."""
    return f"session:{session_id}"


def session_keys(keys: Keys, session_id: str, user_id: str | bytes | None) -> list[str]:
    """Every key of one session, in the scripts' KEYS order: context, meta, checkpoints, usage, D-Mail, settings,
    function state, and the user's session index when the session names a user (it lives as long as the
    longest-lived of the user's sessions, so erasure always finds them)."""
    scope = session_scope(session_id)
    found = [
        keys.context(scope),
        keys.context_meta(scope),
        keys.checkpoints(scope),
        keys.usage(scope),
        keys.dmail(scope),
        keys.session(scope),
        keys.functions_state(scope),
    ]
    if user_id:
        found.append(keys.user_sessions(_s(user_id)))
    return found


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """The bounds of one session's state; the defaults are the settings' defaults."""

    session_ttl_s: int = 30 * 24 * 60 * 60
    max_session_messages: int = 10_000  # records in the context list (messages, checkpoint and usage records)
    max_session_bytes: int = 8 * 1024 * 1024  # the context records together; the function-state document
    max_message_bytes: int = 256 * 1024  # one message, D-Mail or artifact
    max_user_bytes: int = 0  # the session's user's stored data (AGENT_SIGNAL_USER_MAX_BYTES; 0: no quota)
    max_tenant_bytes: int = 0  # the tenant's stored user data (AGENT_SIGNAL_TENANT_MAX_BYTES; 0: no quota)
    max_sessions_per_user: int = 10_000  # sessions in one user's index (AGENT_SIGNAL_MAX_SESSIONS_PER_USER)

    @classmethod
    def from_settings(cls, section: SessionLimitSettings, settings: Settings) -> SessionLimits:
        """The sessions' section's bounds, and the engine's stored-bytes quotas (``user_max_bytes``,
        ``tenant_max_bytes``)."""
        return cls(
            session_ttl_s=section.session_ttl_s,
            max_session_messages=section.max_session_messages,
            max_session_bytes=section.max_session_bytes,
            max_message_bytes=section.max_message_bytes,
            max_user_bytes=settings.user_max_bytes,
            max_tenant_bytes=settings.tenant_max_bytes,
            max_sessions_per_user=section.max_sessions_per_user,
        )

    def script_args(self) -> list[int]:
        """ARGV[1..5] of every session script."""
        return [
            self.session_ttl_s,
            self.max_session_messages,
            self.max_session_bytes,
            self.max_user_bytes,
            self.max_tenant_bytes,
        ]

    def quota_exceeded(self, reply: Any, user_id: str | None = None) -> UserQuotaExceeded:
        """A script's ``{'quota', bytes, retryAfterS, 'user'|'tenant'}`` as the error the door answers 429
        (``user_id``: the session's user, which the script was run for)."""
        tenant = _s(reply[3]) == "tenant"
        limit = self.max_tenant_bytes if tenant else self.max_user_bytes
        return UserQuotaExceeded(int(reply[1]), limit, int(reply[2]), tenant=tenant, user_id=user_id)


MOVE_RETRIES = 200  # a script run again after its session moved to another user meanwhile (SessionStore.run)


class ContentionError(RuntimeError):
    """The session stayed too busy to apply a change (after many retries): 503, retry."""


class SessionGone(LookupError):
    """The session's settings, which named its user, went away while a write to it ran: the user was erased (or the
    session expired). Nothing of the write is stored: it would have had no owner, out of every later erasure's
    reach (an audit). Answered 404."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is gone (erased or expired) while this request ran; nothing was stored"
        )


class SessionFull(ValueError):
    """A write would pass one of the session's caps; nothing of it was stored. ``field`` names the request
    field to blame (``messages``, ``messages.3.content``, ``content``; ``userId`` for a user's quota) or is
    None; ``limit`` is the cap."""

    def __init__(self, field: str | None, limit: int, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.limit = limit


class UserQuotaExceeded(SessionFull):
    """The session's user (``user_id`` when known) already stores ``used`` bytes, at
    ``AGENT_SIGNAL_USER_MAX_BYTES``: ``field`` is ``userId``, as for an event refused for its user's bytes
    (worker/core/errors.py). ``tenant``: the tenant's users and sessions together, at
    ``AGENT_SIGNAL_TENANT_MAX_BYTES`` (no field). Nothing was written. ``retry_after_s``: when some of it
    expires (0: it does not by itself). Answered 429."""

    def __init__(
        self, used: int, limit: int, retry_after_s: int, *, tenant: bool = False, user_id: str | None = None
    ) -> None:
        when = "retry once some of it expires" if retry_after_s else "erase or delete some of it first"
        if tenant:
            who, setting = "this tenant's users and sessions already store", "AGENT_SIGNAL_TENANT_MAX_BYTES"
        else:
            user = f"user {user_id!r}" if user_id else "this session's user"
            who, setting = f"{user} already stores", "AGENT_SIGNAL_USER_MAX_BYTES"
        message = f"{who} {used} bytes (the quota is {limit}, {setting}); {when}"
        super().__init__(None if tenant else "userId", limit, message)
        self.used = used
        self.retry_after_s = retry_after_s


class TooManySessions(SessionFull):
    """The user already has ``count`` sessions, at ``AGENT_SIGNAL_MAX_SESSIONS_PER_USER``: no new one is made for
    them until one expires or is deleted (``field`` is ``userId``). Answered 429 ``quota_exceeded``."""

    def __init__(self, user_id: str, count: int, limit: int) -> None:
        message = (
            f"user {user_id!r} already has {count} sessions (at most {limit}, "
            "AGENT_SIGNAL_MAX_SESSIONS_PER_USER); reuse or delete one first"
        )
        super().__init__("userId", limit, message)
        self.count = count


class UnknownCheckpoint(ValueError):
    """kimi's ``ValueError(f"Checkpoint {checkpoint_id} does not exist")``."""

    def __init__(self, checkpoint_id: int) -> None:
        super().__init__(f"Checkpoint {checkpoint_id} does not exist")
        self.checkpoint_id = checkpoint_id


@dataclass(frozen=True, slots=True)
class SessionSettings:
    dmail_enabled: bool = False
    root: bool = True
    functions: tuple[str, ...] = ()
    user_id: str | None = None
    agent_id: str | None = None
    topic_id: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dmailEnabled": self.dmail_enabled,
            "root": self.root,
            "functions": list(self.functions),
        }
        for key, value in (("userId", self.user_id), ("agentId", self.agent_id), ("topicId", self.topic_id)):
            if value is not None:
                data[key] = value
        return data


@dataclass(frozen=True, slots=True)
class ContextView:
    messages: list[dict[str, Any]]
    n_checkpoints: int
    token_count: int

    def to_json_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "nCheckpoints": self.n_checkpoints, "tokenCount": self.token_count}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else value.decode("utf-8")


def _encode(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in messages]


def _check_messages(records: list[str], messages: Sequence[dict[str, Any]], limit: int) -> None:
    """One message over ``max_message_bytes`` → SessionFull naming it (and its largest field)."""
    for index, (record, message) in enumerate(zip(records, messages, strict=True)):
        size = len(record.encode("utf-8"))
        if size > limit:
            biggest = max(
                message, key=lambda k: len(json.dumps(message[k], ensure_ascii=False)), default=None
            )
            field = f"messages.{index}" + ("" if biggest is None else f".{biggest}")
            raise SessionFull(
                field, limit, f"{field}: one message may be at most {limit} bytes; this one is {size}"
            )


def _settings_of(raw: Any) -> SessionSettings:
    """A session's settings from its settings hash (HGETALL's reply)."""
    data = {_s(k): _s(v) for k, v in raw.items()}
    return SessionSettings(
        dmail_enabled=data.get("dmailEnabled") == "1",
        root=data.get("root", "1") == "1",
        functions=tuple(json.loads(data.get("functions", "[]"))),
        user_id=data.get("userId"),
        agent_id=data.get("agentId"),
        topic_id=data.get("topicId"),
    )


class SettingsChange:
    """A write of a session's settings fields (``mapping``, as the hash stores them), and of a new user's session
    index, under WATCH of the settings: two writes moving the session to different users left it in both indexes
    when each read the user before the other wrote (and an erasure of either dropped it). :meth:`commit` makes it
    alone; a caller writing other keys of the session in the same transaction (FunctionStore.update: a PUT's
    settings and its functions' state, both or neither) calls :meth:`watch` under its WATCH, which reads the user
    and raises TooManySessions when a new user has no room, and :meth:`stage` after its MULTI.

    A session moved from one user to another keeps no key name of the first (which holds their id, and which their
    erasure, finding the session no longer theirs, would not touch): ctxmeta's ``countedFor`` and its pending
    D-Mail's ``countedIn`` become :data:`MOVED` in the same transaction."""

    def __init__(self, store: SessionStore, session_id: str, mapping: dict[str, str]) -> None:
        self.store, self.session_id, self.mapping = store, session_id, mapping
        self.scope = session_scope(session_id)
        self.settings_key = store.keys.session(self.scope)
        self.before: str | None = None  # the session's user, read by watch
        self.pending: str | None = None  # its pending D-Mail, read by watch when it moves from a user

    @property
    def moved(self) -> bool:
        """The write moves the session from one user to another (known once :meth:`watch` has read the user)."""
        user = self.mapping.get("userId")
        return bool(user and self.before and user != self.before)

    def watch(self, pipe: Any) -> None:
        """WATCH the settings (and a new user's index: the cap is read under the same watch) and read the user;
        the pending D-Mail too when the session moves from a user."""
        user = self.mapping.get("userId")
        pipe.watch(self.settings_key, *([self.store.keys.user_sessions(user)] if user else []))
        raw = pipe.hget(self.settings_key, "userId")
        self.before = _s(raw) if raw else None
        if user and user != self.before:  # the session joins the user's index: room for one more?
            self.store._check_room(pipe, user)
        if self.moved:
            pipe.watch(self.store.keys.dmail(self.scope))
            pending = pipe.get(self.store.keys.dmail(self.scope))
            self.pending = _s(pending) if pending else None

    def stage(self, pipe: Any) -> None:
        """The writes, queued after MULTI: the fields, the user's session index, what counted for a previous user,
        every key's TTL."""
        keys, user = self.store.keys, self.mapping.get("userId")
        pipe.hset(self.settings_key, mapping=self.mapping)
        if user is not None:  # the user's session index: erasure finds the user's sessions
            if self.before and self.before != user:
                pipe.srem(keys.user_sessions(self.before), self.session_id)
            pipe.sadd(keys.user_sessions(user), self.session_id)
        if self.moved:
            self._forget_counted_for(pipe)
        for key in session_keys(keys, self.session_id, user or self.before):
            pipe.expire(key, self.store.limits.session_ttl_s)

    def _forget_counted_for(self, pipe: Any) -> None:
        """The previous user's count, named in ctxmeta and in the pending D-Mail, becomes :data:`MOVED`: what it
        counted stays in that user's count and the tenant's until its days end (an erasure of that user takes it
        out of the tenant's), and nothing of it is taken back from the new user's (sessions/lua/lib/session.lua)."""
        keys = self.store.keys
        pipe.hset(keys.context_meta(self.scope), "countedFor", MOVED)
        mail = json.loads(self.pending) if self.pending else None
        if isinstance(mail, dict) and mail.get("countedIn") not in (None, MOVED):
            mail["countedIn"] = MOVED
            encoded = json.dumps(mail, ensure_ascii=False, separators=(",", ":"))
            pipe.set(keys.dmail(self.scope), encoded, keepttl=True)

    def commit(self) -> None:
        """Make the write, again while other writes change the session (a script's TTL refresh too), up to
        ``SETTINGS_RETRIES`` times (then ContentionError); nothing to write writes nothing."""
        if not self.mapping:
            return
        for attempt in range(SETTINGS_RETRIES):
            with self.store.client.pipeline(transaction=True) as pipe:
                try:
                    self.watch(pipe)
                    pipe.multi()
                    self.stage(pipe)
                    pipe.execute()
                    return
                except WatchError:
                    time.sleep(backoff_ms(attempt + 1, base_ms=1, cap_ms=50) / 1000)
        raise ContentionError(
            f"session {self.session_id!r} changed under us {SETTINGS_RETRIES} times; try again"
        )


class SessionStore:
    """All session state of one key prefix, bounded by ``limits``."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        limits: SessionLimits | None = None,
        *,
        scripts: SessionScripts | None = None,
    ) -> None:
        self.client = client
        self.keys = keys  # one tenant's
        self.limits = limits or SessionLimits()
        # a process shares one registration (the door builds a store per request, for the caller's tenant)
        self.scripts = scripts if scripts is not None else SessionScripts.register(client)

    def _keys(self, session_id: str) -> tuple[list[str], str]:
        """The session's keys, then the tenant's stored-bytes count and its user's when it names a user; and that
        user ('' for none)."""
        user = self.client.hget(self.keys.session(session_scope(session_id)), "userId")
        found = [*session_keys(self.keys, session_id, user), self.keys.tenant_bytes]
        return ([*found, self.keys.user_bytes(_s(user))] if user else found), _s(user) if user else ""

    def run(self, script: Script, session_id: str, *args: Any) -> Any:
        """Run one session script: the session's keys, the TTL and caps, the user read with the keys, then the
        script's own arguments. A script that finds the session moved to another user meanwhile writes nothing
        (``{'moved'}``): the keys are read again, up to ``MOVE_RETRIES`` times (then ContentionError); when they
        no longer name any user, the session was erased meanwhile (SessionGone). A script
        refused for a quota (``{'quota', …}``, nothing written) raises UserQuotaExceeded naming that user."""
        owner = ""
        for _ in range(MOVE_RETRIES):
            keys, user = self._keys(session_id)
            if owner and not user:  # it named a user, and no longer names any: erased meanwhile
                raise SessionGone(session_id)
            owner = owner or user
            reply = script(keys=keys, args=[*self.limits.script_args(), user, *args])
            if isinstance(reply, list) and reply and reply[0] in ("quota", b"quota"):
                raise self.limits.quota_exceeded(reply, user or None)
            if not (isinstance(reply, list) and len(reply) == 1 and _s(reply[0]) == "moved"):
                return reply
        raise ContentionError(f"session {session_id!r} moved between users {MOVE_RETRIES} times; try again")

    def _admitted(self, reply: Any, field: str | None) -> int:
        """The script's ``{'ok', value}``, or SessionFull for its ``{'full', 'records'|'bytes'}`` (a quota
        reply never gets here: :meth:`run` raises it)."""
        if _s(reply[0]) != "full":
            return int(reply[1])
        if _s(reply[1]) == "records":
            limit, unit = self.limits.max_session_messages, "records"
        else:
            limit, unit = self.limits.max_session_bytes, "bytes"
        where = f"{field}: " if field else ""
        raise SessionFull(field, limit, f"{where}the session's context may hold at most {limit} {unit}")

    # ---- settings ----------------------------------------------------------------------------------

    def get_settings(self, session_id: str) -> SessionSettings:
        return _settings_of(self.client.hgetall(self.keys.session(session_scope(session_id))))

    def record_identity(self, session_id: str) -> tuple[SessionSettings, str] | None:
        """The settings, and the token the session keeps for its life (its incarnation, made at the first ask, in
        its settings hash), in one round trip: the source ids of its records carry the token, so a session made
        again under the same id (after an erasure, or expiry) does not meet its earlier life's records in the
        dedupe window. Of two racing first asks, one token wins. None when none of the session's keys is left:
        asked right after a change, the session was erased since (or expired), and the token would make its
        settings again, and the record go without its user, out of every later erasure's reach (an audit)."""
        key = self.keys.session(session_scope(session_id))
        own = session_keys(self.keys, session_id, None)  # one slot: checked under WATCH with the writes
        for _ in range(MOVE_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(*own)  # type: ignore[no-untyped-call]
                    if not pipe.exists(*own):
                        return None
                    pipe.multi()
                    pipe.hsetnx(key, INCARNATION, secrets.token_hex(4))
                    # a write just refreshed every key of the session
                    pipe.expire(key, self.limits.session_ttl_s)
                    pipe.hgetall(key)
                    data = {_s(k): _s(v) for k, v in pipe.execute()[2].items()}
                    return _settings_of(data), data[INCARNATION]
                except WatchError:
                    continue
        raise ContentionError(f"session {session_id!r} changed under us {MOVE_RETRIES} times; try again")

    def claim(self, session_id: str, user_id: str) -> bool:
        """Make a session that does not exist yet (no key at all) ``user_id``'s; False when it exists. A user
        with ``max_sessions_per_user`` sessions already raises :class:`TooManySessions`, one whose stored bytes
        (or the tenant's) are at the quota :class:`UserQuotaExceeded`; nothing is written then. A new session's
        settings and index entry count ``SESSION_BYTES`` toward both quotas until its TTL."""
        keys = [
            *session_keys(self.keys, session_id, user_id),
            self.keys.tenant_bytes,
            self.keys.user_bytes(user_id),
        ]
        limits = self.limits
        args: list[str | int] = [
            user_id,
            limits.session_ttl_s,
            session_id,
            limits.max_user_bytes,
            limits.max_tenant_bytes,
            limits.max_sessions_per_user,
            SESSION_BYTES,
        ]
        reply = self.scripts.claim(keys=keys, args=args)
        if isinstance(reply, list) and _s(reply[0]) == "sessions" and self._forget_ended_sessions(user_id):
            reply = self.scripts.claim(keys=keys, args=args)  # the index held sessions that had ended
        if isinstance(reply, list) and _s(reply[0]) == "quota":
            raise limits.quota_exceeded(reply, user_id)
        if isinstance(reply, list) and _s(reply[0]) == "sessions":
            raise TooManySessions(user_id, int(reply[1]), limits.max_sessions_per_user)
        return bool(reply)

    def _forget_ended_sessions(self, user_id: str) -> int:
        """Remove from ``user_id``'s session index the sessions that ended (expired or erased: no settings); how
        many. The index lives as long as the user's longest-lived session, so an active user's index keeps every
        session they ever made until the cap is reached; then the whole index is cleaned, at most once every
        ``FORGET_EVERY_S`` per user (a refused new session read the whole index each time, 10,000 commands; a
        sample instead refused users under the cap: two reviews). Each chunk is checked and removed in one script,
        so a session made again meanwhile under an ended one's id stays (erasure finds the user's sessions there)."""
        if not self.client.set(self.keys.user_sessions_cleaned(user_id), "1", nx=True, ex=FORGET_EVERY_S):
            return 0  # cleaned within the minute: what is in the index is live
        index = self.keys.user_sessions(user_id)
        members = sorted(_s(m) for m in self.client.smembers(index))
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(members), FORGET_CHUNK):
            chunk = members[start : start + FORGET_CHUNK]
            settings = [self.keys.session(session_scope(member)) for member in chunk]
            self.scripts.forget_ended(keys=[index, *settings], args=chunk, client=pipe)
        return sum(int(n) for n in pipe.execute())

    def settings_change(self, session_id: str, changes: dict[str, Any]) -> SettingsChange:
        """``changes`` (camelCase keys, already validated) as a write of the settings hash, not yet made."""
        mapping: dict[str, str] = {}
        for key, value in changes.items():
            if key in ("dmailEnabled", "root"):
                mapping[key] = "1" if value else "0"
            elif key == "functions":
                mapping[key] = json.dumps(list(value))
            else:
                mapping[key] = str(value)
        return SettingsChange(self, session_id, mapping)

    def update_settings(self, session_id: str, changes: dict[str, Any]) -> SessionSettings:
        """Merge ``changes`` (camelCase keys, already validated) into the stored settings."""
        self.settings_change(session_id, changes).commit()
        return self.get_settings(session_id)

    def _check_room(self, pipe: Any, user_id: str) -> None:
        """TooManySessions when ``user_id`` already has ``max_sessions_per_user`` sessions (read under WATCH;
        the index cleaned of ended sessions first when it is full)."""
        cap = self.limits.max_sessions_per_user
        count = int(pipe.scard(self.keys.user_sessions(user_id)))
        if count >= cap and self._forget_ended_sessions(user_id):
            count = int(pipe.scard(self.keys.user_sessions(user_id)))
        if count >= cap:
            raise TooManySessions(user_id, count, cap)

    # ---- context -----------------------------------------------------------------------------------

    def append(
        self, session_id: str, messages: Sequence[dict[str, Any]], token_count: int | None = None
    ) -> int:
        """Append messages (and a ``_usage`` record when ``token_count`` is given); returns the message count.

        Raises SessionFull (nothing appended) when a message or the context would pass its cap."""
        records = _encode(messages)
        _check_messages(records, messages, self.limits.max_message_bytes)
        usage = "" if token_count is None else token_count
        return self._admitted(
            self.run(self.scripts.append, session_id, json.dumps(records), usage), "messages"
        )

    def checkpoint(self, session_id: str, *, add_user_message: bool) -> int:
        """A new checkpoint; SessionFull (field None) when the context has no room for its records."""
        reply = self.run(self.scripts.checkpoint, session_id, "1" if add_user_message else "0")
        return self._admitted(reply, None)

    def revert_to(self, session_id: str, checkpoint_id: int) -> ContextView:
        if not int(self.run(self.scripts.revert, session_id, checkpoint_id)):
            raise UnknownCheckpoint(checkpoint_id)
        return self.read(session_id)

    def clear(self, session_id: str) -> None:
        self.run(self.scripts.clear, session_id, "0", "0", "[]")

    def compact(self, session_id: str, messages: Sequence[dict[str, Any]], *, add_user_message: bool) -> None:
        """kimi's compaction: clear, checkpoint 0, then the compacted messages (SessionFull: nothing changes)."""
        records = _encode(messages)
        _check_messages(records, messages, self.limits.max_message_bytes)
        flag = "1" if add_user_message else "0"
        self._admitted(self.run(self.scripts.clear, session_id, "1", flag, json.dumps(records)), "messages")

    def records(self, session_id: str, start: int = 0) -> list[dict[str, Any]]:
        return [
            json.loads(r) for r in self.client.lrange(self.keys.context(session_scope(session_id)), start, -1)
        ]

    def read(self, session_id: str) -> ContextView:
        """The current context: messages only (checkpoint and usage records are bookkeeping)."""
        scope = session_scope(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(self.keys.context(scope), 0, -1)
        pipe.hmget(self.keys.context_meta(scope), ["next", "tokenCount"])
        raw, (next_id, tokens) = pipe.execute()
        messages = [m for m in (json.loads(r) for r in raw) if m.get("role") not in RECORD_ROLES]
        return ContextView(messages=messages, n_checkpoints=int(next_id or 0), token_count=int(tokens or 0))

    def n_checkpoints(self, session_id: str) -> int:
        return int(self.client.hget(self.keys.context_meta(session_scope(session_id)), "next") or 0)
