"""Request facts (Version C) for the three protocols, and tool-choice resolution, from the reference §3.3."""

from __future__ import annotations

from typing import Any

import pytest

from policies.routing.facts import extract_facts, is_workflow_tool_call_id, resolve_tool_choice


def _chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"messages": list(messages), **extra}


U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "hello"}
A_CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
A_CALLS2 = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}, {"id": "c2"}]}
T = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


class TestOpenAIWalk:
    def test_role_counts_and_developer_flag(self) -> None:
        """Each role has its count; developer is a presence flag, never a count."""
        f = extract_facts(
            _chat(
                {"role": "system", "content": "s"},
                {"role": "developer"},
                {"role": "developer"},
                U,
                A,
                A_CALL,
                T,
            )
        )
        assert (
            f.system_message_count,
            f.user_message_count,
            f.assistant_message_count,
            f.tool_message_count,
        ) == (1, 1, 2, 1)
        assert f.has_developer_message is True
        assert f.tool_result_count == 1 and f.assistant_tool_call_count == 1
        assert f.last_message_role == "tool" and f.last_message_tool_result is True

    def test_other_roles_only_move_the_tail(self) -> None:
        """A legacy 'function' message counts nowhere but resets the tail flags."""
        f = extract_facts(_chat(A_CALL, {"role": "function", "name": "f", "content": "x"}))
        assert f.last_message_role == "function"
        assert f.last_assistant_tool_call is False and f.last_message_tool_result is False
        assert (f.user_message_count, f.assistant_message_count, f.tool_message_count) == (0, 1, 0)

    def test_roles_are_exact(self) -> None:
        """'User' is not 'user' on the chat path."""
        f = extract_facts(_chat({"role": "User", "content": "x"}))
        assert f.user_message_count == 0 and f.last_message_role == "User"

    def test_user_after_tool_result(self) -> None:
        """LastUserAfterToolResult holds only when the message right before the last user turn was a tool result."""
        assert extract_facts(_chat(U, A_CALL, T, U)).last_user_after_tool_result is True
        assert extract_facts(_chat(U, A_CALL, T, A, U)).last_user_after_tool_result is False
        assert extract_facts(_chat(U)).last_user_after_tool_result is False

    @pytest.mark.parametrize(
        ("messages", "loop"),
        [
            ((U, A_CALL), True),  # the assistant just asked for a tool
            ((U, A_CALL, T), True),  # the last message is a tool result
            ((U, A_CALL, T, U), True),  # the user answered right after a tool result
            ((U, A_CALLS2, T, A), False),  # calls > results, but the tail is plain text (Version C)
            ((U, A_CALLS2, T, A, U), False),
            ((U, A), False),
            ((), False),
        ],
    )
    def test_active_tool_loop_version_c(self, messages: tuple[dict[str, Any], ...], loop: bool) -> None:
        """An old unmatched call no longer keeps later turns in a loop (Version C formula)."""
        assert extract_facts(_chat(*messages)).active_tool_loop is loop

    def test_flow_tool_state_is_the_tail_only(self) -> None:
        """Only a conversation that ends in a Router Flow tool result has flow state."""
        flow = {"role": "tool", "tool_call_id": "flowtool_deadbeef__call_1", "content": "{}"}
        assert extract_facts(_chat(U, A_CALL, flow)).last_message_flow_tool_result is True
        assert extract_facts(_chat(U, A_CALL, flow, U)).last_message_flow_tool_result is False

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("flowtool_deadbeef__call_1", True),
            ("flowtool_x__", True),
            ("flowtool___call_1", False),  # empty state id
            ("flowtool_deadbeef", False),
            ("call_1", False),
            (None, False),
        ],
    )
    def test_workflow_tool_call_id(self, value: Any, expected: bool) -> None:
        """flowtool_<state>__<call> with a non-empty state."""
        assert is_workflow_tool_call_id(value) is expected

    def test_tool_definitions_count_legacy_functions(self) -> None:
        """tools and legacy functions both count."""
        assert extract_facts(_chat(U, tools=[{}, {}], functions=[{}])).tool_definition_count == 3

    def test_images_in_user_messages_only(self) -> None:
        """image_url and input_image parts of user messages count, whatever the URL; assistant images do not."""
        user = {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "javascript:alert(1)"}},
                {"type": "input_image", "image_url": "data:,"},
            ],
        }
        assistant = {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        assert extract_facts(_chat(user, assistant, user)).image_content_count == 4


class TestToolChoice:
    @pytest.mark.parametrize(
        ("request_fields", "expected"),
        [
            ({"tool_choice": "required"}, (True, False)),
            ({"tool_choice": "none"}, (False, True)),
            ({"tool_choice": "auto"}, (False, False)),
            ({"tool_choice": {"type": "function", "function": {"name": "lookup"}}}, (True, False)),
            ({"tool_choice": {"type": "function", "name": "lookup"}}, (True, False)),
            ({"tool_choice": {"type": "function", "function": {"name": "  "}}}, (False, False)),
            (
                {
                    "tool_choice": {
                        "type": "allowed_tools",
                        "mode": "required",
                        "tools": [{"type": "function"}],
                    }
                },
                (True, False),
            ),
            (
                {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function"}]}},
                (False, False),
            ),
            ({"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": []}}, (False, False)),
            # the modern field wins even when malformed or null
            ({"tool_choice": 42, "function_call": {"name": "lookup"}}, (False, False)),
            ({"tool_choice": None, "function_call": "none"}, (False, False)),
            ({"tool_choice": {"type": "mystery"}, "function_call": {"name": "x"}}, (False, False)),
            # legacy function_call when tool_choice is absent
            ({"function_call": "none"}, (False, True)),
            ({"function_call": "auto"}, (False, False)),
            ({"function_call": {"name": "lookup"}}, (True, False)),
            ({"function_call": {"name": ""}}, (False, False)),
            ({}, (False, False)),
        ],
    )
    def test_openai(self, request_fields: dict[str, Any], expected: tuple[bool, bool]) -> None:
        """OpenAI chat / Responses rows."""
        assert resolve_tool_choice(request_fields, "openai-chat") == expected
        assert resolve_tool_choice(request_fields, "openai-responses") == expected

    @pytest.mark.parametrize(
        ("choice", "expected"),
        [
            ({"type": "any"}, (True, False)),
            ({"type": "tool", "name": "lookup"}, (True, False)),
            ({"type": "tool"}, (False, False)),
            ({"type": "tool", "name": " "}, (False, False)),
            ({"type": "none"}, (False, True)),
            ({"type": "auto"}, (False, False)),
            ("any", (False, False)),
            (None, (False, False)),
        ],
    )
    def test_anthropic(self, choice: Any, expected: tuple[bool, bool]) -> None:
        """Anthropic rows: any and a named tool require a tool call."""
        assert resolve_tool_choice({"tool_choice": choice}, "anthropic-messages") == expected


class TestAnthropic:
    def test_walk(self) -> None:
        """system field = one system message; tool_result user messages count once; tool_use blocks are calls."""
        request = {
            "system": "Be brief.",
            "tools": [{"name": "a"}, {"name": "b"}],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "look"}, {"type": "image", "source": {}}],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1"}, {"type": "tool_use", "id": "t2"}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1"},
                        {"type": "tool_result", "tool_use_id": "t2"},
                    ],
                },
            ],
        }
        f = extract_facts(request, "anthropic-messages")
        assert f.system_message_count == 1
        assert f.user_message_count == 2 and f.assistant_message_count == 1
        assert f.assistant_tool_call_count == 2
        assert (f.tool_message_count, f.tool_result_count) == (1, 1)
        assert f.last_message_tool_result is True and f.last_user_after_tool_result is False
        assert f.image_content_count == 1 and f.tool_definition_count == 2
        assert f.active_tool_loop is True

    def test_user_text_after_tool_result(self) -> None:
        """A plain user message right after a tool_result message is a continuation of the loop."""
        request = {
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
                {"role": "user", "content": "and now?"},
            ]
        }
        f = extract_facts(request, "anthropic-messages")
        assert f.last_user_after_tool_result is True and f.last_message_tool_result is False


class TestResponses:
    def test_string_input_and_instructions(self) -> None:
        """instructions is a system message; a string input is one user message."""
        f = extract_facts({"instructions": "x", "input": "hello", "tools": [{}]}, "openai-responses")
        assert (f.system_message_count, f.user_message_count, f.tool_definition_count) == (1, 1, 1)
        assert f.last_message_role == "user"

    def test_items(self) -> None:
        """function_call items join the assistant turn; outputs are tool messages; native images count."""
        request = {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "what is in these"},
                        {"type": "input_image", "file_id": "file-1"},
                        {"type": "input_image", "file_data": "data:image/png;base64,AAA"},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "let me check"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "look", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
                {"type": "reasoning", "summary": []},
            ]
        }
        f = extract_facts(request, "openai-responses")
        assert f.image_content_count == 2
        assert (f.user_message_count, f.assistant_message_count, f.assistant_tool_call_count) == (1, 1, 2)
        assert (f.tool_message_count, f.last_message_role, f.last_message_tool_result) == (1, "tool", True)

    def test_unknown_protocol(self) -> None:
        """An unknown protocol is an error naming the valid ones."""
        with pytest.raises(
            ValueError, match="valid protocols: openai-chat, anthropic-messages, openai-responses"
        ):
            extract_facts({}, "gemini")
