"""The state the function machine keeps for one session: :class:`FnState` (one function's phase, turns,
evidence, ledger ``kv``, continuation count, blocked backstop) and :class:`SessionRuntime` (the active and
locked functions, every function's state, the session ledger, artifacts and needs-attention items), each
with its camelCase JSON form. sessions/fsm.py holds the rules that change them; import both from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.signals import ledger_view

__all__ = ["FnState", "SessionRuntime"]


@dataclass
class FnState:
    phase: str = "active"
    activated_at_turn: int = 0
    current_turn: int = 0
    evidence_observed: dict[str, Any] = field(default_factory=dict)
    tools_observed: list[str] = field(default_factory=list)
    continuation_count: int = 0
    cooldown_until_turn: int = 0
    gate_satisfied: bool = False
    kv: dict[str, Any] = field(default_factory=dict)
    schema_version: int = 1
    blocked_at: int | None = None
    blocked_timeout_ms: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "activatedAtTurn": self.activated_at_turn,
            "currentTurn": self.current_turn,
            "evidenceObserved": self.evidence_observed,
            "toolsObserved": self.tools_observed,
            "continuationCount": self.continuation_count,
            "cooldownUntilTurn": self.cooldown_until_turn,
            "gateSatisfied": self.gate_satisfied,
            "kv": self.kv,
            "schemaVersion": self.schema_version,
            "blockedAt": self.blocked_at,
            "blockedTimeoutMs": self.blocked_timeout_ms,
        }

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any]) -> FnState:
        return cls(
            phase=d.get("phase", "active"),
            activated_at_turn=int(d.get("activatedAtTurn", 0)),
            current_turn=int(d.get("currentTurn", 0)),
            evidence_observed=dict(d.get("evidenceObserved", {})),
            tools_observed=list(d.get("toolsObserved", [])),
            continuation_count=int(d.get("continuationCount", 0)),
            cooldown_until_turn=int(d.get("cooldownUntilTurn", 0)),
            gate_satisfied=bool(d.get("gateSatisfied", False)),
            kv=dict(d.get("kv", {})),
            schema_version=int(d.get("schemaVersion", 1)),
            blocked_at=d.get("blockedAt"),
            blocked_timeout_ms=d.get("blockedTimeoutMs"),
        )


@dataclass
class SessionRuntime:
    """Everything the machine keeps for one session (persisted as one JSON document)."""

    active: list[str] = field(default_factory=list)  # insertion-ordered set
    locked: list[str] = field(default_factory=list)  # auto-activated: transitions cannot deactivate them
    states: dict[str, FnState] = field(default_factory=dict)
    session_ledger: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    attention: dict[str, dict[str, Any]] = field(default_factory=dict)  # pausing signals awaiting a human
    seq: int = 0  # counts recorded tool calls (source ids of their events)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "locked": self.locked,
            "states": {k: v.to_json_dict() for k, v in self.states.items()},
            "sessionLedger": self.session_ledger,
            "artifacts": self.artifacts,
            "attention": self.attention,
            "seq": self.seq,
        }

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any]) -> SessionRuntime:
        return cls(
            active=list(d.get("active", [])),
            locked=list(d.get("locked", [])),
            states={k: FnState.from_json_dict(v) for k, v in d.get("states", {}).items()},
            session_ledger=dict(d.get("sessionLedger", {})),
            artifacts=dict(d.get("artifacts", {})),
            attention=dict(d.get("attention", {})),
            seq=int(d.get("seq", 0)),
        )

    def functions_view(self) -> dict[str, dict[str, Any]]:
        """Every function with state (the simulate output's ``functions``)."""
        return {
            name: {
                "phase": st.phase,
                "active": name in self.active,
                "ledger": ledger_view(st.kv),
                "evidence": st.evidence_observed,
                "continuationCount": st.continuation_count,
                "currentTurn": st.current_turn,
            }
            for name, st in self.states.items()
        }
