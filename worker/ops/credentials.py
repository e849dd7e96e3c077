"""Credentials: API keys and user tokens, stored in Redis and shared by the CLI, the web app and tests.

**API keys.** A key's id is ``key_<16 hex>`` and its secret ``as_<the same 16 hex>_<32 random bytes, urlsafe>``,
so the id is read from the secret and verifying is one ``HGETALL`` (cached), never a scan. Only SHA-256 of the
secret is stored (hash ``Keys.api_key(id)``: tenant, role, name, hash, createdAt, revokedAt), compared with
:func:`hmac.compare_digest`. The secrets carry 256 random bits, so a slow password hash (bcrypt, argon2) would
add latency to every request and no resistance to guessing (docs/decisions.md "Credentials"). A revoked key
keeps its record (without the hash) for ``REVOKED_KEY_KEEP_S`` (30 days: listed as revoked, then gone from its
tenant's listing) and its id in ``Keys.api_keys`` for good, so "credentials are configured" never turns back off
by revoking the last key. Creating and revoking a key appends to the tenant's audit stream.

**The bootstrap key** (``AGENT_SIGNAL_BOOTSTRAP_KEY``, or the deprecated ``AGENT_SIGNAL_API_TOKEN``) is an
``admin`` key of tenant ``default`` with the id ``bootstrap``, compared in constant time; it is never stored.

**User tokens** are JWTs (HS256, PyJWT): claims ``tenant``, ``sub`` (the userId), ``iat``, ``exp``, ``jti``,
``kid`` (the issuing key's id, also in the header) and ``iatMs`` (the issue time in ms; ``iat`` and ``exp`` are
on the same clock: the Redis server's, which every replica shares). A token is valid while its issuer is: a
revoked key's tokens stop working (within the cache window). The signing secret is ``AGENT_SIGNAL_TOKEN_SECRET``
when set, else one random secret created in Redis with ``SET NX`` (``Keys.token_secret``) so every web replica
shares it.

**Erasing a user ends their tokens** (:meth:`CredentialStore.end_user_tokens`, called as the erasure starts): the
user's floor (ms on the Redis clock) refuses every token of that user issued before it (:class:`UserErased`), so a
token that erased its own user can do nothing more, and the app mints a new one. A tenant's floors are one hash
(``Keys.tokens_from``: a keyed digest of the user, :meth:`CredentialStore.user_ref`, never the id → the floor),
whose TTL each erasure sets again to :data:`ERASED_TOKENS_TTL_S` (past the end of every token issued before it)
and whose fields older than that it prunes. Verification reads the hash's length once per tenant and cache window
(``cache_s``, the keys' cache), and the whole hash with it when it has at most :data:`FLOORS_READ_WHOLE_MAX_FIELDS`
fields, then looks users up in it in the process: a tenant with no erasure within a day costs one read per window
and nothing per user. A larger hash (many users erased: a bulk erasure, random ids) is never read whole: each
user's field is read on its own (HGET), once per user and window. The process that erased the user knows it at
once (no refresh that read the hash before the write lowers a floor this process wrote), the others within the
window.

Verification may read Redis. Pass ``allow_io=False`` (the web's event loop does) to get :class:`NeedsIO` instead
of a blocking call when the answer is not in the in-process cache; then call again off the loop.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from redis import Redis, WatchError

from worker.core.clock import now_ms
from worker.core.ids import IdProblem, user_id_problem
from worker.intake.refusals import StoreUnavailable
from worker.keys.layout import DEFAULT_TENANT, BadTenant, Keys, check_tenant
from worker.ops.audit import audit
from worker.ops.key_index import forget_expired, room_left, stage_create, stage_revoke, tenant_key_ids
from worker.ops.roles import ROLES

__all__ = [
    "BOOTSTRAP_ID",
    "DEFAULT_TOKEN_TTL_S",
    "ERASED_TOKENS_TTL_S",
    "FLOORS_READ_WHOLE_MAX_FIELDS",
    "FLOOR_WRITE_ATTEMPTS",
    "LOCAL_ID",
    "MAX_TOKEN_TTL_S",
    "ROLES",
    "CredentialError",
    "CredentialStore",
    "KeyRecord",
    "NeedsIO",
    "UserErased",
    "UserToken",
    "hash_secret",
    "key_id_of",
]

KEY_ID_PREFIX = "key_"
SECRET_PREFIX = "as_"
BOOTSTRAP_ID = "bootstrap"  # the bootstrap key's credential id (and the kid of the tokens it mints)
LOCAL_ID = "local"  # the credential id of the caller when no credential is configured (loopback only)
DEFAULT_TOKEN_TTL_S = 3600
MAX_TOKEN_TTL_S = 86400
# An erased user's token floor outlives every token issued before it: the longest lifetime a mint allows, plus a
# margin for a verifying replica whose clock (exp is checked on it) runs behind the Redis server's.
ERASED_TOKENS_TTL_S = MAX_TOKEN_TTL_S + 600
# A tenant's floors hash is read whole (one HGETALL per cache window) up to this many fields; past it, each user's
# field alone (HGET, per user and window): 200,000 fields read whole cost 0.3 s of Redis and 0.2 s of parsing.
FLOORS_READ_WHOLE_MAX_FIELDS = 1_000
FLOOR_WRITE_ATTEMPTS = 5  # WATCH transactions an erasure's floor write tries, each raced, before it fails
USER_REF_CONTEXT = b"agent-signal user-tokens-from\x00"  # the digest of a floor's key is for this use alone
MIN_BOOTSTRAP_KEY_CHARS = 16
MIN_TOKEN_SECRET_CHARS = 32  # HS256 wants a key of at least 256 bits (RFC 7518 §3.2)
CACHE_MAX_ENTRIES = 10_000  # the in-process cache is dropped whole past this (random ids cannot grow it)
# A key found revoked, or gone, is refused from the process's cache this long whatever ``cache_s`` is (a revoke is
# final, a random key id never made again): a deleted tenant's clients sending its keys on cost a lookup a key a
# minute, and no longer spend the failed-authentication budget of every tenant behind their address (a walk).
REFUSED_CACHE_S = 60.0
MAX_NAME_CHARS = 100
ALGORITHM = "HS256"
_SECRET_SHAPE = re.compile(r"^as_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$")


class CredentialError(ValueError):
    """A request for a credential that cannot be honoured; ``field`` names the input at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NeedsIO(Exception):
    """Raised with ``allow_io=False`` when the answer needs Redis: call again where blocking is allowed."""


class UserErased(Exception):
    """A user token whose signature, expiry and issuer are valid, issued before its user was erased."""

    def __init__(self) -> None:
        super().__init__("this token's user was erased after it was issued; mint a new token")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One API key (or the bootstrap key), never with its secret."""

    id: str
    tenant: str
    role: str
    name: str
    created_at_ms: int
    revoked_at_ms: int | None = None
    secret_hash: str = field(default="", repr=False)

    @property
    def active(self) -> bool:
        return self.revoked_at_ms is None

    def public(self) -> dict[str, Any]:
        """The JSON shape of ``keys list`` and ``GET /v1/keys`` (no secret, no hash)."""
        out: dict[str, Any] = {
            "id": self.id,
            "tenant": self.tenant,
            "role": self.role,
            "name": self.name,
            "createdAt": self.created_at_ms,
        }
        if self.revoked_at_ms is not None:
            out["revokedAt"] = self.revoked_at_ms
        return out


@dataclass(frozen=True, slots=True)
class UserToken:
    """A verified user token: the one user of one tenant it speaks for, and the key that minted it."""

    tenant: str
    user_id: str
    issuer: str
    expires_at_ms: int
    jti: str


def key_id_of(secret: str) -> str | None:
    """The key id a secret names (``as_<hex>_…`` → ``key_<hex>``), or None when it is not a key's shape."""
    match = _SECRET_SHAPE.match(secret)
    return f"{KEY_ID_PREFIX}{match.group(1)}" if match else None


def hash_secret(secret: str) -> str:
    """What is stored for a secret: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


class CredentialStore:
    """API keys, the bootstrap key and user tokens over one Redis client.

    ``cache_s`` is how long a key record read from Redis is trusted in this process (the web uses
    ``AGENT_SIGNAL_AUTH_CACHE_S``; the CLI 0): a revoke takes effect everywhere within it."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        *,
        bootstrap_key: str | None = None,
        token_secret: str | None = None,
        cache_s: float = 0.0,
        tenant_max_keys: int = 0,
    ) -> None:
        self.client = client
        self.tenant_max_keys = tenant_max_keys  # active keys per tenant (0: none; worker/ops/key_index.py)
        self.keys = keys
        self.bootstrap_key = bootstrap_key or None
        self.cache_s = cache_s
        self._signing_secret = token_secret or None
        self._cache: dict[str, tuple[float, KeyRecord | None]] = {}
        # revoked or gone keys, apart: a flood of random ids clears only these, never a valid key's entry
        self._refused: dict[str, tuple[float, KeyRecord | None]] = {}
        # erased users' token floors, each tenant's hash read whole: tenant -> (trusted until, user ref -> ms), or
        # (trusted until, None) when it is too large to read whole; then (tenant, user ref) -> (until, ms or None)
        self._floors: dict[str, tuple[float, dict[str, int] | None]] = {}
        self._user_floors: dict[tuple[str, str], tuple[float, int | None]] = {}
        # the floors this process wrote: tenant -> user ref -> (ms, kept until (monotonic)); see _cache_floors
        self._written: dict[str, dict[str, tuple[int, float]]] = {}
        self._floors_lock = threading.Lock()
        self._configured_until = 0.0  # "no key stored" is trusted until then; True is latched
        self._configured = self.bootstrap_key is not None

    # --- API keys ---

    def create(self, tenant: str, role: str, name: str = "", *, actor: str = "cli") -> tuple[KeyRecord, str]:
        """A new key of ``tenant`` with ``role``: ``(record, secret)``; the secret exists only in the answer."""
        _check_key_request(tenant, role, name)
        hex_id = secrets.token_hex(8)
        key_id = f"{KEY_ID_PREFIX}{hex_id}"
        secret = f"{SECRET_PREFIX}{hex_id}_{secrets.token_urlsafe(32)}"
        record = KeyRecord(key_id, tenant, role, name, now_ms(), secret_hash=hash_secret(secret))
        # The audit entry first: it lives in the tenant's slot, the key in {credentials}, so they cannot share a
        # transaction on a cluster; a crash between the two leaves an entry for a key never made, never the reverse.
        room_left(self.client, self.keys, tenant, self.tenant_max_keys)  # refused before anything is written
        self._audit(tenant, "key.create", key_id, role=role, name=name, actor=actor)
        stored: dict[str, str | int] = {
            "tenant": tenant,
            "role": role,
            "name": name,
            "hash": record.secret_hash,
            "createdAt": record.created_at_ms,
        }
        stage_create(self.client, self.keys, tenant, key_id, stored, self.tenant_max_keys)
        self._configured = True
        return record, secret

    def get(self, key_id: str, *, allow_io: bool = True) -> KeyRecord | None:
        """The stored record of ``key_id`` (revoked ones too), through the cache."""
        now = time.monotonic()
        cached = self._cache.get(key_id) or self._refused.get(key_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        if not allow_io:
            raise NeedsIO(key_id)
        record = _record(key_id, self.client.hgetall(self.keys.api_key(key_id)))
        active = record is not None and record.active
        if (trusted_s := self.cache_s if active else REFUSED_CACHE_S) > 0:
            kept, other = (self._cache, self._refused) if active else (self._refused, self._cache)
            if len(kept) >= CACHE_MAX_ENTRIES:
                kept.clear()
            kept[key_id] = (now + trusted_s, record)
            other.pop(key_id, None)
        return record

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        """Every stored key (of ``tenant`` when given: its own index, worker/ops/key_index.py), oldest first,
        without secrets."""
        if tenant is None:
            ids = sorted(_text(i) for i in self.client.smembers(self.keys.api_keys))
        else:
            ids = tenant_key_ids(self.client, self.keys, tenant)
        pipe = self.client.pipeline(transaction=False)
        for key_id in ids:
            pipe.hgetall(self.keys.api_key(key_id))
        records = [_record(key_id, fields) for key_id, fields in zip(ids, pipe.execute(), strict=True)]
        if tenant is not None:  # revoked keys whose record expired: out of the tenant's index too
            forget_expired(
                self.client, self.keys, tenant, [i for i, r in zip(ids, records, strict=True) if r is None]
            )
        found = [r for r in records if r is not None and (tenant is None or r.tenant == tenant)]
        return sorted(found, key=lambda r: (r.created_at_ms, r.id))

    def revoke(self, key_id: str, *, actor: str = "cli") -> KeyRecord | None:
        """Revoke ``key_id`` (idempotent): its hash is dropped and ``revokedAt`` set; None when unknown."""
        record = self.read(key_id)
        if record is None:
            return None
        if record.active:
            pipe = self.client.pipeline(transaction=True)
            pipe.hsetnx(self.keys.api_key(key_id), "revokedAt", str(now_ms()))
            pipe.hdel(self.keys.api_key(key_id), "hash")
            stage_revoke(pipe, self.keys, record.tenant, key_id)  # its record expires (REVOKED_KEY_KEEP_S)
            revoked_now = pipe.execute()[0]
            # audited once, by the revoke that set revokedAt: racing revokes all saw the key active
            if revoked_now:
                self._audit(record.tenant, "key.revoke", key_id, role=record.role, actor=actor)
        return self.read(key_id)

    def verify(self, secret: str, *, allow_io: bool = True) -> KeyRecord | None:
        """The active key whose secret this is (the bootstrap key included), else None."""
        bootstrap = self.bootstrap_key
        if bootstrap is not None and hmac.compare_digest(secret.encode(), bootstrap.encode()):
            return self.bootstrap_record()
        key_id = key_id_of(secret)
        if key_id is None:
            return None
        record = self.get(key_id, allow_io=allow_io)
        if record is None or not record.active or not record.secret_hash:
            return None
        return record if hmac.compare_digest(record.secret_hash, hash_secret(secret)) else None

    def bootstrap_record(self) -> KeyRecord:
        return KeyRecord(BOOTSTRAP_ID, DEFAULT_TENANT, "admin", "AGENT_SIGNAL_BOOTSTRAP_KEY", 0)

    def configured(self, *, allow_io: bool = True) -> bool:
        """True when any credential exists: the bootstrap key, or a key ever created (revoked ones count).

        Once True it stays True in this process; False is re-checked after ``cache_s``."""
        if self._configured:
            return True
        now = time.monotonic()
        if now < self._configured_until:
            return False
        if not allow_io:
            raise NeedsIO("configured")
        self._configured = bool(self.client.scard(self.keys.api_keys))
        self._configured_until = now + self.cache_s
        return self._configured

    # --- user tokens ---

    def mint_user_token(
        self, tenant: str, user_id: str, ttl_s: int = DEFAULT_TOKEN_TTL_S, issuer_key_id: str = BOOTSTRAP_ID
    ) -> tuple[str, int]:
        """A signed token for ``user_id`` of ``tenant``: ``(token, expiresAt in ms)``."""
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or not 1 <= ttl_s <= MAX_TOKEN_TTL_S:
            raise CredentialError(f"ttlS must be an integer from 1 to {MAX_TOKEN_TTL_S} seconds", "ttlS")
        problem = (
            user_id_problem(user_id)
            if isinstance(user_id, str)
            else IdProblem("characters", "must be a string")
        )
        if problem is not None:
            raise CredentialError(f"userId {problem.message}", "userId")
        check_tenant(tenant)
        issued_ms = self.server_ms()  # the clock an erasure's floor is read on (end_user_tokens)
        issued = issued_ms // 1000
        claims = {
            "tenant": tenant,
            "sub": user_id,
            "iat": issued,
            "iatMs": issued_ms,
            "exp": issued + ttl_s,
            "jti": uuid.uuid4().hex,
            "kid": issuer_key_id,
        }
        token = jwt.encode(claims, self.signing_secret(), algorithm=ALGORITHM, headers={"kid": issuer_key_id})
        return token, (issued + ttl_s) * 1000

    def verify_user_token(self, token: str, *, allow_io: bool = True) -> UserToken | None:
        """The token's user when its signature, expiry and issuer are all valid and its user was not erased
        since it was issued, else None (:meth:`check_user_token` says when it is the erasure)."""
        try:
            return self.check_user_token(token, allow_io=allow_io)
        except UserErased:
            return None

    def check_user_token(self, token: str, *, allow_io: bool = True) -> UserToken | None:
        """:meth:`verify_user_token`, raising :class:`UserErased` for a valid token issued before its user's
        erasure (:meth:`end_user_tokens`)."""
        if self._signing_secret is None and not allow_io:
            raise NeedsIO("token secret")
        try:
            claims = jwt.decode(
                token,
                self.signing_secret(),
                algorithms=[ALGORITHM],
                # iat and exp are on Redis's clock (mint_user_token): exp is checked below on the service's clock
                # (worker/core/clock.py), which PyJWT's check on this host's would not be (a host 45 s ahead refused
                # a token it had just minted for 30 s: a clock walk)
                options={
                    "require": ["exp", "iat", "sub", "jti", "tenant", "kid"],
                    "verify_iat": False,
                    "verify_exp": False,
                },
            )
        except jwt.InvalidTokenError:
            return None
        if not isinstance(claims["exp"], int) or claims["exp"] * 1000 <= now_ms():
            return None
        tenant, user_id, issuer = claims["tenant"], claims["sub"], claims["kid"]
        if not all(isinstance(v, str) for v in (tenant, user_id, issuer, claims["jti"])):
            return None
        if user_id_problem(user_id) is not None:  # minted before the rule: its scopes would be ambiguous
            return None
        if not self._issuer_valid(issuer, tenant, allow_io=allow_io):
            return None
        floor_ms = self._tokens_floor(tenant, user_id, allow_io=allow_io)
        if floor_ms is not None and _issued_ms(claims) < floor_ms:
            raise UserErased
        return UserToken(tenant, user_id, issuer, int(claims["exp"]) * 1000, claims["jti"])

    def end_user_tokens(self, tenant: str, user_id: str) -> int:
        """Refuse every token of ``user_id`` of ``tenant`` issued before now (the user's erasure starts): writes the
        user's floor into the tenant's hash, one ms past the Redis clock's now (a token minted in this very ms is
        issued before it too), sets the hash's TTL to :data:`ERASED_TOKENS_TTL_S` again and prunes the floors older
        than that; returns the floor. This process knows it at once; the others within their cache window. Raises
        :class:`StoreUnavailable` when another write to the hash raced each of :data:`FLOOR_WRITE_ATTEMPTS` tries."""
        floor_ms = self.server_ms() + 1
        ref = self.user_ref(user_id)
        key = self.keys.for_tenant(tenant).tokens_from
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(FLOOR_WRITE_ATTEMPTS):  # WATCH: a floor written meanwhile is never pruned by us
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    stored = _floors_of(pipe.hgetall(key))
                    floor_ms = max(floor_ms, stored.get(ref, 0))
                    stale = [r for r, ms in stored.items() if ms < floor_ms - ERASED_TOKENS_TTL_S * 1000]
                    pipe.multi()
                    if stale:
                        pipe.hdel(key, *stale)
                    pipe.hset(key, ref, floor_ms)
                    pipe.expire(key, ERASED_TOKENS_TTL_S)
                    pipe.execute()
                    break
                except WatchError:
                    continue
            else:
                raise StoreUnavailable(
                    f"the erased user's token floor was not written: tenant {tenant!r}'s floors changed during each "
                    f"of {FLOOR_WRITE_ATTEMPTS} attempts; nothing was erased, retry later"
                )
        self._remember_written(tenant, ref, floor_ms)
        return floor_ms

    def user_ref(self, user_id: str) -> str:
        """How a floor's key names the user: a digest keyed with the signing secret (a new secret voids the old
        tokens, and with them the floors): the key never holds the id, nor a hash of a guess of it."""
        message = USER_REF_CONTEXT + user_id.encode("utf-8", "surrogatepass")
        return hmac.new(self.signing_secret().encode(), message, hashlib.sha256).hexdigest()[:32]

    def server_ms(self) -> int:
        """The Redis server's time in ms (every replica reads the same clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def _tokens_floor(self, tenant: str, user_id: str, *, allow_io: bool) -> int | None:
        """The user's floor (None: not erased within a token's lifetime), looked up in the tenant's floors."""
        floors = self._tenant_floors(tenant, allow_io=allow_io)
        if floors is None:  # too many to read whole: this user's field alone
            return self._user_floor(tenant, self.user_ref(user_id), allow_io=allow_io)
        return floors.get(self.user_ref(user_id)) if floors else None  # none: no digest to compute

    def _tenant_floors(self, tenant: str, *, allow_io: bool) -> dict[str, int] | None:
        """The tenant's floors by user ref (None: too many to read whole), through the cache: one HLEN per tenant
        and cache window, and one HGETALL with it when the hash is small (not empty)."""
        cached = self._floors.get(tenant)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        if not allow_io:
            raise NeedsIO("token floors")
        return self._cache_floors(tenant, self._read_floors(tenant))

    def _read_floors(self, tenant: str) -> dict[str, int] | None:
        key = self.keys.for_tenant(tenant).tokens_from
        count = int(self.client.hlen(key))
        if count > FLOORS_READ_WHOLE_MAX_FIELDS:
            return None
        return _floors_of(self.client.hgetall(key)) if count else {}

    def _user_floor(self, tenant: str, ref: str, *, allow_io: bool) -> int | None:
        """One user's floor in a tenant whose floors are too many to read whole: one HGET per user and cache
        window, raised to the floor this process wrote (as :meth:`_cache_floors` does for a hash read whole)."""
        now = time.monotonic()
        cached = self._user_floors.get((tenant, ref))
        if cached is None or cached[0] <= now:
            if not allow_io:
                raise NeedsIO("token floor")
            raw = self.client.hget(self.keys.for_tenant(tenant).tokens_from, ref)
            cached = (now + self.cache_s, _floors_of({ref: raw}).get(ref) if raw is not None else None)
            if self.cache_s > 0:
                if len(self._user_floors) >= CACHE_MAX_ENTRIES:
                    self._user_floors.clear()
                self._user_floors[(tenant, ref)] = cached
        floor_ms, written = cached[1], self._written.get(tenant, {}).get(ref)
        if written is not None and written[1] > now and (floor_ms is None or floor_ms < written[0]):
            return written[0]
        return floor_ms

    def _cache_floors(self, tenant: str, read: dict[str, int] | None) -> dict[str, int] | None:
        """Cache what a refresh read, each floor this process wrote (within a token's lifetime) kept at least as
        high: a refresh that read the hash before :meth:`end_user_tokens` wrote it, and stores after, must not make
        this process forget the floor for a window. Under the lock that :meth:`_remember_written` takes."""
        now = time.monotonic()
        with self._floors_lock:  # None (too many to read whole): _user_floor raises each user's floor
            floors = None if read is None else _at_least(read, self._written.get(tenant, {}), now)
            if self.cache_s > 0:
                if len(self._floors) >= CACHE_MAX_ENTRIES:
                    self._floors.clear()
                self._floors[tenant] = (now + self.cache_s, floors)
        return floors

    def _remember_written(self, tenant: str, ref: str, floor_ms: int) -> None:
        """Keep a floor this process wrote (a token's lifetime, the floors older than that forgotten) and raise
        the tenant's cached floors to it."""
        now = time.monotonic()
        with self._floors_lock:
            written = {r: w for r, w in self._written.get(tenant, {}).items() if w[1] > now}
            written[ref] = (max(floor_ms, written.get(ref, (0, 0.0))[0]), now + ERASED_TOKENS_TTL_S)
            self._written[tenant] = written
            cached = self._floors.get(tenant)
            if cached is not None and cached[1] is not None:
                self._floors[tenant] = (cached[0], _at_least(cached[1], written, now))

    def _issuer_valid(self, issuer: str, tenant: str, *, allow_io: bool) -> bool:
        if issuer == BOOTSTRAP_ID:
            return self.bootstrap_key is not None and tenant == DEFAULT_TENANT
        if issuer == LOCAL_ID:  # minted while no credential existed: void once one does
            return tenant == DEFAULT_TENANT and not self.configured(allow_io=allow_io)
        record = self.get(issuer, allow_io=allow_io) if issuer.startswith(KEY_ID_PREFIX) else None
        return record is not None and record.active and record.tenant == tenant

    def signing_secret(self) -> str:
        """The HS256 secret: the setting, else the shared one in Redis (created once with SET NX)."""
        if self._signing_secret is None:
            self.client.set(self.keys.token_secret, secrets.token_urlsafe(48), nx=True)
            stored = self.client.get(self.keys.token_secret)
            if not isinstance(stored, str) or len(stored) < MIN_TOKEN_SECRET_CHARS:
                raise CredentialError("the stored token secret is missing or too short")
            self._signing_secret = stored
        return self._signing_secret

    # --- helpers ---

    def read(self, key_id: str) -> KeyRecord | None:
        """The stored record of ``key_id``, bypassing (and dropping) the cache entry."""
        self._cache.pop(key_id, None)
        self._refused.pop(key_id, None)
        return _record(key_id, self.client.hgetall(self.keys.api_key(key_id)))

    def _audit(self, tenant: str, action: str, key_id: str, *, actor: str, **fields: str) -> None:
        audit(self.client, self.keys.for_tenant(tenant), "audit", action, actor, keyId=key_id, **fields)


def _issued_ms(claims: Mapping[str, Any]) -> int:
    """When a token was issued, in ms: ``iatMs``; a token minted before that claim, ``iat`` (whole seconds)."""
    for name, scale in (("iatMs", 1), ("iat", 1000)):
        value = claims.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value * scale)
    return 0


def _floors_of(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A tenant's floors hash as read (user ref -> ms); a value that is not a whole number is no floor."""
    return {_text(ref): int(_text(ms)) for ref, ms in raw.items() if _text(ms).isdigit()}


def _at_least(
    floors: Mapping[str, int], written: Mapping[str, tuple[int, float]], now: float
) -> dict[str, int]:
    """``floors`` with each floor of ``written`` still kept at ``now`` where it is higher (or absent)."""
    out = dict(floors)
    for ref, (floor_ms, until) in written.items():
        if until > now and out.get(ref, 0) < floor_ms:
            out[ref] = floor_ms
    return out


def _check_key_request(tenant: str, role: str, name: str) -> None:
    try:
        check_tenant(tenant)
    except BadTenant as exc:
        raise CredentialError(str(exc), "tenant") from None
    if role not in ROLES:
        raise CredentialError(f"role must be one of {', '.join(ROLES)} (got {role!r})", "role")
    if role == "metrics" and tenant != DEFAULT_TENANT:  # it would be refused by every surface it may read
        message = (
            f"a metrics key reads the operations surfaces, which are the operator's: it belongs to tenant "
            f"{DEFAULT_TENANT!r} (got {tenant!r})"
        )
        raise CredentialError(message, "role")
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise CredentialError(f"name must be at most {MAX_NAME_CHARS} printable characters", "name")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _record(key_id: str, raw: Mapping[Any, Any]) -> KeyRecord | None:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    if "tenant" not in fields or "role" not in fields:
        return None
    revoked = fields.get("revokedAt")
    return KeyRecord(
        id=key_id,
        tenant=fields["tenant"],
        role=fields["role"],
        name=fields.get("name", ""),
        created_at_ms=int(fields.get("createdAt") or 0),
        revoked_at_ms=int(revoked) if revoked else None,
        secret_hash=fields.get("hash", ""),
    )
