"""The engine-wide keys: the ones no tenant owns (the tenants set, fair share, credentials, the broker, workers).
They start with the prefix alone; the few written together share a hash tag (``{fair}``, ``{credentials}``)."""

from __future__ import annotations

__all__ = ["EngineWide"]


class EngineWide:
    """The engine-wide keys, on every key builder (a mixin: the builder gives ``prefix``)."""

    __slots__ = ()
    prefix: str

    @property
    def tenants(self) -> str:
        """Set of tenants that have stored anything (the reconcile sweep and fair share walk it)."""
        return f"{self.prefix}tenants"

    @property
    def ready_tenants(self) -> str:
        """Fair share: the ring of tenants with ready scopes (list, rotated by READY_POP)."""
        return f"{self.prefix}{{fair}}:ready-tenants"

    @property
    def ready_prefix(self) -> str:
        """``ready_prefix + tenant`` is that tenant's ready list (READY_POP builds it from the ring)."""
        return f"{self.prefix}{{fair}}:ready:"

    def ready(self, tenant: str) -> str:
        """Fair share: one tenant's scope refs ready to drain (list, FIFO)."""
        return f"{self.ready_prefix}{tenant}"

    @property
    def drain_tickets(self) -> str:
        """Fair share: how many drain_next messages are out (string counter with a TTL; worker/runtime/fair.py)."""
        return f"{self.prefix}{{fair}}:drain-tickets"

    def api_key(self, key_id: str) -> str:
        """One API key: hash {tenant, role, name, hash, createdAt, revokedAt?}; the secret is never stored."""
        return f"{self.prefix}{{credentials}}:apikey:{key_id}"

    @property
    def api_keys(self) -> str:
        """Set of every API key id (``keys list`` of every tenant; "credentials are configured")."""
        return f"{self.prefix}{{credentials}}:apikeys"

    def api_keys_of(self, tenant: str) -> str:
        """Set of one tenant's API key ids, revoked ones too (its ``keys list``; worker/ops/key_index.py)."""
        return f"{self.prefix}{{credentials}}:apikeys-of:{tenant}"

    def active_api_keys_of(self, tenant: str) -> str:
        """Set of one tenant's API key ids not revoked (``AGENT_SIGNAL_TENANT_MAX_KEYS`` counts them)."""
        return f"{self.prefix}{{credentials}}:apikeys-active-of:{tenant}"

    @property
    def api_keys_indexed(self) -> str:
        """Mark (string): the keys created before the tenant indexes were added to them (worker/ops/key_index.py)."""
        return f"{self.prefix}{{credentials}}:apikeys-indexed"

    def tenant_deletion(self, tenant: str) -> str:
        """A tenant being deleted (hash: startedAt, actor, revokedAt, the walk's cursors and counts): while it exists
        no key of the tenant is made (worker/ops/tenant_deletion.py); gone once the deletion is done."""
        return f"{self.prefix}{{credentials}}:tenant-deletion:{tenant}"

    def tenant_deleted(self, tenant: str) -> str:
        """A tenant's deletion once done (hash: startedAt, removed; 10 minutes): a call meanwhile answers it again
        instead of starting another (worker/ops/tenant_deletion.py); a key made for the name again takes it out."""
        return f"{self.prefix}{{credentials}}:tenant-deleted:{tenant}"

    def tenant_deletion_lock(self, tenant: str) -> str:
        """One deletion call of a tenant at a time (string: its token, PX)."""
        return f"{self.prefix}{{credentials}}:tenant-deletion-lock:{tenant}"

    @property
    def tenants_deleted(self) -> str:
        """Tenants deleted, or being deleted (hash: tenant -> the deletion's start, ms): background work of one is
        dropped (worker/store/deleted_tenants.py); a key made for the name again takes it out."""
        return f"{self.prefix}{{credentials}}:tenants-deleted"

    @property
    def tenant_deletions(self) -> str:
        """The audit of deleted tenants (stream): the tenant's own trails go with it."""
        return f"{self.prefix}{{credentials}}:tenant-deletions"

    @property
    def token_secret(self) -> str:
        """The user-token signing secret (string, SET NX once) unless AGENT_SIGNAL_TOKEN_SECRET is set."""
        return f"{self.prefix}token-secret"

    @property
    def pseudonym_secret(self) -> str:
        """The key of the pseudonyms logs and the audit trail use (string, SET NX once; worker/telemetry/pseudonyms.py)
        unless AGENT_SIGNAL_PSEUDONYM_SECRET is set."""
        return f"{self.prefix}pseudonym-secret"

    @property
    def broker_prefix(self) -> str:
        """Celery's ``global_keyprefix`` on a Redis broker: the broker's keys live under ours."""
        return f"{self.prefix}broker:"

    @property
    def broker_unacked(self) -> str:
        """Kombu's Redis transport: messages a worker has taken and not acknowledged yet (hash)."""
        return f"{self.broker_prefix}unacked"

    def broker_queue(self, queue_name: str) -> str:
        """The Redis list that holds a queue's messages (Redis broker only)."""
        return f"{self.broker_prefix}{queue_name}"

    @property
    def workers(self) -> str:
        return f"{self.prefix}workers"

    @property
    def worker_info(self) -> str:
        """node -> JSON {concurrency, pid, startedAt}: what each worker runs with (written when it is ready)."""
        return f"{self.prefix}worker-info"

    def noop_marker(self, name: str) -> str:
        """Set by the benchmark's no-op task when it is given a marker (its latency baseline)."""
        return f"{self.prefix}noop:{name}"

    def task_attempts(self, task_id: str) -> str:
        """The runs of one plugin task message (its id, kept by Celery's retries and by a redelivery after its
        worker was lost): worker/runtime/tasks.py counts them here."""
        return f"{self.prefix}task-attempts:{task_id}"

    @property
    def reconcile_lock(self) -> str:
        return f"{self.prefix}reconcile-lock"

    @property
    def all_pattern(self) -> str:
        """A SCAN pattern for every key of this prefix (used by test cleanup, never FLUSHALL)."""
        return f"{self.prefix}*"
