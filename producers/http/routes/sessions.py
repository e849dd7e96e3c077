"""Agent sessions over HTTP: settings, the context store, and D-Mail (kimi-cli semantics; see sessions/)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from producers.http.access.principal import principal_of
from producers.http.api_models import API_ERRORS, ContextView, SessionSettings, body_route, example
from producers.http.records import RECORDED, with_record_error
from producers.http.routes.functions import activate_locked, function_definitions, unknown_function
from producers.http.routes.session_access import (
    SessionId,
    bad_session,
    record_event,
    session_access,
    session_body,
    session_full,
    session_store,
)
from producers.http.web_common import (
    InvalidBody,
    NotStrictBody,
    decode_json,
    error_response,
    field_response,
)
from sessions.dmail import DMail, ToolResult, end_step, message_fields, send_dmail
from sessions.store import SessionFull, SessionStore, UnknownCheckpoint, session_scope
from worker.core.ids import NameId, UserId

__all__ = ["bad_session", "record_event", "router", "session_body", "session_full"]

router = APIRouter(dependencies=[Depends(session_access)], responses=API_ERRORS, tags=["sessions"])


MAX_SESSION_FUNCTIONS = 256  # names in a session's settings (each a known definition, each once)


class SettingsBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    dmailEnabled: bool | None = None
    root: bool | None = None
    functions: list[str] | None = Field(default=None, max_length=MAX_SESSION_FUNCTIONS)
    userId: UserId | None = None
    agentId: NameId | None = None
    topicId: NameId | None = None

    @field_validator("functions")
    @classmethod
    def _each_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            twice = next(name for i, name in enumerate(value) if name in value[:i])
            raise ValueError(f"each function at most once ({twice!r} is there twice)")
        return value


MessageRole = Literal["system", "user", "assistant", "tool"]
"""kimi's (kosong's) roles; the context's own records (``_checkpoint``, ``_usage``) are not messages."""

CONTENT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"type": {"type": "string", "minLength": 1}},
                "required": ["type"],
                "additionalProperties": True,  # a part's own fields (``text``, ``image_url``…), typed clients too
            },
        },
        {"type": "null"},
    ],
    "description": "A string, a list of content parts (objects with a ``type``: ``text``, ``image_url``, …), "
    "or null (no content: an assistant message that only calls tools).",
}


def _check_content(value: Any) -> Any:
    """kimi's message content: a string, a list of content parts (objects naming their ``type``), or null
    (kosong reads null as no content); else pydantic's ``invalid_content`` (a 422 naming the field)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise PydanticCustomError(
            "invalid_content", "must be a string, a list of content parts (objects with a type), or null"
        )
    for index, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str) or not part["type"]:
            raise PydanticCustomError(
                "invalid_content",
                "part {index} is not a content part (an object with a non-empty string type)",
                {"index": index},
            )
    return value


class Message(BaseModel):
    """A context message in kimi's shape: ``{"role", "content", "tool_calls"?, "tool_call_id"?}`` (other
    fields, such as ``name``, are kept as sent)."""

    model_config = ConfigDict(extra="allow")
    role: MessageRole
    content: Annotated[Any, AfterValidator(_check_content), WithJsonSchema(CONTENT_SCHEMA)]
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


MAX_TOKEN_COUNT = 10**14 - 1


class MessagesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[Message]
    # the _usage record's count is written by Lua's cjson with 14 significant digits, and a revert reads it
    # back: a larger count came back as 1e+17 and broke the session's context for good
    tokenCount: int | None = Field(default=None, ge=0, le=MAX_TOKEN_COUNT, strict=True)


class RevertBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checkpointId: int = Field(strict=True)


class StepEndBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rejectedWithoutFeedback: bool = Field(default=False, strict=True)


class CompactBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[Message] = Field(default_factory=list)


class EmptyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContextLength(BaseModel):
    length: int = Field(description="Messages in the context after the append.")


class CheckpointCreated(BaseModel):
    checkpointId: int


class DMailResult(BaseModel):
    """kimi's ToolOk / ToolError: a refused D-Mail is ``isError`` (still 200)."""

    isError: bool
    output: str
    message: str
    brief: str


class StepEndResult(BaseModel):
    outcome: Literal["applied", "discarded", "none"]
    checkpointId: int | None = Field(default=None, description="When applied: the checkpoint reverted to.")
    messages: list[dict[str, Any]] | None = Field(
        default=None,
        description="When applied: the messages the step end appended, read in the same atomic step: the "
        "re-created checkpoint's CHECKPOINT message (when the session has D-Mail on) and the D-Mail's user "
        "message. What the context kept before them is unchanged: GET /v1/sessions/{id}/context reads it all.",
    )


async def dmail_arguments(session_id: SessionId, request: Request) -> Any:
    """A FastAPI dependency: the SendDMail arguments (any JSON value), or the response to answer instead:
    422 for a bad session id, kimi's ToolError ("Error parsing JSON arguments") for a body that is not JSON, and
    the door's 422 for one that is not strict JSON (NaN, Infinity, a lone surrogate: nothing may store those)."""
    if (bad := bad_session(session_id)) is not None:
        return bad
    try:
        return decode_json(await request.body(), require_object=False)
    except NotStrictBody as exc:
        return field_response(exc.error)
    except InvalidBody as exc:
        failed = ToolResult(True, f"Error parsing JSON arguments: {exc.detail}", "Invalid arguments")
        return JSONResponse(failed.to_json_dict())


def _settings_precheck(request: Request, session_id: str, body: SettingsBody) -> JSONResponse | None:
    """What put_session refuses of a valid body, checked before a user token's claim: a user other than the
    token's, a function nobody defined."""
    caller = principal_of(request)
    if caller.user_id is not None and body.userId not in (None, caller.user_id):
        return error_response(422, "forbidden_user", "userId must be this token's user or absent", "userId")
    defined = function_definitions(request)
    unknown = [name for name in body.functions or () if name not in defined]
    if unknown:
        return unknown_function(unknown[0], defined, "functions")
    return None


SettingsIn = Annotated[SettingsBody | JSONResponse, Depends(session_body(SettingsBody, _settings_precheck))]
MessagesIn = Annotated[MessagesBody | JSONResponse, Depends(session_body(MessagesBody))]
EmptyIn = Annotated[EmptyBody | JSONResponse, Depends(session_body(EmptyBody))]
RevertIn = Annotated[RevertBody | JSONResponse, Depends(session_body(RevertBody))]
CompactIn = Annotated[CompactBody | JSONResponse, Depends(session_body(CompactBody))]
StepEndIn = Annotated[StepEndBody | JSONResponse, Depends(session_body(StepEndBody))]


@router.put(
    "/v1/sessions/{session_id}",
    response_model=SessionSettings,
    **body_route(
        SettingsBody,
        examples={
            "dmail": example(
                "D-Mail on, the approval function gated",
                {"dmailEnabled": True, "userId": "u1", "functions": ["approval"]},
            )
        },
    ),
)
def put_session(session_id: str, request: Request, body: SettingsIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    changes = body.model_dump(exclude_none=True)
    caller = principal_of(request)
    if caller.user_id is not None:  # its own user (_settings_precheck refused another)
        changes["userId"] = caller.user_id
    store = session_store(request)
    settings = store.settings_change(session_id, changes)
    if body.functions is None:
        settings.commit()
    else:  # the functions' state and the settings in one transaction: a refusal changes neither
        try:
            if (problem := activate_locked(request, session_id, body.functions, settings)) is not None:
                return problem
        except SessionFull as exc:
            return session_full(exc, "functions")
    return JSONResponse(store.get_settings(session_id).to_json_dict())


@router.get("/v1/sessions/{session_id}", response_model=SessionSettings)
def get_session(session_id: str, request: Request) -> JSONResponse:
    if (bad := bad_session(session_id)) is not None:
        return bad
    return JSONResponse(session_store(request).get_settings(session_id).to_json_dict())


@router.post(
    "/v1/sessions/{session_id}/context/messages",
    response_model=ContextLength,
    **body_route(
        MessagesBody,
        examples={
            "turn": example(
                "A user message and the reply",
                {
                    "messages": [
                        {"role": "user", "content": "Draft the release notes."},
                        {"role": "assistant", "content": "Here is a first draft."},
                    ],
                    "tokenCount": 42,
                },
            )
        },
    ),
)
def post_messages(session_id: str, request: Request, body: MessagesIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    messages = [m.model_dump(exclude_unset=True) for m in body.messages]
    try:
        return JSONResponse({"length": session_store(request).append(session_id, messages, body.tokenCount)})
    except SessionFull as exc:
        return session_full(exc)


@router.post(
    "/v1/sessions/{session_id}/context/checkpoint",
    response_model=CheckpointCreated,
    **body_route(EmptyBody, examples={"empty": example("No fields", {})}),
)
def post_checkpoint(session_id: str, request: Request, body: EmptyIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    store = session_store(request)
    enabled = store.get_settings(session_id).dmail_enabled
    try:
        return JSONResponse({"checkpointId": store.checkpoint(session_id, add_user_message=enabled)})
    except SessionFull as exc:
        return session_full(exc)


@router.post(
    "/v1/sessions/{session_id}/context/revert",
    response_model=ContextView,
    **body_route(
        RevertBody, examples={"first": example("Back to the first checkpoint", {"checkpointId": 0})}
    ),
)
def post_revert(session_id: str, request: Request, body: RevertIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    try:
        view = session_store(request).revert_to(session_id, body.checkpointId)
    except UnknownCheckpoint as exc:
        return error_response(422, "unknown_checkpoint", str(exc), "checkpointId")
    return JSONResponse(view.to_json_dict())


@router.post("/v1/sessions/{session_id}/context/clear", response_model=ContextView)
def post_clear(session_id: str, request: Request) -> JSONResponse:
    """kimi's Context.clear: everything goes, checkpoint ids restart at 0."""
    if (bad := bad_session(session_id)) is not None:
        return bad
    session_store(request).clear(session_id)
    return JSONResponse(session_store(request).read(session_id).to_json_dict())


@router.post(
    "/v1/sessions/{session_id}/context/compact",
    response_model=ContextView,
    **body_route(
        CompactBody,
        examples={
            "summary": example(
                "Replace the context with a summary",
                {"messages": [{"role": "user", "content": "Summary so far: release notes drafted."}]},
            )
        },
    ),
)
def post_compact(session_id: str, request: Request, body: CompactIn) -> JSONResponse:
    """Compaction: clear, checkpoint 0 (with its CHECKPOINT message when D-Mail is on), the compacted messages."""
    if isinstance(body, JSONResponse):
        return body
    store = session_store(request)
    enabled = store.get_settings(session_id).dmail_enabled
    try:
        store.compact(
            session_id, [m.model_dump(exclude_unset=True) for m in body.messages], add_user_message=enabled
        )
    except SessionFull as exc:
        return session_full(exc)
    return JSONResponse(store.read(session_id).to_json_dict())


@router.get("/v1/sessions/{session_id}/context", response_model=ContextView)
def get_context(session_id: str, request: Request) -> JSONResponse:
    if (bad := bad_session(session_id)) is not None:
        return bad
    return JSONResponse(session_store(request).read(session_id).to_json_dict())


@router.post(
    "/v1/sessions/{session_id}/dmail",
    response_model=DMailResult,
    **body_route(
        DMail,
        "The SendDMail tool's arguments (any JSON: what is not valid is a ToolError).",
        responses=RECORDED,
        examples={
            "back": example(
                "A message to the first checkpoint",
                {"message": "The tests need the staging database; try again with it.", "checkpoint_id": 0},
            )
        },
    ),
)
def post_dmail(
    session_id: str, request: Request, arguments: Annotated[Any, Depends(dmail_arguments)]
) -> JSONResponse:
    """The SendDMail tool: ``{"message", "checkpoint_id"}`` → kimi's ToolOk / ToolError."""
    if isinstance(arguments, JSONResponse):
        return arguments
    try:
        outcome = send_dmail(session_store(request), session_id, arguments)
    except SessionFull as exc:
        return session_full(exc)
    failure = None
    if outcome.dmail is not None and outcome.sequence is not None:
        sent = outcome.dmail
        failure = record_event(
            request,
            session_id,
            "agent.dmail.sent",
            f"dmail:{session_id}:{outcome.sequence}",
            {**message_fields(sent.message), "checkpointId": sent.checkpoint_id},
        )
    return with_record_error(JSONResponse(outcome.to_json_dict()), failure)


def _anchor(store: SessionStore, session_id: str) -> str | None:
    """The message that sent the D-Mail: the latest assistant message calling SendDMail (its id, else the call's)."""
    for record in reversed(store.records(session_id, -200)):
        if record.get("role") != "assistant":
            continue
        for call in record.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            name = (function or {}).get("name") if isinstance(function, dict) else call.get("name")
            if name == "SendDMail":
                anchor = record.get("id") or call.get("id")
                return str(anchor) if anchor else None
    return None


@router.post(
    "/v1/sessions/{session_id}/steps/end",
    response_model=StepEndResult,
    **body_route(
        StepEndBody,
        responses=RECORDED,
        examples={"end": example("The step ended normally", {"rejectedWithoutFeedback": False})},
    ),
)
def post_step_end(session_id: str, request: Request, body: StepEndIn) -> JSONResponse:
    if isinstance(body, JSONResponse):
        return body
    store = session_store(request)
    anchor = (
        _anchor(store, session_id)
        if store.client.exists(store.keys.dmail(session_scope(session_id)))
        else None
    )
    result = end_step(store, session_id, rejected_without_feedback=body.rejectedWithoutFeedback)
    failure = None
    if result.outcome != "none" and result.dmail is not None:
        kind: Literal["agent.context.reverted", "agent.dmail.discarded"] = (
            "agent.context.reverted" if result.outcome == "applied" else "agent.dmail.discarded"
        )
        payload: dict[str, Any] = {
            **message_fields(result.dmail["message"]),
            "checkpointId": result.dmail["checkpoint_id"],
        }
        if result.reason is not None:
            payload["reason"] = result.reason
        if anchor:
            payload["anchorMessageId"] = anchor
        prefix = "revert" if result.outcome == "applied" else "discard"
        failure = record_event(request, session_id, kind, f"{prefix}:{session_id}:{result.sequence}", payload)
    return with_record_error(JSONResponse(result.to_json_dict()), failure)
