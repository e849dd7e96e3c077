"""``agent-signal functions simulate``: run function definitions against a scripted session, offline.

Each line of the script is one step (the outside contract, docs/control-signals.md): ``activate``, ``deactivate``, ``signal``, ``tool``,
``artifact``, ``turn``, ``idle``, ``set``. Each produces exactly one JSON line
``{"step", "result", "functions", "artifacts"}``; ``result`` is the signal tool's text for signal steps (the
runtime guard's message for an unknown type, spelled as JavaScript spells it: the script goes on), the
continuation decision for idle steps, else null. Time: a ``signal`` or ``idle`` step's ``nowMs``; a ``signal``
without one runs at the last ``nowMs`` a step gave, else the wall clock; an ``idle`` without one at the wall
clock (the outside contract). A script that gives ``nowMs`` gives the same answer on any day (a signal step stamped the
wall clock and could not say "2 minutes after the block": an audit, finding 4). A step that cannot be understood is reported on stderr naming its line, and produces a line
whose ``result`` is ``{"error": ...}`` so the numbering stays aligned. A line holding ``NaN`` or ``Infinity``
(not JSON) or nesting deeper than the decoder reads is such a step too, so every output line is JSON; so is a
blank line (input line i is output line i).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.fsm import FunctionMachine, SessionRuntime
from sessions.signals import UNDEFINED, UnrecognizedSignalType
from worker.core.clock import now_ms
from worker.documents.projection import MAX_ISO_MS as MAX_NOW_MS  # as an event's timestamp: below 2**53

__all__ = ["SimulationError", "loads_step", "run_script"]


class SimulationError(ValueError):
    """A step is malformed; the message names the field."""


def _activation(machine: FunctionMachine, rt: SessionRuntime, kind: str, name: Any) -> None:
    if not isinstance(name, str):
        raise SimulationError(f"{kind}: must be a function name")
    if kind == "deactivate":  # a name neither defined nor active is refused, as the HTTP route refuses it
        if name not in machine.definitions and name not in rt.active:
            raise SimulationError(f"deactivate: unknown function {name!r}")
        machine.deactivate(rt, name)
        return
    try:
        machine.activate(rt, name)
    except KeyError:
        raise SimulationError(f"activate: unknown function {name!r}") from None


@dataclass
class _Simulation:
    """One script's session: the machine, its runtime, and the script's clock (the last ``nowMs`` a step gave,
    0 before any), so that nothing but the script decides the output."""

    machine: FunctionMachine
    rt: SessionRuntime = field(default_factory=SessionRuntime)
    now_ms: int | None = None  # the last nowMs a step gave

    def tick(self, kind: str, body: Mapping[str, Any], *, wall_clock_when_absent: bool = False) -> int:
        """The step's "now": its ``nowMs`` (checked, and from then on the script's clock); without one the
        script's clock, or the wall clock before any step gave one (always, for ``wall_clock_when_absent``)."""
        now = body.get("nowMs")
        if now is not None:
            if isinstance(now, bool) or not isinstance(now, int) or not 0 <= now <= MAX_NOW_MS:
                raise SimulationError(f"{kind}.nowMs: must be an integer (Unix ms) from 0 to {MAX_NOW_MS}")
            self.now_ms = now
            return now
        if wall_clock_when_absent or self.now_ms is None:
            return now_ms()
        return self.now_ms


def _signal(sim: _Simulation, body: Mapping[str, Any]) -> str:
    """The signal tool with the type as the step gave it (absent: JavaScript's undefined, for the guard)."""
    payload = body.get("payload")
    if "payload" in body and not isinstance(payload, Mapping):  # null too: an object or absent, as over HTTP
        raise SimulationError("signal.payload: must be an object")
    now_ms = sim.tick("signal", body)
    try:
        return sim.machine.signal(
            sim.rt,
            body.get("type", UNDEFINED),
            dict(payload) if payload is not None else None,
            now_ms=now_ms,
        )
    except UnrecognizedSignalType as exc:
        return str(exc)


def _tool(sim: _Simulation, body: Mapping[str, Any]) -> None:
    if not isinstance(body.get("name"), str):
        raise SimulationError("tool.name: is required")
    sim.machine.tool_after(sim.rt, body["name"], body.get("args"), body.get("output"))


def _artifact(sim: _Simulation, body: Mapping[str, Any]) -> None:
    if not isinstance(body.get("name"), str) or not isinstance(body.get("content"), str):
        raise SimulationError("artifact: needs name and content strings")
    sim.rt.artifacts[body["name"]] = body["content"]


def _turn(sim: _Simulation, body: Mapping[str, Any]) -> None:
    sim.machine.turn(sim.rt, user_messaged=_flag("turn", body, "userMessaged"))


def _flag(kind: str, body: Mapping[str, Any], name: str) -> bool:
    """A step's boolean field (false when absent): anything but true or false names it (``"no"`` was true)."""
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise SimulationError(f"{kind}.{name}: must be true or false")
    return value


def _idle(sim: _Simulation, body: Mapping[str, Any]) -> dict[str, Any]:
    identical = _flag("idle", body, "lastTwoOutputsIdentical")
    asked = _flag("idle", body, "modelAskedQuestion")
    return sim.machine.idle(
        sim.rt,
        now_ms=sim.tick(
            "idle", body, wall_clock_when_absent=True
        ),  # the outside contract: wall clock when absent
        last_two_outputs_identical=identical,
        model_asked_question=asked,
    )


def _set(sim: _Simulation, body: Mapping[str, Any]) -> None:
    if not isinstance(body.get("key"), str):
        raise SimulationError("set.key: is required")
    if "value" not in body:  # null is a value; nothing is a mistake (it wrote null unseen)
        raise SimulationError("set.value: is required")
    sim.machine.set_kv(sim.rt, body["key"], body.get("value"))


STEPS: dict[str, Callable[[_Simulation, Mapping[str, Any]], Any]] = {
    "signal": _signal,
    "tool": _tool,
    "artifact": _artifact,
    "turn": _turn,
    "idle": _idle,
    "set": _set,
}


def _apply(sim: _Simulation, step: Any) -> Any:
    if not isinstance(step, Mapping) or len(step) != 1:
        raise SimulationError(
            "a step is an object with exactly one of activate, deactivate, signal, tool, artifact, turn, idle, set"
        )
    ((kind, body),) = step.items()
    if kind in ("activate", "deactivate"):
        _activation(sim.machine, sim.rt, kind, body)
        return None
    handler = STEPS.get(kind)
    if handler is None:
        raise SimulationError(f"unknown step {kind!r}")
    if not isinstance(body, Mapping):
        raise SimulationError(f"{kind}: must be an object")
    return handler(sim, body)


def _refuse_constant(literal: str) -> Any:
    raise SimulationError(f"{literal} is not JSON: numbers must be finite (no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise SimulationError(f"{text[:40]} is not JSON: numbers must be finite (no NaN or Infinity)")
    return value


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def loads_step(line: str) -> Any:
    """One script line as JSON: ValueError when it is not JSON, NaN, Infinity and ``1e999`` included (the output
    line could not hold them); RecursionError when it nests deeper than the decoder reads."""
    return _STRICT.decode(line)


BLANK_LINE = "a blank line is no step: each line is one JSON object"


def run_script(
    machine: FunctionMachine, lines: Iterable[str], *, parse: Callable[[str], Any] = loads_step
) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Yield (output line, error) for each script line, a blank one too (its error: line i is output i, as the
    outside contract says; skipping it shifted every later step's number); ``parse`` reads a line (ValueError or
    RecursionError: that line's error)."""
    sim = _Simulation(machine)
    for index, line in enumerate(lines):
        number = index + 1
        error = None
        try:
            if not line.strip():
                raise SimulationError(BLANK_LINE)
            result = _apply(sim, parse(line))
        except ValueError as exc:  # JSON errors and SimulationError
            error = f"line {number}: {exc}"
            result = {"error": str(exc)}
        except RecursionError:  # nested deeper than the decoder reads: this line only
            error = f"line {number}: nested too deep to read"
            result = {"error": "nested too deep to read"}
        yield (
            {
                "step": index,
                "result": result,
                "functions": sim.rt.functions_view(),
                "artifacts": dict(sim.rt.artifacts),
            },
            error,
        )
