"""Self-iteration's own keys: its families, placed by the engine's key builder (``Keys.plugin_scoped`` in a
scope's bucket, ``Keys.plugin_home`` in the tenant's home slot), so the plugin names its data and never builds a
key string. The families are LobeHub's (``procedure-marker`` keeps its double prefix, quirk 10)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.plugin import Keys

__all__ = ["SelfIterationKeys", "skill_intent_field", "skill_intent_field_of_before"]


@dataclass(frozen=True, slots=True)
class SelfIterationKeys:
    """The keys of one tenant's self-iteration data (``SelfIterationKeys(ctx.keys)`` in a handler)."""

    keys: Keys

    # --- the tool-outcome procedure: per scope ---

    def procedure(self, scope_key: str, day: int) -> str:
        """record id -> procedure record (JSON), those written on ``day`` (days since the epoch, UTC):
        policies/self_iteration/records/procedures.py."""
        return self.keys.plugin_scoped("procedure", scope_key, f"d{day}")

    def procedure_undated(self, scope_key: str) -> str:
        """The one procedure hash of a scope written before records were kept by day (erasure still reads it;
        it expires 7 days after its last write)."""
        return self.keys.plugin_scoped("procedure", scope_key)

    def procedure_marker(
        self, scope_key: str, domain_key: str, intent: str, procedure_key: str, user_id: str | None
    ) -> str:
        """A marker (``handled`` or ``accumulated``): one key (LobeHub double-prefixes it, quirk 10), one user's
        (``u=<userId>`` first: a user id holds no ``:``). A scope may be two users' and a procedure key names a
        message id, a tool call id or a source id a producer chose: under the scope alone one user's tool outcome
        suppressed another user's memory write (a derived-id walk)."""
        return f"{self.procedure_markers_of(scope_key, user_id or '')}{domain_key}:{intent}:{procedure_key}"

    def procedure_markers_of(self, scope_key: str, user_id: str) -> str:
        """What every marker of ``user_id`` in the scope starts with (erasure deletes them)."""
        return self.keys.plugin_scoped("procedure-marker", scope_key, f"u={user_id}") + ":"

    def procedure_marker_of_before(
        self, scope_key: str, domain_key: str, intent: str, procedure_key: str
    ) -> str:
        """A marker written before markers were one user's (read, never written: it lives 7 days)."""
        return self.keys.plugin_scoped("procedure-marker", scope_key, domain_key, intent, procedure_key)

    def procedure_receipts(self, scope_key: str) -> str:
        """The scope's last procedure receipts (JSON list items, newest first)."""
        return self.keys.plugin_scoped("procedure-receipts", scope_key)

    def reflection_accumulator(self, scope_key: str, scope_type: str, scope_id: str) -> str:
        """Self-reflection counters of one reflection scope (task, operation or topic)."""
        return self.keys.plugin_scoped("self-reflection-accumulator", scope_key, scope_type, scope_id)

    def skill_intents(self, scope_key: str) -> str:
        """LobeHub's skill-intent records of a scope (parked skill candidates), under :func:`skill_intent_field`."""
        return self.keys.plugin_scoped("skill-intent", scope_key)

    def skill_candidates(self, scope_key: str) -> str:
        """Accumulated weak skill candidates of a scope (score bucket)."""
        return self.keys.plugin_scoped("skill-candidates", scope_key)

    # --- user data: the tenant's home slot (erased by policies/self_iteration/erasure.py) ---

    def memories(self, user_id: str) -> str:
        """memory id -> JSON, per user."""
        return self.keys.plugin_home("memories", user_id)

    def skills(self, user_id: str, agent_id: str) -> str:
        """skill document id -> JSON (current version), per user and agent."""
        return self.keys.plugin_home("skills", user_id, agent_id)

    def skill_runs(self, user_id: str, agent_id: str) -> str:
        """run source id -> JSON of what that run did to the agent's skills (a redelivered run answers it)."""
        return self.keys.plugin_home("skill-runs", user_id, agent_id)

    def skill_history(self, document_id: str) -> str:
        """history id -> JSON of a previous version (for CAS rollback)."""
        return self.keys.plugin_home("skill-history", document_id)

    def review_guard(self, guard_key: str) -> str:
        """nightly-review-guard:<key> etc.: one run per review window."""
        return self.keys.plugin_home("dedupe", guard_key)

    @property
    def diagnostics(self) -> str:
        """Malformed judge answers (newest first), for operators."""
        return self.keys.plugin_home("diagnostics")

    @property
    def overrides(self) -> str:
        """userId -> "1" | "0": per-user override of the self-iteration feature gate."""
        return self.keys.plugin_home("features", "self-iteration")


def skill_intent_field(message_id: str, user_id: str | None) -> str:
    """The field of a parked skill candidate in :meth:`SelfIterationKeys.skill_intents`: its user's (first: a user
    id holds no ``:``; none for an event of no user) and the feedback message's id. Under the message id alone,
    another user's message naming the same ``messageId`` overwrote the candidate (a derived-id walk)."""
    return f"skill-intent-record:{user_id or ''}:{message_id}"


def skill_intent_field_of_before(message_id: str) -> str:
    """The field a candidate was parked under before fields were one user's (read, never written)."""
    return f"skill-intent-record:{message_id}"
