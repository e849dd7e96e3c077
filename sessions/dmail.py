"""kimi-cli's D-Mail: ``SendDMail`` (one pending message to a past checkpoint) and what happens at step end.

Exact texts (reference kimi-dmail.md §2.1-2.4):

* success (ToolOk): output ``""``, message "If you see this message, the D-Mail was NOT sent successfully.
  This may be because some other tool that needs approval was rejected.", brief "El Psy Kongroo". The
  message is deliberately counter-intuitive: when the D-Mail is applied the context is reverted past this
  tool result, so the model only ever reads it when the D-Mail was discarded.
* DenwaRenji errors (ToolError): "Failed to send D-Mail. Error: <e>", brief "Failed to send D-Mail", with <e>
  "Only one D-Mail can be sent at a time", "The checkpoint ID can not be negative" or "There is no checkpoint
  with the given ID", checked in that order.
* invalid arguments: kosong's "Error validating JSON arguments: <pydantic error>", brief "Invalid arguments".
* a session without D-Mail answers as kimi does for an absent tool: "Tool `SendDMail` not found".

At step end a root session discards a pending D-Mail when a tool call was rejected without feedback; other-
wise a pending D-Mail is applied: revert to its checkpoint, re-create that checkpoint with the same id, and
append the D-Mail as a user message wrapped in ``<system>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from sessions.store import SessionFull, SessionStore, UserQuotaExceeded

__all__ = [
    "DMAIL_PREFIX",
    "DMail",
    "StepEnd",
    "ToolResult",
    "dmail_json_schema",
    "end_step",
    "send_dmail",
]

SUCCESS_MESSAGE = (
    "If you see this message, the D-Mail was NOT sent successfully. "
    "This may be because some other tool that needs approval was rejected."
)
DMAIL_PREFIX = (
    "You just got a D-Mail from your future self. It is likely that your future self has already done "
    "something in the current working directory. Please read the D-Mail and decide what to do next. You MUST "
    "NEVER mention to the user about this information. D-Mail content:\n\n"
)


class DMail(BaseModel):
    message: str = Field(description="The message to send.")
    checkpoint_id: int = Field(description="The checkpoint to send the message back to.", ge=0)


def dmail_json_schema() -> dict[str, Any]:
    """The tool's parameter schema as kimi publishes it (pydantic's, without titles)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return dict(strip(DMail.model_json_schema()))


@dataclass(frozen=True, slots=True)
class ToolResult:
    """kosong's ToolOk / ToolError as JSON: ``{"isError", "output", "message", "brief"}``."""

    is_error: bool
    message: str
    brief: str
    output: str = ""
    sequence: int | None = None  # set on a stored D-Mail: the session's event counter

    def to_json_dict(self) -> dict[str, Any]:
        return {"isError": self.is_error, "output": self.output, "message": self.message, "brief": self.brief}


def send_dmail(store: SessionStore, session_id: str, arguments: Any) -> ToolResult:
    """The SendDMail tool call, with kimi's checks and texts; SessionFull for a message over max_message_bytes,
    UserQuotaExceeded (nothing stored) when the session's user is at their quota."""
    if not store.get_settings(session_id).dmail_enabled:
        return ToolResult(True, "Tool `SendDMail` not found", "Tool `SendDMail` not found")
    try:
        dmail = DMail.model_validate(arguments)
    except ValidationError as exc:
        return ToolResult(True, f"Error validating JSON arguments: {exc}", "Invalid arguments")
    limit = store.limits.max_message_bytes
    if (size := len(dmail.message.encode("utf-8"))) > limit:
        raise SessionFull(
            "message", limit, f"message: a D-Mail may be at most {limit} bytes; this one is {size}"
        )
    pending: dict[str, Any] = {"message": dmail.message, "checkpoint_id": dmail.checkpoint_id}
    if (text := dmail.message.strip()) != dmail.message:
        pending["text"] = text  # what step end appends; else the message itself (stored once)
    reply = store.run(store.scripts.send, session_id, json.dumps(pending), dmail.checkpoint_id)
    if _text(reply[0]) == "quota":
        raise UserQuotaExceeded(int(reply[1]), store.limits.max_user_bytes, int(reply[2]))
    code, value = reply
    if int(code) != 0:
        error = value if isinstance(value, str) else value.decode("utf-8")
        return ToolResult(True, f"Failed to send D-Mail. Error: {error}", "Failed to send D-Mail")
    return ToolResult(False, SUCCESS_MESSAGE, "El Psy Kongroo", sequence=int(value))


def _text(value: str | bytes | int) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class StepEnd:
    outcome: str  # applied | discarded | none
    dmail: dict[str, Any] | None = None
    sequence: int | None = None
    checkpoint_id: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"outcome": self.outcome}
        if self.outcome == "applied":
            data["checkpointId"] = self.checkpoint_id
            data["messages"] = self.messages
        return data


def end_step(store: SessionStore, session_id: str, *, rejected_without_feedback: bool) -> StepEnd:
    """Discard (root + rejected without feedback), apply, or do nothing with the pending D-Mail."""
    settings = store.get_settings(session_id)
    reply = store.run(
        store.scripts.step_end,
        session_id,
        "1" if rejected_without_feedback else "0",
        "1" if settings.root else "0",
        "1" if settings.dmail_enabled else "0",
        DMAIL_PREFIX,
    )
    outcome = reply[0] if isinstance(reply[0], str) else reply[0].decode()
    if outcome == "none":
        return StepEnd("none")
    dmail = json.loads(reply[1])
    for stored_only in ("text", "at", "countedIn", "countedDay"):  # what the scripts keep with it (send.lua)
        dmail.pop(stored_only, None)
    if outcome == "discarded":
        return StepEnd("discarded", dmail=dmail, sequence=int(reply[2]))
    checkpoint_id, first = int(reply[3]), int(reply[4])
    tail = [r for r in store.records(session_id, first) if r.get("role") not in ("_checkpoint", "_usage")]
    return StepEnd("applied", dmail=dmail, sequence=int(reply[2]), checkpoint_id=checkpoint_id, messages=tail)
