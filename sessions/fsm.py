"""The function state machine (rolebox, reference §1.3 and §1.7), as pure operations on a SessionRuntime.

* ``signal``: the session ledger first (before the type guard, as later rolebox versions do; a type that is not
  a string under its JavaScript spelling), then the guard, then every active function with state: ledger
  write, ``kv.__signal_type``; pausing signals set ``evidence.paused`` and phase ``gated`` (``blocked`` also
  starts the 2-minute backstop, the other two end one), then payload capture for ``observe`` specs with
  ``tool: signal`` and ``capture_payload_as``.
* ``turn``: every function's ``currentTurn`` += 1, then gate and transitions of the active functions (gate
  re-evaluation overwrites the phase, even a pausing signal's or ``complete``; one it leaves ``gated`` loses its
  blocked backstop).
* ``idle``: at most ONE continuation: skip complete; gated ones only pass when the blocked backstop expired;
  skip unmet ``requires_evidence``; ``continue_until`` true → complete; else the continuation decision.
* ``tool_after``: observed tools, ``requires_evidence`` auto-marks, observe specs whose ``tool`` equals the tool
  (one without ``tool`` never fires) with when_args / when_output filters, set_evidence, capture_payload_as,
  sync_todos, inject. Captured payloads and ``when_args`` comparisons are ``JSON.stringify`` text
  (:func:`~sessions.signals.json_stringify`).

Nothing here does I/O: the Redis store and the simulator both drive these functions. The state they change,
``FnState`` and ``SessionRuntime``, is defined in sessions/runtime.py and importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sessions.conditions import CondEnv, ConditionRegistry
from sessions.continuation import blocking_reason, continue_function
from sessions.functions import FunctionDef, ObserveSpec
from sessions.runtime import FnState, SessionRuntime
from sessions.signals import (
    ALL_SIGNAL_TYPES,
    DEFAULT_BLOCKED_TIMEOUT_MS,
    LEDGER_KEY,
    PAUSING_SIGNALS,
    UnrecognizedSignalType,
    guard_message,
    js_string,
    json_stringify,
    record_signal,
    result_text,
)

__all__ = ["FnState", "FunctionMachine", "SessionRuntime"]


def _args_match(expected: Mapping[str, Any], args: Mapping[str, Any]) -> list[bool]:
    """Per key of ``expected``: ``JSON.stringify(args[k]) === JSON.stringify(v)``. A key the args lack is
    ``undefined``, which no value's JSON equals (not even ``null``'s)."""
    return [k in args and json_stringify(args[k]) == json_stringify(v) for k, v in expected.items()]


def _idle_candidate(fn: FunctionDef, st: FnState, now_ms: int) -> bool:
    """Whether ``idle`` looks at this function: not complete, not gated (unless its blocked backstop expired,
    which reactivates it), its ``requires_evidence`` met, and a ``continue_until`` to evaluate."""
    if st.phase == "complete":
        return False
    if st.phase == "gated" and not _release_expired_block(st, now_ms):
        return False
    if fn.requires_evidence and not all(st.evidence_observed.get(t) is True for t in fn.requires_evidence):
        return False
    return fn.continue_until is not None


def _release_expired_block(st: FnState, now_ms: int) -> bool:
    """A gated function whose ``blocked`` backstop expired becomes active again (True); else it stays gated.
    Only a function that ``blocked`` gated has a backstop (:func:`_set_backstop`)."""
    timeout = st.blocked_timeout_ms if st.blocked_timeout_ms is not None else DEFAULT_BLOCKED_TIMEOUT_MS
    if st.blocked_at is not None and now_ms - st.blocked_at > timeout:
        st.phase = "active"
        st.evidence_observed["paused"] = False
        _set_backstop(st, None)
        return True
    return False


def _set_backstop(st: FnState, blocked_at: int | None) -> None:
    """Start the ``blocked`` backstop at ``blocked_at`` (its timeout defaults once to 2 minutes, ``??=``), or end
    it (None). rolebox clears it only when it fires, so a block resolved through the gate left it behind and a
    later ``need_approval`` pause was force-released at idle (an audit, finding 2). It ends whenever the function
    leaves ``gated`` (gate re-evaluation, the timeout) and whenever another pausing signal gates it."""
    st.blocked_at = blocked_at
    if blocked_at is not None and st.blocked_timeout_ms is None:
        st.blocked_timeout_ms = DEFAULT_BLOCKED_TIMEOUT_MS


def _record_in_session(rt: SessionRuntime, signal_type: Any, payload: Any) -> None:
    """The session ledger's write, before the guard (later rolebox): under the type's JavaScript spelling
    (``undefined``, ``null``, ``true``, ``1``; rolebox keys its Map by the value itself), except a value that is
    not that string but spells one of the eight types (an array ``["answer"]``): rolebox's key would be the array,
    which no ``signal_observed(answer)`` finds, so it is not recorded."""
    key = js_string(signal_type)
    if isinstance(signal_type, str) or key not in ALL_SIGNAL_TYPES:
        rt.session_ledger[key] = payload


def _decision(
    continued: bool, function: str | None, *, reason: str | None = None, reminder: str | None = None
) -> dict[str, Any]:
    """An ``idle`` decision (its ``completed`` list is added by the caller)."""
    return {"continued": continued, "function": function, "reason": reason, "reminder": reminder}


class FunctionMachine:
    """The rules, bound to a set of definitions and a condition registry."""

    def __init__(
        self,
        definitions: Mapping[str, FunctionDef],
        *,
        conditions: ConditionRegistry | None = None,
        session_id: str = "",
        workspace_dir: Path | None = None,
    ) -> None:
        self.definitions = dict(definitions)
        self.conditions = conditions or ConditionRegistry()
        self.session_id = session_id
        self.workspace_dir = workspace_dir

    def _env(self, rt: SessionRuntime, name: str, st: FnState, *, user_messaged: bool) -> CondEnv:
        fn = self.definitions.get(name)
        return CondEnv(
            session_id=self.session_id,
            fn_name=name,
            state=st,
            artifacts=rt.artifacts,
            required_evidence=fn.requires_evidence if fn else (),
            user_messaged_this_turn=user_messaged,
            session_ledger=rt.session_ledger,
            workspace_dir=self.workspace_dir,
        )

    # ---- activation --------------------------------------------------------------------------------

    def activate(self, rt: SessionRuntime, name: str, *, locked: bool = False) -> None:
        """Add to the active set; keep existing state unless its schema version changed."""
        fn = self.definitions.get(name)
        if fn is None:
            raise KeyError(f"unknown function {name!r}")
        if name not in rt.active:
            rt.active.append(name)
        if locked and name not in rt.locked:
            rt.locked.append(name)
        st = rt.states.get(name)
        if st is None or st.schema_version != fn.state_schema_version:
            st = FnState(schema_version=fn.state_schema_version)
            rt.states[name] = st
        st.activated_at_turn = st.current_turn

    def deactivate(self, rt: SessionRuntime, name: str) -> None:
        """Remove from the active set; the state (and its ledger) survives."""
        if name in rt.active:
            rt.active.remove(name)
        self._clear_attention(rt)

    # ---- the signal tool ---------------------------------------------------------------------------

    def signal(self, rt: SessionRuntime, signal_type: Any, payload: Any = None, *, now_ms: int = 0) -> str:
        """The ``signal`` tool; raises UnrecognizedSignalType with the guard's message. ``signal_type`` is what
        the call carried (:data:`~sessions.signals.UNDEFINED` when it had none): anything but one of the eight
        strings is refused, after the session ledger recorded it under its JavaScript spelling."""
        _record_in_session(rt, signal_type, payload)
        if not isinstance(signal_type, str) or signal_type not in ALL_SIGNAL_TYPES:
            raise UnrecognizedSignalType(guard_message(signal_type))
        recorded = 0
        for name in list(rt.active):
            st = rt.states.get(name)
            if st is None:
                continue
            record_signal(st.kv, signal_type, payload)
            st.kv["__signal_type"] = signal_type
            if signal_type in PAUSING_SIGNALS:
                st.evidence_observed["paused"] = True
                st.phase = "gated"
                rt.attention[name] = {"type": signal_type, "payload": payload, "since": now_ms}
                _set_backstop(st, now_ms if signal_type == "blocked" else None)
            recorded += 1
        if payload is not None and rt.active:
            for name in rt.active:
                fn = self.definitions.get(name)
                for spec in fn.observe if fn else ():
                    if spec.capture_payload_as and spec.tool == "signal":
                        rt.artifacts[spec.capture_payload_as] = json_stringify(payload)
        return result_text(signal_type, payload, active=len(rt.active), recorded_on=recorded)

    # ---- tool-after observe ------------------------------------------------------------------------

    def tool_after(self, rt: SessionRuntime, tool: str, args: Any = None, output: Any = None) -> list[str]:
        """Observe a finished tool call; returns the ``inject`` texts of the specs that fired."""
        injects: list[str] = []
        args_map: Mapping[str, Any] = args if isinstance(args, Mapping) else {}
        for name in list(rt.active):
            fn, st = self.definitions.get(name), rt.states.get(name)
            if fn is None or st is None:
                continue
            if tool not in st.tools_observed:
                st.tools_observed.append(tool)
            if tool == "signal":
                _observe_signal_call(rt, st, args_map)
            for tag in fn.requires_evidence:
                gated = any(
                    s.on == "tool_after" and s.tool == tool and s.set_evidence == tag and s.when_output
                    for s in fn.observe
                )
                if not gated and tag == tool:
                    st.evidence_observed[tag] = True
            for spec in fn.observe:  # ``spec.tool`` must equal the tool: a spec without one never fires
                if spec.on != "tool_after" or spec.tool != tool:
                    continue
                if self._passes_filters(spec.when_output, spec.when_args, args, output):
                    injects.extend(_apply_spec(rt, st, spec, tool, args_map))
        return injects

    @staticmethod
    def _passes_filters(when_output: Any, when_args: Any, args: Any, output: Any) -> bool:
        if when_output:
            text = output if isinstance(output, str) else json_stringify(output if output is not None else "")
            if when_output.get("contains") and str(when_output["contains"]) not in text:
                return False
            if when_output.get("not_contains") and str(when_output["not_contains"]) in text:
                return False
        if when_args:
            if args is None:
                return False
            given = args if isinstance(args, Mapping) else {}
            if when_args.get("match") and not all(_args_match(when_args["match"], given)):
                return False
            if when_args.get("not_match") and any(_args_match(when_args["not_match"], given)):
                return False
        return True

    # ---- per turn ------------------------------------------------------------------------------------

    def turn(self, rt: SessionRuntime, *, user_messaged: bool) -> None:
        """A model turn: advance every function's turn, then gates and transitions of the active ones."""
        for state in rt.states.values():
            state.current_turn += 1
        for name in list(rt.active):
            fn, st = self.definitions.get(name), rt.states.get(name)
            if fn is None or st is None or name not in rt.active:
                continue
            env = self._env(rt, name, st, user_messaged=user_messaged)
            if fn.gate is not None:
                st.gate_satisfied = self.conditions.evaluate(fn.gate, env)
                st.phase = "active" if st.gate_satisfied else "gated"
                if st.phase != "gated":  # the gate ended the pause: its backstop goes with it
                    _set_backstop(st, None)
            to_activate: list[str] = []
            to_deactivate: list[str] = []
            for transition in fn.transitions:
                fired = (
                    st.gate_satisfied
                    if transition.when == "gate"
                    else self.conditions.evaluate(transition.when, env)
                )
                if fired:
                    to_activate.extend(transition.activate)
                    to_deactivate.extend(transition.deactivate)
            for target in to_activate:
                if target in self.definitions:
                    self.activate(rt, target)
            for target in to_deactivate:
                if target == name and name not in rt.locked:
                    self.deactivate(rt, name)
        self._clear_attention(rt)

    # ---- per idle ------------------------------------------------------------------------------------

    def idle(
        self,
        rt: SessionRuntime,
        *,
        now_ms: int,
        last_two_outputs_identical: bool = False,
        model_asked_question: bool = False,
    ) -> dict[str, Any]:
        """End of an assistant turn: completions, and at most one continuation. Returns the decision."""
        burst = sum(st.continuation_count for st in rt.states.values())
        completed: list[str] = []
        blocked: tuple[str, str] | None = None
        decision: dict[str, Any] | None = None
        for name in list(rt.active):
            fn, st = self.definitions.get(name), rt.states.get(name)
            if fn is None or st is None or not _idle_candidate(fn, st, now_ms):
                continue
            if self.conditions.evaluate(fn.continue_until, self._env(rt, name, st, user_messaged=False)):
                st.phase = "complete"
                completed.append(name)
                continue
            reason = blocking_reason(st, fn, burst, last_two_outputs_identical, model_asked_question)
            if reason is not None:
                blocked = blocked or (name, reason)
                continue
            decision = _decision(True, name, reminder=continue_function(st, fn, name))
            break
        self._clear_attention(rt)
        if decision is None:
            if blocked is not None:
                decision = _decision(False, blocked[0], reason=blocked[1])
            else:
                decision = _decision(False, None, reason="no function needs a continuation")
        decision["completed"] = completed
        return decision

    @staticmethod
    def _clear_attention(rt: SessionRuntime) -> None:
        """Needs-attention items last while their function stays active and gated."""
        for name in list(rt.attention):
            st = rt.states.get(name)
            if st is None or st.phase != "gated" or name not in rt.active:
                del rt.attention[name]

    # ---- kv and artifacts ----------------------------------------------------------------------------

    @staticmethod
    def set_kv(rt: SessionRuntime, key: str, value: Any) -> None:
        for name in rt.active:
            st = rt.states.get(name)
            if st is not None:
                st.kv[key] = value


def _observe_signal_call(rt: SessionRuntime, st: FnState, args: Mapping[str, Any]) -> None:
    """The observe path for the ``signal`` tool: last type, the legacy list ledger, ``__signal_payload``."""
    if isinstance(args.get("type"), str):
        st.kv["__signal_type"] = args["type"]
        legacy = st.kv.get(LEDGER_KEY)
        if isinstance(legacy, list) and args["type"] not in legacy:
            legacy.append(args["type"])  # the legacy string[] writer; a Record ledger is the tool's to write
    if args.get("payload") is not None:
        rt.artifacts["__signal_payload"] = json_stringify(args["payload"])


def _apply_spec(
    rt: SessionRuntime, st: FnState, spec: ObserveSpec, tool: str, args: Mapping[str, Any]
) -> list[str]:
    if spec.set_evidence:
        st.evidence_observed[spec.set_evidence] = True
    if spec.capture_payload_as and "payload" in args:  # defined: a null payload is captured as "null"
        rt.artifacts[spec.capture_payload_as] = json_stringify(args["payload"])
    if spec.sync_todos and tool == "todowrite":
        rendered = _render_todos(args.get("todos"))
        if rendered:
            st.kv["__todos"] = rendered
    return [spec.inject] if spec.inject else []


def _render_todos(todos: Any) -> str | None:
    if not isinstance(todos, list) or not todos:
        return None
    lines = []
    for raw in todos:
        item: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        mark = "x" if item.get("status") == "completed" else " "
        lines.append(f"- [{mark}] {item.get('content') or ''}")
    return "\n".join(lines)
