"""Structural facts of a chat request (vLLM Semantic Router's ``ConversationFacts``, Version C).

One ordered walk over the messages; every message first resets the "last message" flags, so the flags
describe the tail of the conversation. Three protocols:

* ``openai-chat``: ``messages``, ``tools`` + legacy ``functions``, ``tool_choice`` / legacy ``function_call``;
  images are ``image_url`` / ``input_image`` parts of **user** messages.
* ``anthropic-messages``: the ``system`` field counts as one system message; a user message with any
  ``tool_result`` block counts once as a tool result (and ``LastUserAfterToolResult`` is false for it);
  assistant ``tool_use`` blocks are tool calls; images are ``image`` blocks of user messages; ``tool_choice``
  ``any`` / named ``tool`` → required, ``none`` → none.
* ``openai-responses``: ``instructions`` → a system message, ``input`` (a string, or items) translated to chat
  messages (``function_call`` items join the preceding assistant message's tool calls, ``function_call_output`` items
  become tool messages); images counted from the native ``input_image`` parts of user items, including those
  sent by ``file_id``/``file_data`` (the max-merge of PR #3108 reduces to this count).

Pure functions of plain dicts: no I/O, no globals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "PROTOCOLS",
    "Facts",
    "extract_facts",
    "is_workflow_tool_call_id",
    "resolve_tool_choice",
    "scan_request",
]

PROTOCOLS = ("openai-chat", "anthropic-messages", "openai-responses")


class Facts:
    """ConversationFacts; ``to_json_dict`` gives the camelCase shape of the contract."""

    __slots__ = (
        "assistant_message_count",
        "assistant_tool_call_count",
        "has_developer_message",
        "image_content_count",
        "last_assistant_tool_call",
        "last_message_flow_tool_result",
        "last_message_role",
        "last_message_tool_result",
        "last_user_after_tool_result",
        "system_message_count",
        "tool_choice_none",
        "tool_choice_required",
        "tool_definition_count",
        "tool_message_count",
        "tool_result_count",
        "user_message_count",
    )

    def __init__(self) -> None:
        self.has_developer_message = False
        self.user_message_count = 0
        self.assistant_message_count = 0
        self.system_message_count = 0
        self.tool_message_count = 0
        self.tool_definition_count = 0
        self.tool_choice_required = False
        self.tool_choice_none = False
        self.assistant_tool_call_count = 0
        self.tool_result_count = 0
        self.image_content_count = 0
        self.last_message_role = ""
        self.last_message_tool_result = False
        self.last_message_flow_tool_result = False
        self.last_assistant_tool_call = False
        self.last_user_after_tool_result = False

    @property
    def active_tool_loop(self) -> bool:
        """Version C: the tail is still in a tool loop (an old unmatched call no longer counts)."""
        return (
            self.last_message_tool_result
            or self.last_message_role == "tool"
            or self.last_user_after_tool_result
            or self.last_assistant_tool_call
        )

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "hasDeveloperMessage": self.has_developer_message,
            "userMessageCount": self.user_message_count,
            "assistantMessageCount": self.assistant_message_count,
            "systemMessageCount": self.system_message_count,
            "toolMessageCount": self.tool_message_count,
            "toolDefinitionCount": self.tool_definition_count,
            "toolChoiceRequired": self.tool_choice_required,
            "toolChoiceNone": self.tool_choice_none,
            "assistantToolCallCount": self.assistant_tool_call_count,
            "toolResultCount": self.tool_result_count,
            "imageContentCount": self.image_content_count,
            "lastMessageRole": self.last_message_role,
            "lastMessageToolResult": self.last_message_tool_result,
            "lastMessageFlowToolResult": self.last_message_flow_tool_result,
            "lastAssistantToolCall": self.last_assistant_tool_call,
            "lastUserAfterToolResult": self.last_user_after_tool_result,
        }


def is_workflow_tool_call_id(value: Any) -> bool:
    """``flowtool_<state>__<call>`` with a non-empty state id (``flowtool_deadbeef__call_1`` → True)."""
    if not isinstance(value, str) or not value.startswith("flowtool_"):
        return False
    return value.find("__", len("flowtool_")) > len("flowtool_")


def _blank(value: Any) -> bool:
    return not isinstance(value, str) or not value.strip()


def resolve_tool_choice(request: Mapping[str, Any], protocol: str) -> tuple[bool, bool]:
    """(required, none): the modern field is authoritative when present, even when malformed."""
    if protocol == "anthropic-messages":
        choice = request.get("tool_choice")
        if not isinstance(choice, Mapping):
            return False, False
        kind = choice.get("type")
        if kind == "any" or (kind == "tool" and not _blank(choice.get("name"))):
            return True, False
        return False, kind == "none"
    if "tool_choice" in request:
        choice = request["tool_choice"]
        if isinstance(choice, str):
            return choice == "required", choice == "none"
        if isinstance(choice, Mapping):
            kind = choice.get("type")
            if kind == "function":
                function = choice.get("function")
                named = not _blank(choice.get("name")) or (
                    isinstance(function, Mapping) and not _blank(function.get("name"))
                )
                return named, False
            if kind == "allowed_tools":
                tools = choice.get("tools")
                return choice.get("mode") == "required" and isinstance(tools, list) and len(tools) > 0, False
        return False, False
    legacy = request.get("function_call")
    if isinstance(legacy, str):
        return False, legacy == "none"
    if isinstance(legacy, Mapping):
        return not _blank(legacy.get("name")), False
    return False, False


def _count_openai_images(content: Any) -> int:
    if type(content) is not list:
        return 0
    n = 0
    for part in content:
        if type(part) is dict and part.get("type") in ("image_url", "input_image"):
            n += 1
    return n


def _walk_chat(
    messages: Sequence[Any], facts: Facts, *, count_images: bool
) -> tuple[dict[str, Any] | None, bool]:
    """Counts over every message, then the tail flags from the last two messages. Returns the latest user
    message and whether every message was a plain dict (the walk skips anything else, while
    :func:`policies.routing.engine.latest_user_text` accepts any mapping, so only then do the two agree).

    Equivalent to resetting the flags at every message (the reference's walk): a flag set by an earlier
    message is always reset by a later one, so only the last message (and, for LastUserAfterToolResult,
    whether the one before it was a tool result) decides them. Hot path: concrete dict/list checks only.
    """
    users = assistants = systems = tools = calls = images = 0
    developer = facts.has_developer_message
    last: dict[str, Any] | None = None
    before_last: dict[str, Any] | None = None
    last_user: dict[str, Any] | None = None
    plain = True
    for message in messages:
        if type(message) is not dict:
            plain = False
            continue
        role = message.get("role")
        if role == "user":
            users += 1
            last_user = message
            if count_images:
                content = message.get("content")
                if type(content) is list:
                    images += _count_openai_images(content)
        elif role == "assistant":
            assistants += 1
            tool_calls = message.get("tool_calls")
            if type(tool_calls) is list:
                calls += len(tool_calls)
        elif role == "tool":
            tools += 1
        elif role == "system":
            systems += 1
        elif role == "developer":
            developer = True
        before_last, last = last, message
    facts.user_message_count += users
    facts.assistant_message_count += assistants
    facts.system_message_count += systems
    facts.tool_message_count += tools
    facts.tool_result_count += tools
    facts.assistant_tool_call_count += calls
    facts.image_content_count += images
    facts.has_developer_message = developer
    if last is not None:
        _tail_flags(last, before_last, facts)
    return last_user, plain


def _tail_flags(last: dict[str, Any], before_last: dict[str, Any] | None, facts: Facts) -> None:
    role = last.get("role")
    role = role if type(role) is str else ""
    facts.last_message_role = role
    if role == "user":
        facts.last_user_after_tool_result = before_last is not None and before_last.get("role") == "tool"
    elif role == "assistant":
        tool_calls = last.get("tool_calls")
        facts.last_assistant_tool_call = type(tool_calls) is list and len(tool_calls) > 0
    elif role == "tool":
        facts.last_message_tool_result = True
        facts.last_message_flow_tool_result = is_workflow_tool_call_id(last.get("tool_call_id"))


def _len(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _walk_anthropic(request: Mapping[str, Any], facts: Facts) -> None:
    system = request.get("system")
    if (isinstance(system, str) and system) or (isinstance(system, list) and system):
        facts.system_message_count += 1
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        previous_was_tool_result = facts.last_message_tool_result or facts.last_message_role == "tool"
        role = message.get("role")
        role = role if isinstance(role, str) else ""
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
        facts.last_message_role = role
        facts.last_message_tool_result = False
        facts.last_message_flow_tool_result = False
        facts.last_assistant_tool_call = False
        facts.last_user_after_tool_result = False
        if role == "user":
            facts.user_message_count += 1
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                facts.tool_message_count += 1
                facts.tool_result_count += 1
                facts.last_message_tool_result = True
                facts.last_message_flow_tool_result = any(
                    is_workflow_tool_call_id(b.get("tool_use_id")) for b in results
                )
            facts.last_user_after_tool_result = previous_was_tool_result and not results
            facts.image_content_count += sum(1 for b in blocks if b.get("type") == "image")
        elif role == "assistant":
            facts.assistant_message_count += 1
            n = sum(1 for b in blocks if b.get("type") == "tool_use")
            facts.assistant_tool_call_count += n
            facts.last_assistant_tool_call = n > 0
        elif role == "system":
            facts.system_message_count += 1
    facts.tool_definition_count = _len(request.get("tools"))


def _responses_to_chat(request: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Translate a Responses request to chat messages; also count native user image parts."""
    messages: list[dict[str, Any]] = []
    images = 0
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = request.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}], 0
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "function_call":
            last = messages[-1] if messages else None
            call = {"id": item.get("call_id"), "type": "function"}
            if last is not None and last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one assistant turn: its text and its calls
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id")})
        elif kind in (None, "message") and "role" in item:
            role = item.get("role")
            content = item.get("content")
            if role == "user" and isinstance(content, list):
                images += sum(1 for p in content if isinstance(p, Mapping) and p.get("type") == "input_image")
            messages.append({"role": role, "content": content})
    return messages, images


def extract_facts(request: Mapping[str, Any], protocol: str = "openai-chat") -> Facts:
    """The request's facts; ``protocol`` is one of :data:`PROTOCOLS`."""
    return scan_request(request, protocol)[0]


def scan_request(
    request: Mapping[str, Any], protocol: str = "openai-chat"
) -> tuple[Facts, dict[str, Any] | None, bool]:
    """The facts and, from the same walk, ``(latest user message or None, True)`` for an ``openai-chat``
    request whose messages are all plain dicts; ``(None, False)`` otherwise (the caller looks it up)."""
    facts = Facts()
    latest_user: dict[str, Any] | None = None
    seen = False
    if protocol == "openai-chat":
        messages = request.get("messages")
        if isinstance(messages, list):
            latest_user, seen = _walk_chat(messages, facts, count_images=True)
        else:
            seen = True  # no messages: no user message either
        facts.tool_definition_count = _len(request.get("tools")) + _len(request.get("functions"))
    elif protocol == "anthropic-messages":
        _walk_anthropic(request, facts)
    elif protocol == "openai-responses":
        messages, images = _responses_to_chat(request)
        _walk_chat(messages, facts, count_images=False)
        facts.image_content_count = images
        facts.tool_definition_count = _len(request.get("tools"))
    else:
        raise ValueError(f"unsupported protocol {protocol!r}; valid protocols: {', '.join(PROTOCOLS)}")
    facts.tool_choice_required, facts.tool_choice_none = resolve_tool_choice(request, protocol)
    return facts, latest_user, seen
