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

Bounds (docs/decisions.md "D-Mail: measured as the message it becomes"): a send is refused (SessionFull naming
``message``: 413) when the message, or the user message step end appends (:func:`applied_record_bytes`), is over
``max_message_bytes``, or when, applied, it would take the context past its caps as the revert to its checkpoint
leaves it; step end discards one that no longer fits (the caps were lowered since). The events recorded for a
D-Mail carry :func:`message_fields`, a bounded excerpt, never the whole message.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from sessions.store import RECORD_ROLES, SessionFull, SessionStore

__all__ = [
    "DMAIL_PREFIX",
    "DMail",
    "StepEnd",
    "ToolResult",
    "applied_record_bytes",
    "dmail_json_schema",
    "end_step",
    "message_fields",
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
EXCERPT_CHARS = 280  # the receipt's detail (policies/dmail.py): the events carry no more of the message
DISCARD_REASONS = {  # step_end.lua's word -> the agent.dmail.discarded event's reason
    "rejected": "rejected_without_feedback",
    "checkpoint": "checkpoint_gone",
    "full": "session_full",
}
# Lua's cjson escapes these bytes of a string: control characters as \u00XX (6 bytes; \b \t \n \f \r as 2),
# '"', '\\' and '/' as 2, DEL as \u007f; every other byte (UTF-8 included) is written as it is
_CJSON_EXTRA_BYTES = {
    **dict.fromkeys(range(0x20), 5),
    **dict.fromkeys(b"\b\t\n\f\r", 1),
    **dict.fromkeys(b'"\\/', 1),
    0x7F: 5,
}
_RECORD_WRAPPER_BYTES = len('{"role":"user","content":}')


class DMail(BaseModel):
    message: str = Field(description="The message to send.")
    checkpoint_id: int = Field(description="The checkpoint to send the message back to.", ge=0)


def applied_record_bytes(text: str) -> int:
    """The size of the context record step end appends for a D-Mail whose (stripped) text is ``text``:
    ``{"role":"user","content":"<system>PREFIX text</system>"}`` as step_end.lua's cjson encodes it."""
    raw = f"<system>{DMAIL_PREFIX}{text}</system>".encode()
    escapes = sum(extra * raw.count(byte) for byte, extra in _CJSON_EXTRA_BYTES.items())
    return _RECORD_WRAPPER_BYTES + 2 + len(raw) + escapes


def message_fields(message: str) -> dict[str, Any]:
    """What a D-Mail's events record of its message, bounded whatever its size: ``message``, the stripped text
    as the receipt shows it (at most 280 characters, the last three "..." when cut), and the whole message's
    ``messageBytes`` (UTF-8) and ``messageSha256`` (hex, of those bytes)."""
    raw = message.encode("utf-8")
    text = message.strip()
    excerpt = text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."
    return {"message": excerpt, "messageBytes": len(raw), "messageSha256": hashlib.sha256(raw).hexdigest()}


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
    dmail: DMail | None = None  # set on a stored D-Mail: the arguments as validated (checkpoint_id an int)

    def to_json_dict(self) -> dict[str, Any]:
        return {"isError": self.is_error, "output": self.output, "message": self.message, "brief": self.brief}


def send_dmail(store: SessionStore, session_id: str, arguments: Any) -> ToolResult:
    """The SendDMail tool call, with kimi's checks and texts; SessionFull naming ``message`` for a D-Mail over
    the caps (module docstring), UserQuotaExceeded (nothing stored) when the session's user is at their quota.
    A stored D-Mail's result carries its sequence and the validated arguments."""
    if not store.get_settings(session_id).dmail_enabled:
        return ToolResult(True, "Tool `SendDMail` not found", "Tool `SendDMail` not found")
    try:
        dmail = DMail.model_validate(arguments)
    except ValidationError as exc:
        return ToolResult(True, f"Error validating JSON arguments: {exc}", "Invalid arguments")
    text = dmail.message.strip()
    record_bytes = _check_size(store, dmail.message, text)
    pending: dict[str, Any] = {"message": dmail.message, "checkpoint_id": dmail.checkpoint_id}
    if text != dmail.message:
        pending["text"] = text  # what step end appends; else the message itself (stored once)
    reply = store.run(store.scripts.send, session_id, json.dumps(pending), dmail.checkpoint_id, record_bytes)
    code = _text(reply[0])  # a quota reply is raised by store.run, with the session's user
    if code == "full":
        raise _no_room(store, _text(reply[1]), dmail.checkpoint_id)
    if int(code) != 0:
        error = _text(reply[1])
        return ToolResult(True, f"Failed to send D-Mail. Error: {error}", "Failed to send D-Mail")
    return ToolResult(False, SUCCESS_MESSAGE, "El Psy Kongroo", sequence=int(reply[1]), dmail=dmail)


def _check_size(store: SessionStore, message: str, text: str) -> int:
    """The size of the record step end would append; SessionFull when it, or the message as stored, is over
    ``max_message_bytes`` (JSON escaping makes a control character 6 bytes, a quote 2)."""
    limit = store.limits.max_message_bytes
    if (size := len(message.encode("utf-8"))) > limit:
        raise SessionFull(
            "message", limit, f"message: a D-Mail may be at most {limit} bytes; this one is {size}"
        )
    if (record_bytes := applied_record_bytes(text)) > limit:
        raise SessionFull(
            "message",
            limit,
            f"message: the context message a D-Mail becomes (its text in the D-Mail prefix and <system> tags, "
            f"JSON-encoded) may be at most {limit} bytes; this one would be {record_bytes}",
        )
    return record_bytes


def _no_room(store: SessionStore, what: str, checkpoint_id: int) -> SessionFull:
    """send.lua's ``{'full', 'records'|'bytes'}``: applied, the D-Mail would take the context past a cap."""
    if what == "records":
        limit, unit = store.limits.max_session_messages, "records"
    else:
        limit, unit = store.limits.max_session_bytes, "bytes"
    return SessionFull(
        "message",
        limit,
        f"message: applied, this D-Mail would take the session's context past {limit} {unit} (the context as "
        f"the revert to checkpoint {checkpoint_id} leaves it, the checkpoint made again, and the D-Mail's message)",
    )


def _text(value: str | bytes | int) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class StepEnd:
    outcome: str  # applied | discarded | none
    dmail: dict[str, Any] | None = None
    sequence: int | None = None
    checkpoint_id: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)  # applied: the messages it appended
    reason: str | None = None  # discarded: a DISCARD_REASONS value

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
    for stored_only in (
        "text",
        "at",
        "countedIn",
        "tenantIn",
        "countedDay",
    ):  # what the scripts keep with it (send.lua)
        dmail.pop(stored_only, None)
    if outcome == "discarded":
        reason = DISCARD_REASONS[_text(reply[3])]
        return StepEnd("discarded", dmail=dmail, sequence=int(reply[2]), reason=reason)
    # the messages the script appended, as it read them (the re-created checkpoint's CHECKPOINT message, when
    # D-Mail is on, and the D-Mail's): an append right after it is not among them
    appended = [json.loads(record) for record in reply[5]]
    messages = [m for m in appended if m.get("role") not in RECORD_ROLES]
    return StepEnd(
        "applied", dmail=dmail, sequence=int(reply[2]), checkpoint_id=int(reply[3]), messages=messages
    )
