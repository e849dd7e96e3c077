"""Every Redis key the product writes, built in one place.

Nothing else builds key strings (``tests/unit/worker/keys/test_keys_home.py`` scans the sources and fails on a
hand-built one; the Lua scripts receive whole keys, or a prefix such as :attr:`Keys.event_prefix`, from here).
All keys start with the configured prefix (``agent-signal:`` by default; tests use a random one). A tenant's
keys then start with ``t:{<tenant>}:`` (:attr:`Keys.home_prefix`), so one SCAN pattern finds all a tenant stores, and
the tenant is the hash tag: on a Redis Cluster every key one script touches is in the tenant's slot (the
``scopes`` and ``outbox-due`` registries are the tenant's own; their members are scope refs
``<tenant>/<scopeKey>``). Engine-wide keys (workers, the broker, the tenants set, rate buckets) do not start
with ``t:``; the few written together share a tag of their own (``{credentials}``, ``{fair}``). With scope
buckets (``AGENT_SIGNAL_SCOPE_BUCKETS``, worker/keys/buckets.py) a scope's keys and the indexes its scripts
write carry the tag ``{<tenant>.<bb>}`` instead, and user data stays under ``{<tenant>}``. Keys holding one user's data carry the user id in a fixed place, and the
user's events, sessions and conversations are indexed by user, so erasure finds them by design
(``worker/ops/erasure.py``). The full table, with types, TTLs and reasons: ``docs/keys.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from worker.core.tenancy import (
    DEFAULT_TENANT,
    BadTenant,
    check_tenant,
    scope_ref,
    split_scope_ref,
)
from worker.keys.buckets import bucket_of, glob_escaped
from worker.keys.engine import EngineWide
from worker.keys.limits import LimitKeys

__all__ = [
    "DEFAULT_TENANT",
    "ENGINE_FAMILIES",
    "HOLDER_SEPARATOR",
    "BadTenant",
    "BucketKeys",
    "EngineKeys",
    "Keys",
    "bucket_of",
    "check_tenant",
    "glob_escaped",
    "scope_ref",
    "split_scope_ref",
]

HOLDER_SEPARATOR = "|"  # a lease token is "<worker node name>|<random>" (operators see who holds a scope)


# Key families only the engine writes; a handler's staged write to one of them is refused.
ENGINE_FAMILIES = tuple(
    "ev: seq: inbox: sched: lease: fence: idem: chain: broker: outbox: outbox-of: apikey: "
    "ratelimit: events-of: ready: scope-users: sessions-of: runs: by-source: applied: retained-events:".split()
)
ENGINE_SINGLETONS = tuple(
    "scopes dlq stats workers reconcile-lock series outbox-due tenants apikeys audit ops-audit token-secret "
    "pseudonym-secret "
    "ready-tenants worker-info journal-due journal-lock open-streams retained-events outbox-dead erasure-lock "
    "tokens-from lane-holders".split()
)


@dataclass(frozen=True, slots=True)
class Keys(EngineWide, LimitKeys):
    """The keys of one tenant (and the engine-wide ones, which start with the prefix alone): its user data in its
    home slot (``home_prefix``), and each scope's keys in the scope's bucket (``scope_prefix(scope)``). The indexes a
    bucket's scripts write (events, chains, runs, dead letters, counters) are a bucket's: :class:`BucketKeys`, from
    :meth:`for_scope` or :meth:`for_bucket`, so asking a tenant's builder for one is a type error. Everything a
    tenant stores is found by one SCAN pattern (:attr:`tenant_pattern`); the limits' keys: worker/keys/limits.py."""

    def scope_ref(self, scope_key: str) -> str:
        return scope_ref(self.tenant, scope_key)

    # --- engine-wide: tenants, credentials, rate limits ---

    @property
    def audit(self) -> str:
        """The tenant's audit trail (stream): key changes and erasures."""
        return f"{self.home_prefix}audit"

    @property
    def ops_audit(self) -> str:
        """The tenant's trail of operations (stream): pauses, resumes, cancels, redrives; its own, so that a
        flood of them never pushes a key change or an erasure out of :attr:`audit` (a review)."""
        return f"{self.home_prefix}ops-audit"

    @property
    def erasure_lock(self) -> str:
        """The tenant's running erasure (string: the erasure's token, with a TTL it renews): one at a time per
        tenant (worker/ops/erasure_holds.py); a crashed erasure's lock expires."""
        return f"{self.home_prefix}erasure-lock"

    @property
    def tokens_from(self) -> str:
        """The tenant's erased users' token floors (hash: a keyed digest of the user id, never the id → ms on the
        Redis clock; TTL the longest token lifetime, set again at each erasure): a user's tokens issued before
        their floor are refused (worker/ops/credentials.py)."""
        return f"{self.home_prefix}tokens-from"

    def inbox(self, scope_key: str) -> str:
        return f"{self.scope_prefix(scope_key)}inbox:{{{scope_key}}}"

    def scheduled(self, scope_key: str) -> str:
        return f"{self.scope_prefix(scope_key)}sched:{{{scope_key}}}"

    def enqueue_seq(self, scope_key: str) -> str:
        """The scope's enqueue counter: each event keeps its number, so a redrive knows if later ones exist."""
        return f"{self.scope_prefix(scope_key)}seq:{{{scope_key}}}"

    def lease(self, scope_key: str) -> str:
        """The scope's lease: its holder's token, ``<worker node name>|<random>`` (:data:`HOLDER_SEPARATOR`)."""
        return f"{self.scope_prefix(scope_key)}lease:{{{scope_key}}}"

    def fence(self, scope_key: str) -> str:
        return f"{self.scope_prefix(scope_key)}fence:{{{scope_key}}}"

    def idempotency(self, scope_key: str, key: str) -> str:
        return f"{self.scope_prefix(scope_key)}idem:{{{scope_key}}}:{key}"

    def activity(self, scope_key: str) -> str:
        """Per-scope activity counters written by the built-in policy's action."""
        return f"{self.scope_prefix(scope_key)}activity:{{{scope_key}}}"

    def plugin(self, scope_key: str, name: str) -> str:
        """A plugin's own key in a scope (``ctx.key(name)``): prefix and hash tag included."""
        return f"{self.scope_prefix(scope_key)}plugin:{{{scope_key}}}:{name}"

    # --- a plugin's own families: the plugin names them, the builder places them ---

    def plugin_scoped(self, family: str, scope_key: str, *parts: str) -> str:
        """A plugin's key of one scope, in the scope's bucket: ``<family>:{<scope>}[:<part>…]`` (``ctx.key(name)``
        is ``plugin_scoped("plugin", scope, name)``). The family is the plugin's own word, never an engine
        family (:data:`ENGINE_FAMILIES`: a handler's staged write to one is refused)."""
        tail = "".join(f":{p}" for p in parts)
        return f"{self.scope_prefix(scope_key)}{family}:{{{scope_key}}}{tail}"

    def plugin_home(self, family: str, *parts: str) -> str:
        """A plugin's key in the tenant's home slot (user data, read across scopes): ``<family>[:<part>…]``."""
        return f"{self.home_prefix}{family}{''.join(f':{p}' for p in parts)}"

    # --- the outbox: outbound calls committed with the event, delivered by the relay ---

    def outbox_record(self, scope_key: str, record_id: str) -> str:
        """One outbox record (JSON: kind, payload, key, eventId, state, attempts, lastError), with a TTL."""
        return f"{self.scope_prefix(scope_key)}outbox:{{{scope_key}}}:{record_id}"

    def outbox_of_event(self, scope_key: str, event_id: str) -> str:
        """The ids of the outbox records one event staged (its run detail lists them)."""
        return f"{self.scope_prefix(scope_key)}outbox-of:{{{scope_key}}}:{event_id}"

    # --- the broker ---

    # --- agent sessions (context store, D-Mail, signal ledgers): scoped by the session's scope key ---

    def session(self, scope_key: str) -> str:
        """Session settings (dmailEnabled, root, functions, userId, agentId, topicId)."""
        return f"{self.home_prefix}session:{{{scope_key}}}"

    def context(self, scope_key: str) -> str:
        """The session's context records (kimi's JSONL lines, one list item each)."""
        return f"{self.home_prefix}ctx:{{{scope_key}}}"

    def context_meta(self, scope_key: str) -> str:
        """next checkpoint id, token count, message count, event counter."""
        return f"{self.home_prefix}ctxmeta:{{{scope_key}}}"

    def checkpoints(self, scope_key: str) -> str:
        """checkpoint id -> "<list position>:<messages before it>"."""
        return f"{self.home_prefix}ckpt:{{{scope_key}}}"

    def usage(self, scope_key: str) -> str:
        """_usage records: score = list position, member = "<position>:<token count>"."""
        return f"{self.home_prefix}usage:{{{scope_key}}}"

    def dmail(self, scope_key: str) -> str:
        """The one pending D-Mail of the session."""
        return f"{self.home_prefix}dmail:{{{scope_key}}}"

    def functions_state(self, scope_key: str) -> str:
        """The session's function runtime (active set, states, ledgers, artifacts) as one JSON document."""
        return f"{self.home_prefix}fnstate:{{{scope_key}}}"

    def conversation(self, user_id: str, agent_id: str, topic_id: str) -> str:
        """Messages of a conversation as seen in events (JSON list items), for the receipts UI."""
        return f"{self.home_prefix}conversation:user:{user_id}:agent:{agent_id}:topic:{topic_id}"

    def runs_of_scope(self, scope_key: str) -> str:
        return f"{self.scope_prefix(scope_key)}runs:scope:{{{scope_key}}}"

    def scope_users(self, scope_key: str) -> str:
        """The users whose events a scope holds (set): erasure drops a scope whole only when it is one user's."""
        return f"{self.scope_prefix(scope_key)}scope-users:{{{scope_key}}}"

    def user_sessions(self, user_id: str) -> str:
        """The sessions whose settings name a user (set): erasure finds a user's sessions here."""
        return f"{self.home_prefix}sessions-of:user:{user_id}"

    def user_sessions_cleaned(self, user_id: str) -> str:
        """Set while a full index's ended sessions were removed lately (sessions/store.py: at most once a minute)."""
        return f"{self.home_prefix}sessions-cleaned:user:{user_id}"

    def user_conversations(self, user_id: str) -> str:
        """One user's conversations (same members as ``conversations``): user tokens list these; erasure drops it."""
        return f"{self.home_prefix}conversations:user:{user_id}"

    @property
    def conversations(self) -> str:
        """Known conversations: "<userId>\x1f<agentId>\x1f<topicId>" -> last activity (ms)."""
        return f"{self.home_prefix}conversations"

    def receipts_feed(self, user_id: str) -> str:
        """Pub/sub channel announcing one user's new receipt ids (the SSE stream listens here and filters)."""
        return f"{self.home_prefix}receipts-feed:user:{user_id}"

    # --- receipts: a receipt belongs to one user; its id (LobeHub's, from a source id) is unique per user ---

    def receipt(self, user_id: str, receipt_id: str) -> str:
        """One receipt (JSON). The user is part of the key: two users' receipts of one source id (the same
        LobeHub id) are two receipts (user ids hold no ``:``)."""
        return f"{self.receipt_prefix}{user_id}:{receipt_id}"

    @property
    def receipt_prefix(self) -> str:
        """``receipt_prefix + "<userId>:<receiptId>"`` is a receipt (a SCAN for a receipt id of any user)."""
        return f"{self.home_prefix}receipt:"

    def user_receipts(self, user_id: str) -> str:
        """Every receipt id of one user by ``createdAt`` (zset): ``GET /v1/receipts?userId=U`` walks it."""
        return f"{self.home_prefix}receipts:user:{user_id}"

    def receipt_index(self, user_id: str, agent_id: str, topic_id: str) -> str:
        """LobeHub's index of one user's receipts in one agent's topic (zset by ``createdAt``)."""
        return f"{self.home_prefix}receipts:user:{user_id}:agent:{agent_id}:topic:{topic_id}"

    def operation_receipts(self, user_id: str, operation_id: str) -> str:
        """The receipts one agent run (operation) produced (set): a run's detail lists them."""
        return f"{self.home_prefix}receipts:user:{user_id}:operation:{operation_id}"

    def is_engine_key(self, key: str) -> bool:
        """True for keys of the engine's own state (events, inboxes, leases, fences, lanes, counters…)."""
        if key.startswith(
            self.home_prefix
        ):  # one test, not a search, for the tenant's home (all of it, one bucket)
            mine: str | None = self.home_prefix
        else:
            mine = next((p for p in self._prefixes if key.startswith(p)), None) if self.buckets > 1 else None
        if mine is not None:
            rest = key[len(mine) :]
        elif key.startswith(self.prefix):
            rest = key[len(self.prefix) :]
            if rest.startswith("t:"):  # another tenant's key is never a handler's to write
                return True
        else:
            return False
        return rest in ENGINE_SINGLETONS or rest.startswith(ENGINE_FAMILIES)

    @property
    def tenant_stats(self) -> str:
        """Where counts of no scope go (rejected events, store failures): the first bucket's (reads sum every bucket's)."""
        return f"{self._prefixes[0]}stats"

    # --- a scope's or a bucket's builder ---

    def for_tenant(self, tenant: str) -> Keys:
        """The same layout for another tenant (a value, made once per tenant and shared: it holds only strings)."""
        return (
            self
            if tenant == self.tenant and type(self) is Keys
            else _tenant_keys(self.prefix, check_tenant(tenant), self.buckets)
        )

    def for_scope(self, scope_key: str) -> BucketKeys:
        """The builder of ``scope_key``'s bucket: its scripts' indexes and the scope's own keys."""
        return self.for_bucket(bucket_of(scope_key, self.buckets))

    def for_bucket(self, bucket: int) -> BucketKeys:
        return _bucket_keys(self.prefix, self.tenant, self.buckets, bucket)

    def every_bucket(self) -> list[BucketKeys]:
        """One builder per bucket (reads of the per-bucket indexes fan out over them); one without buckets."""
        return [self.for_bucket(b) for b in range(max(self.buckets, 1))]


@dataclass(frozen=True, slots=True)
class BucketKeys(Keys):
    """The keys of one of a tenant's scope buckets (worker/keys/buckets.py): the indexes its scripts write
    (events, chains, runs, dead letters, counters, the outbox's and the journal's due sets), beside every key a
    :class:`Keys` builds. With one bucket, its prefix is the tenant's home prefix."""

    bucket: int = 0
    bucket_prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Keys.__post_init__(self)
        object.__setattr__(self, "bucket_prefix", self._prefixes[min(self.bucket, len(self._prefixes) - 1)])

    def for_bucket(self, bucket: int) -> BucketKeys:
        return self if bucket == self.bucket else _bucket_keys(self.prefix, self.tenant, self.buckets, bucket)

    def event(self, event_id: str) -> str:
        return f"{self.event_prefix}{event_id}"

    @property
    def bucket_audit(self) -> str:
        """The bucket's trail of operations (discards: their script runs in the bucket's slot; one bucket:
        ``ops-audit``)."""
        return f"{self.bucket_prefix}ops-audit"

    @property
    def event_prefix(self) -> str:
        """``ev:`` keys are ``event_prefix + eventId``: the scripts that find an inbox head's record use it."""
        return f"{self.bucket_prefix}ev:"

    def chain(self, event_id: str) -> str:
        """The chain document of one event's run (its id is the event's: two events with one source id, say
        two users' ``msg_1``, share LobeHub's chain id ``chain:msg_1`` and never one document). A key named by a
        chain id (``chain:chain:<sourceId>``) is a document stored before that (read, never written)."""
        return f"{self.bucket_prefix}chain:{event_id}"

    @property
    def outbox_due(self) -> str:
        """The tenant's pending outbox records, member "<scopeRef>\x1f<recordId>", score = when to (re)try (ms)."""
        return f"{self.bucket_prefix}outbox-due"

    @property
    def outbox_dead(self) -> str:
        """The bucket's outbox records that failed every attempt (parallel and journal mode), member as
        ``outbox_due``, score = when it died (ms); listed and redriven by ``/v1/outbox`` (worker/outbox/dead.py),
        an entry whose record expired (the outbox retention) dropped as it is read."""
        return f"{self.bucket_prefix}outbox-dead"

    @property
    def journal_due(self) -> str:
        """The bucket's journal records to apply (worker/store/journal.py), in commit order: member as ``outbox_due``,
        score = when the commit staged it (µs); the relay applies them one at a time (its ordered mode: worker/outbox/relay.py)."""
        return f"{self.bucket_prefix}journal-due"

    @property
    def journal_lock(self) -> str:
        """Who applies the bucket's journal now (a relay's token, PX its lease; or a backoff after a failure)."""
        return f"{self.bucket_prefix}journal-lock"

    def user_events(self, user_id: str) -> str:
        """One user's event ids by enqueue time (zset, dedupe window): erasure and the runs explorer use it."""
        return f"{self.bucket_prefix}events-of:user:{user_id}"

    @property
    def scope_users_prefix(self) -> str:
        """Where every ``scope-users:{scope}`` key of the bucket's scopes starts (``scope_users``: the prefix, the
        scope key, ``}``): erasure finds the scopes that name a user with one SCAN of it, long after the user's
        events and their index have expired."""
        return f"{self.bucket_prefix}scope-users:{{"

    def runs(self, *parts: str) -> str:
        """Runs explorer indexes (zsets of event ids by enqueue time: ``all``, ``status:<s>``, ``type:<t>``),
        ``discarded-at`` (by discard time) and ``paused`` (hash scope -> pausedAt): worker/ops/runs.py."""
        return f"{self.bucket_prefix}runs:{':'.join(parts)}"

    def events_of_source(self, digest: str) -> str:
        """One of 256 buckets (zset of "<digest>:<eventId>" by enqueue time) of event_records.source_digest."""
        return f"{self.bucket_prefix}by-source:{digest[:2]}"

    @property
    def series(self) -> str:
        """Per-minute throughput and latency: fields "<minute>:done" and "<minute>:latency_ms"."""
        return f"{self.bucket_prefix}series"

    @property
    def scopes(self) -> str:
        """The tenant's scopes with queued work (scope refs): the sweep and the scopes page walk it."""
        return f"{self.bucket_prefix}scopes"

    @property
    def dlq(self) -> str:
        return f"{self.bucket_prefix}dlq"

    @property
    def stats(self) -> str:
        return f"{self.bucket_prefix}stats"

    @property
    def lane_holders(self) -> str:
        """The bucket's count of the unfinished events that keep each idempotency lane (hash: lane key -> count;
        worker/store/lua/lib/kept_lanes.lua): a lane two events keep gets its TTL back when the last one ends."""
        return f"{self.bucket_prefix}lane-holders"

    @property
    def retained_events(self) -> str:
        """Events the bucket admitted, per slot of a 24th of the dedupe window (hash slot -> count): the
        tenant's retained-events quota."""
        return f"{self.bucket_prefix}retained-events"

    def retained_user_events(self, user_id: str) -> str:
        """The events naming ``user_id`` the bucket admitted, slotted as :attr:`retained_events` is: the user's
        share of them (``AGENT_SIGNAL_USER_MAX_EVENTS``)."""
        return f"{self.bucket_prefix}retained-events:user:{user_id}"


@dataclass(frozen=True, slots=True)
class EngineKeys(EngineWide):
    """A process's key layout: the engine-wide keys, and each tenant's builder (:meth:`for_tenant`). One per
    store, whatever tenants it serves: a tenant is a value each call carries, never a copy of the store."""

    prefix: str = "agent-signal:"
    buckets: int = 1  # scope buckets (worker/keys/buckets.py)

    def for_tenant(self, tenant: str) -> Keys:
        """``tenant``'s keys (checked: a tenant name is a key part)."""
        return _tenant_keys(self.prefix, check_tenant(tenant), self.buckets)


@lru_cache(maxsize=1024)
def _tenant_keys(prefix: str, tenant: str, buckets: int) -> Keys:
    """Keys are values: one per tenant, made once (each builds its prefixes; a lone event's drain asked for its
    tenant's on every pop)."""
    return Keys(prefix, tenant, buckets)


@lru_cache(maxsize=4096)
def _bucket_keys(prefix: str, tenant: str, buckets: int, bucket: int) -> BucketKeys:
    """One builder per tenant and bucket, made once (see :func:`_tenant_keys`)."""
    return BucketKeys(prefix, tenant, buckets, bucket)
