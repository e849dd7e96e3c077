"""The rolebox side of agent sessions over HTTP: the ``signal`` tool, activation, turns, idles, tool
observation, artifacts, state and the needs-attention list. State changes are compare-and-set on the
session's function runtime (sessions/function_store.py); each signal is also an ``agent.signal.emitted``
source event on the session's scope."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from policies.dmail import AgentToolsSettings
from producers.http.api_models import API_ERRORS, ErrorBody, body_route, example
from producers.http.records import RECORDED, with_record_error
from producers.http.routes.session_access import (
    bad_session,
    function_store,
    record_event,
    session_access,
    session_body,
    session_full,
)
from producers.http.web_common import error_response, producer_of
from sessions.fsm import FunctionMachine, SessionRuntime
from sessions.functions import FunctionDef, load_function_dir
from sessions.signals import ALL_SIGNAL_TYPES, get_hitl_signal, get_terminating, guard_message
from sessions.store import SessionFull, SettingsChange
from worker.core.clock import now_ms as clock_now_ms
from worker.core.ids import Id, id_problem
from worker.documents.projection import MAX_ISO_MS

__all__ = ["activate_locked", "function_definitions", "machine_for", "router"]

router = APIRouter(dependencies=[Depends(session_access)], responses=API_ERRORS, tags=["sessions"])


class SignalBody(BaseModel):
    # The tool's arguments: ``payload`` is an object or absent (``z.record(...).optional()``); ``null`` is a 422
    # naming it, as an array is (it was recorded as no payload). Its schema says so: an object, not required.
    model_config = ConfigDict(extra="forbid")
    type: str = Field(strict=True, json_schema_extra={"enum": list[JsonValue](sorted(ALL_SIGNAL_TYPES))})
    payload: dict[str, Any] = Field(default_factory=dict)

    def given_payload(self) -> dict[str, Any] | None:
        """The payload, or None when the body had none (``{}`` is a payload)."""
        return self.payload if "payload" in self.model_fields_set else None


class NameBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, strict=True)


class TurnBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    userMessaged: bool = Field(default=False, strict=True)


class IdleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nowMs: int | None = Field(default=None, strict=True, ge=0, le=MAX_ISO_MS)  # as an event's timestamp
    lastTwoOutputsIdentical: bool = Field(default=False, strict=True)
    modelAskedQuestion: bool = Field(default=False, strict=True)


MAX_TOOL_NAME = 256  # a tool's name is kept in the function state (toolsObserved)


class ToolBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=MAX_TOOL_NAME, strict=True)
    args: Any = None
    output: Any = None


class ArtifactBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(strict=True)


class SignalOutput(BaseModel):
    output: str = Field(description="The signal tool's text.")


class FunctionView(BaseModel):
    phase: str
    active: bool
    ledger: dict[str, Any]
    evidence: dict[str, Any]
    continuationCount: int
    currentTurn: int


class SignalRef(BaseModel):
    type: str
    payload: Any = None


class AttentionItem(BaseModel):
    """A pausing signal (need_approval, blocked, need_clarification) whose function is still gated."""

    model_config = ConfigDict(extra="allow")
    function: str
    type: str
    payload: Any = None
    since: int = Field(description="Unix milliseconds.")


class FunctionsState(BaseModel):
    """The session's function runtime: active functions, every function with state, artifacts, attention."""

    active: list[str]
    functions: dict[str, FunctionView]
    artifacts: dict[str, str]
    attention: list[AttentionItem]
    sessionLedger: dict[str, Any]
    terminating: SignalRef | None
    hitl: SignalRef | None


class IdleDecision(BaseModel):
    continued: bool = Field(description="Whether a continuation is sent (at most one).")
    function: str | None
    reason: str | None = Field(description="Why not, when not continued.")
    reminder: str | None = Field(description="The continuation's text, when continued.")
    completed: list[str]


class Injects(BaseModel):
    injects: list[str]


class AttentionList(BaseModel):
    items: list[AttentionItem]


class Artifact(BaseModel):
    name: str
    content: str


SignalIn = Annotated[SignalBody | JSONResponse, Depends(session_body(SignalBody))]
NameIn = Annotated[NameBody | JSONResponse, Depends(session_body(NameBody))]
TurnIn = Annotated[TurnBody | JSONResponse, Depends(session_body(TurnBody))]
IdleIn = Annotated[IdleBody | JSONResponse, Depends(session_body(IdleBody))]
ToolIn = Annotated[ToolBody | JSONResponse, Depends(session_body(ToolBody))]


def _artifact_precheck(request: Request, session_id: str, body: ArtifactBody) -> JSONResponse | None:
    """The artifact's name (a path parameter FastAPI checks after the body's dependency) and its size cap."""
    name = request.path_params.get("name", "")
    if (problem := id_problem(name)) is not None:
        return error_response(422, "invalid_field", f"name: {problem.message}", "name")
    limit: int = request.app.state.session_limits.max_message_bytes
    if (size := len(body.content.encode("utf-8"))) > limit:
        message = f"content: an artifact may be at most {limit} bytes; this one is {size}"
        return session_full(SessionFull("content", limit, message))
    return None


ArtifactIn = Annotated[ArtifactBody | JSONResponse, Depends(session_body(ArtifactBody, _artifact_precheck))]


def _agent_tools(request: Request) -> AgentToolsSettings:
    return producer_of(request).runtime.settings_for(AgentToolsSettings)


def function_definitions(request: Request) -> dict[str, FunctionDef]:
    """The function definitions of ``AGENT_SIGNAL_FUNCTIONS_DIR``, read once per app."""
    defs: dict[str, FunctionDef] | None = getattr(request.app.state, "function_defs", None)
    if defs is None:
        directory = _agent_tools(request).functions_dir
        defs = load_function_dir(directory)[0] if directory else {}
        request.app.state.function_defs = defs
    return defs


def machine_for(request: Request, session_id: str) -> FunctionMachine:
    workspace = _agent_tools(request).functions_workspace_dir
    return FunctionMachine(
        function_definitions(request),
        session_id=session_id,
        workspace_dir=Path(workspace) if workspace else None,
    )


def _state(runtime: SessionRuntime) -> dict[str, Any]:
    return {
        "active": runtime.active,
        "functions": runtime.functions_view(),
        "artifacts": runtime.artifacts,
        "attention": _attention(runtime),
        "sessionLedger": runtime.session_ledger,
        "terminating": get_terminating(runtime.session_ledger),
        "hitl": get_hitl_signal(runtime.session_ledger),
    }


def _attention(runtime: SessionRuntime) -> list[dict[str, Any]]:
    return [{"function": name, **item} for name, item in runtime.attention.items()]


class FunctionLocked(Exception):
    """A deactivate of a function the session's settings lock (raised in the transaction: nothing written)."""


def unknown_function(name: str, defined: Collection[str], field: str) -> JSONResponse:
    """422 ``unknown_function`` naming ``field``, saying where definitions come from (and that none are loaded)."""
    where = (
        "no definitions are loaded: set AGENT_SIGNAL_FUNCTIONS_DIR (e.g. examples/functions)"
        if not defined
        else f"the definitions are those of AGENT_SIGNAL_FUNCTIONS_DIR ({len(defined)} loaded)"
    )
    return error_response(422, "unknown_function", f"unknown function {name!r}: {where}", field)


def activate_locked(
    request: Request, session_id: str, names: list[str], settings: SettingsChange
) -> JSONResponse | None:
    """Session settings' ``functions``: activate them, locked (transitions cannot deactivate them); a locked
    function the list no longer names is unlocked (it stays active until a transition or a deactivate ends it),
    so the settings answer the locked set as it is. A function already active whose state is current is only
    locked: its state, and the turn it was activated at (``turn_count``), stay; one with no state, or a state of
    another ``state_schema_version`` than its definition's, is activated again (the state made anew, as an activate
    makes it). ``settings`` is written in the same transaction, so a refused PUT (the user's sessions or bytes at
    their quota, contention) changes neither."""
    machine = machine_for(request, session_id)
    unknown = [n for n in names if n not in machine.definitions]
    if unknown:
        return unknown_function(unknown[0], machine.definitions, "functions")

    if not names and not function_store(request).load(session_id).locked:
        settings.commit()  # nothing to lock or unlock: no function state is written
        return None

    def current(rt: SessionRuntime, name: str) -> bool:
        state = rt.states.get(name)
        return state is not None and state.schema_version == machine.definitions[name].state_schema_version

    def change(rt: SessionRuntime) -> None:
        rt.locked[:] = [name for name in rt.locked if name in names]
        for name in names:
            if name not in rt.active or not current(rt, name):
                machine.activate(rt, name, locked=True)
            elif name not in rt.locked:
                rt.locked.append(name)

    function_store(request).update(session_id, change, settings=settings)
    return None


@router.post(
    "/v1/sessions/{session_id}/signal",
    response_model=SignalOutput,
    **body_route(
        SignalBody,
        responses=RECORDED,
        examples={
            "approval": example(
                "Ask for approval of a plan",
                {"type": "need_approval", "payload": {"plan": "ship the release"}},
            )
        },
    ),
)
def post_signal(session_id: str, request: Request, body: SignalIn) -> JSONResponse:
    """rolebox's ``signal`` tool → ``{"output": <the tool's text>}``."""
    if isinstance(body, JSONResponse):
        return body
    if body.type not in ALL_SIGNAL_TYPES:
        return error_response(422, "invalid_field", guard_message(body.type), "type")
    machine = machine_for(request, session_id)
    now = clock_now_ms()

    given = body.given_payload()

    def change(rt: SessionRuntime) -> tuple[str, int, list[str]]:
        output = machine.signal(rt, body.type, given, now_ms=now)
        rt.seq += 1
        return output, rt.seq, list(rt.active)

    try:  # contention → 503
        (output, seq, active), _ = function_store(request).update(session_id, change)
    except SessionFull as exc:
        return session_full(exc, "payload")
    payload: dict[str, Any] = {"type": body.type, "output": output, "functions": active}
    if given is not None:
        payload["payload"] = given
    failure = record_event(request, session_id, "agent.signal.emitted", f"signal:{session_id}:{seq}", payload)
    return with_record_error(JSONResponse({"output": output}), failure)


@router.post(
    "/v1/sessions/{session_id}/functions/activate",
    response_model=FunctionsState,
    **body_route(NameBody, examples={"escalation": example("A function by name", {"name": "escalation"})}),
)
def post_activate(session_id: str, request: Request, body: NameIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    machine = machine_for(request, session_id)
    if body.name not in machine.definitions:
        return unknown_function(body.name, machine.definitions, "name")
    try:
        _, runtime = function_store(request).update(session_id, lambda rt: machine.activate(rt, body.name))
    except SessionFull as exc:
        return session_full(exc, "name")
    return JSONResponse(_state(runtime))


_LOCKED: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "``function_locked``: the session's settings keep it active."}
}


@router.post(
    "/v1/sessions/{session_id}/functions/deactivate",
    response_model=FunctionsState,
    **body_route(
        NameBody,
        responses=_LOCKED,
        examples={"escalation": example("A function by name", {"name": "escalation"})},
    ),
)
def post_deactivate(session_id: str, request: Request, body: NameIn) -> JSONResponse:
    """Ends a function (its state and ledger stay); a name that is neither defined nor active is a 422, as for
    activate (a function active from a definition since removed can still be ended), and one the session's
    settings keep active (``functions``: locked) a 409 ``function_locked``: the settings would say otherwise."""
    if isinstance(body, JSONResponse):
        return body
    machine = machine_for(request, session_id)
    if (
        body.name not in machine.definitions
        and body.name not in function_store(request).load(session_id).active
    ):
        return unknown_function(body.name, machine.definitions, "name")

    def change(rt: SessionRuntime) -> None:
        if body.name in rt.locked:  # read in the transaction: nothing is written
            raise FunctionLocked(body.name)
        machine.deactivate(rt, body.name)

    try:
        _, runtime = function_store(request).update(session_id, change)
    except FunctionLocked:
        message = (
            f"function {body.name!r} is locked by the session's settings: "
            "remove it from functions with PUT first"
        )
        return error_response(409, "function_locked", message, "name")
    return JSONResponse(_state(runtime))


@router.post(
    "/v1/sessions/{session_id}/turn",
    response_model=FunctionsState,
    **body_route(TurnBody, examples={"user": example("The user sent a message", {"userMessaged": True})}),
)
def post_turn(session_id: str, request: Request, body: TurnIn) -> JSONResponse:
    """A model turn: gates and transitions, with ``user_approval`` = ``userMessaged``."""
    if isinstance(body, JSONResponse):
        return body
    machine = machine_for(request, session_id)
    _, runtime = function_store(request).update(
        session_id, lambda rt: machine.turn(rt, user_messaged=body.userMessaged)
    )
    return JSONResponse(_state(runtime))


@router.post(
    "/v1/sessions/{session_id}/idle",
    response_model=IdleDecision,
    **body_route(
        IdleBody,
        examples={"idle": example("The model stopped without a question", {"modelAskedQuestion": False})},
    ),
)
def post_idle(session_id: str, request: Request, body: IdleIn) -> JSONResponse:
    """End of an assistant turn → the continuation decision (at most one continuation)."""
    if isinstance(body, JSONResponse):
        return body
    machine = machine_for(request, session_id)
    now = body.nowMs if body.nowMs is not None else clock_now_ms()
    decision, _ = function_store(request).update(
        session_id,
        lambda rt: machine.idle(
            rt,
            now_ms=now,
            last_two_outputs_identical=body.lastTwoOutputsIdentical,
            model_asked_question=body.modelAskedQuestion,
        ),
    )
    return JSONResponse(decision)


@router.post(
    "/v1/sessions/{session_id}/tool",
    response_model=Injects,
    **body_route(
        ToolBody,
        examples={
            "signal": example(
                "The signal tool was called", {"name": "signal", "args": {"type": "answer"}, "output": "ok"}
            )
        },
    ),
)
def post_tool(session_id: str, request: Request, body: ToolIn) -> JSONResponse:
    """A finished tool call (tool-after): observed tools, evidence, captures → ``{"injects": [...]}``."""
    if isinstance(body, JSONResponse):
        return body
    machine = machine_for(request, session_id)
    try:
        injects, _ = function_store(request).update(
            session_id, lambda rt: machine.tool_after(rt, body.name, body.args, body.output)
        )
    except SessionFull as exc:  # the name is bounded: what grew the state past a cap came with the args
        return session_full(exc, "args")
    return JSONResponse({"injects": injects})


@router.get("/v1/sessions/{session_id}/artifacts", response_model=dict[str, str])
def get_artifacts(session_id: str, request: Request) -> JSONResponse:
    if (bad := bad_session(session_id)) is not None:
        return bad
    return JSONResponse(function_store(request).load(session_id).artifacts)


@router.put(
    "/v1/sessions/{session_id}/artifacts/{name}",
    response_model=Artifact,
    **body_route(
        ArtifactBody, examples={"plan": example("A text artifact", {"content": "ship the release"})}
    ),
)
def put_artifact(session_id: str, name: Id, request: Request, body: ArtifactIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    try:
        function_store(request).put_artifact(session_id, name, body.content)
    except SessionFull as exc:
        return session_full(exc, "content")
    return JSONResponse({"name": name, "content": body.content})


@router.get("/v1/sessions/{session_id}/state", response_model=FunctionsState)
def get_state(session_id: str, request: Request) -> JSONResponse:
    if (bad := bad_session(session_id)) is not None:
        return bad
    return JSONResponse(_state(function_store(request).load(session_id)))


@router.get("/v1/sessions/{session_id}/attention", response_model=AttentionList)
def get_attention(session_id: str, request: Request) -> JSONResponse:
    """Pausing signals (need_approval, blocked, need_clarification) whose function is still gated."""
    if (bad := bad_session(session_id)) is not None:
        return bad
    return JSONResponse({"items": _attention(function_store(request).load(session_id))})
