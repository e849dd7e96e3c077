"""rolebox's condition language (reference rolebox-signals.md §1.6), used by ``gate``, ``continue_until`` and
``transitions``.

``Condition = str | {"all": [Condition]} | {"any": [Condition]} | {"not": Condition}``; ``None`` is false;
an object is checked for ``all``, then ``any``, then ``not``; anything else is false. A string is a named
call ``name(arg)`` (grammar ``^([a-z][a-z0-9_]*)\\(([^)]*)\\)$`` as JavaScript reads it: ``$`` is the very end,
so ``"f(x)\\n"`` is no call; the argument trimmed of JavaScript's whitespace) or a bare name (argument ``""``);
anything else is looked up whole, and an unknown name is false. ``turn_count(n)`` reads ``n`` as JavaScript's
``Number(n || "0")`` does (:func:`js_to_number`). The nine built-ins are registered on every
:class:`ConditionRegistry`; ``register`` adds (or, with a warning, replaces) one.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sessions.signals import LEDGER_KEY, js_string

__all__ = [
    "BUILTIN_CONDITIONS",
    "CondEnv",
    "ConditionRegistry",
    "FnStateView",
    "evaluate_condition",
    "js_to_number",
    "parse_call",
    "plan_file",
    "plan_name_problem",
]

log = logging.getLogger(__name__)
CALL = re.compile(r"([a-z][a-z0-9_]*)\(([^)]*)\)")  # fullmatch: Python's "$" would pass a final "\n"
# String.prototype.trim's and StringToNumber's whitespace: WhiteSpace (tab, VT, FF, BOM, the Zs spaces) and
# LineTerminator. Python's str.strip also takes \x1c-\x1f and \x85 and keeps the BOM.
JS_WHITESPACE = (
    "\t\v\f\ufeff \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u202f\u205f\u3000\n\r\u2028\u2029"
)
# StringToNumber's literals (fullmatch): ASCII digits only, no separators; non-decimal ones take no sign
_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = {"x": 16, "o": 8, "b": 2}
_NON_DECIMAL = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
UNCHECKED = "- [ ]"


class FnStateView(Protocol):
    """What conditions read of a function's state."""

    kv: dict[str, Any]
    evidence_observed: dict[str, Any]
    tools_observed: list[str]
    current_turn: int
    activated_at_turn: int


@dataclass
class CondEnv:
    session_id: str
    fn_name: str
    state: FnStateView
    artifacts: Mapping[str, str]
    required_evidence: Sequence[str] = ()
    user_messaged_this_turn: bool = False
    session_ledger: Mapping[str, Any] = field(default_factory=dict)
    workspace_dir: Path | None = None


ConditionFn = Callable[[str, CondEnv], bool]


def parse_call(text: str) -> tuple[str, str]:
    """(name, argument). A string that is not ``name(arg)`` is looked up whole, with argument ``""``."""
    match = CALL.fullmatch(text)
    if match is None:
        return text, ""
    return match.group(1), match.group(2).strip(JS_WHITESPACE)


def js_to_number(text: str) -> float:
    """JavaScript's ``Number(text)`` (ECMAScript StringToNumber): trimmed of JavaScript's whitespace, empty is 0;
    ``0x``/``0o``/``0b`` integers, decimals with an optional exponent, ``Infinity`` with an optional sign; anything
    else is NaN (``1_0``, ``١٢``, ``-0x10``, ``inf``: Python's ``float`` took the first two and refused hex)."""
    trimmed = text.strip(JS_WHITESPACE)
    if not trimmed:
        return 0.0
    if _NON_DECIMAL.fullmatch(trimmed):
        try:
            return float(int(trimmed[2:], _RADIX[trimmed[1].lower()]))
        except OverflowError:
            return math.inf
    return float(trimmed) if _DECIMAL.fullmatch(trimmed) else math.nan


def _plan_todos_complete(_: str, env: CondEnv) -> bool:
    todos = env.state.kv.get("__todos")
    text = todos if isinstance(todos, str) else env.artifacts.get("plan")
    return text is not None and UNCHECKED not in text


def _signal_observed(arg: str, env: CondEnv) -> bool:
    raw = env.state.kv.get(LEDGER_KEY)
    if isinstance(raw, dict) and arg in raw:
        return True
    if isinstance(raw, list) and arg in raw:
        return True
    return arg in env.session_ledger  # the session-ledger fallback (rolebox 1.2.0)


def _turn_count(arg: str, env: CondEnv) -> bool:
    """``currentTurn - activatedAtTurn >= Number(n || "0")``; a NaN bound is false, as every comparison with it."""
    return env.state.current_turn - env.state.activated_at_turn >= js_to_number(arg or "0")


def _state_eq(arg: str, env: CondEnv) -> bool:
    key, sep, value = arg.partition("=")
    if not sep:
        return False
    rendered = js_string(env.state.kv[key]) if key in env.state.kv else "undefined"  # String(undefined)
    return rendered == value


def plan_name_problem(name: str) -> str | None:
    """Why ``plan_incomplete(name)`` names no file inside the plans directory, or None: a plan name is a path
    relative to ``.rolebox/plans`` (without ``.md``) that stays inside it."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return f"plan name {name!r} is an absolute path"
    if ".." in parts or "\x00" in name:
        return f"plan name {name!r} leaves the plans directory"
    return None


def plan_file(plans: Path, name: str) -> Path | None:
    """``plans/<name>.md`` when it resolves (symlinks followed) inside ``plans``, else None."""
    if plan_name_problem(name) is not None:
        return None
    path = (plans / f"{name}.md").resolve()
    return path if path.is_relative_to(plans.resolve()) else None


def _plan_incomplete(arg: str, env: CondEnv) -> bool:
    """Some plan file (``arg``'s, or any) has an unchecked item. A name, or a file (symlink), that leaves the
    plans directory is never read: the condition is false and a warning names it (load time refuses it)."""
    if env.workspace_dir is None:
        return False
    plans = env.workspace_dir / ".rolebox" / "plans"
    names = [arg] if arg else sorted(path.name[:-3] for path in plans.glob("*.md"))
    for name in names:
        path = plan_file(plans, name)
        if path is None:
            log.warning("plan_incomplete(%r) in %s: the plan leaves %s; not read", name, env.fn_name, plans)
            continue
        try:
            if UNCHECKED in path.read_text(encoding="utf-8"):
                return True
        except OSError:
            continue
    return False


BUILTIN_CONDITIONS: dict[str, ConditionFn] = {
    "user_approval": lambda _, env: env.user_messaged_this_turn,
    "artifact_exists": lambda arg, env: arg in env.artifacts,
    "plan_todos_complete": _plan_todos_complete,
    "evidence_met": lambda _, env: all(
        env.state.evidence_observed.get(t) is True for t in env.required_evidence
    ),
    "tool_observed": lambda arg, env: arg in env.state.tools_observed,
    "signal_observed": _signal_observed,
    "turn_count": _turn_count,
    "state_eq": _state_eq,
    "plan_incomplete": _plan_incomplete,
}


class ConditionRegistry:
    """The named conditions available to function definitions: the nine built-ins plus registered ones."""

    def __init__(self) -> None:
        self._conditions: dict[str, ConditionFn] = dict(BUILTIN_CONDITIONS)

    def register(self, name: str, fn: ConditionFn) -> None:
        """Add a named condition; replacing an existing one logs a warning (rolebox overwrites too)."""
        if name in self._conditions:
            log.warning("condition %r is already registered; replacing it", name)
        self._conditions[name] = fn

    def known(self) -> frozenset[str]:
        return frozenset(self._conditions)

    def evaluate(self, condition: Any, env: CondEnv) -> bool:
        return evaluate_condition(condition, env, self)


def evaluate_condition(condition: Any, env: CondEnv, registry: ConditionRegistry) -> bool:
    """True when ``condition`` holds in ``env``."""
    if condition is None:
        return False
    if isinstance(condition, str):
        name, arg = parse_call(condition)
        fn = registry._conditions.get(name)
        return bool(fn(arg, env)) if fn is not None else False
    if isinstance(condition, Mapping):
        if "all" in condition:
            items = condition["all"]
            return isinstance(items, list) and all(evaluate_condition(c, env, registry) for c in items)
        if "any" in condition:
            items = condition["any"]
            return isinstance(items, list) and any(evaluate_condition(c, env, registry) for c in items)
        if "not" in condition:
            return not evaluate_condition(condition["not"], env, registry)
    return False
