"""D-Mail and the context store over HTTP on a real Redis: every string and edge case of kimi-dmail.md §2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app
from sessions.dmail import DMAIL_PREFIX, SUCCESS_MESSAGE, dmail_json_schema
from sessions.store import session_scope
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as c:
        yield c


def _session(client: TestClient, sid: str = "s1", **settings: Any) -> str:
    assert client.put(f"/v1/sessions/{sid}", json={"dmailEnabled": True, **settings}).status_code == 200
    return sid


def _msg(client: TestClient, sid: str, *messages: dict[str, Any], token_count: int | None = None) -> int:
    body: dict[str, Any] = {"messages": list(messages)}
    if token_count is not None:
        body["tokenCount"] = token_count
    response = client.post(f"/v1/sessions/{sid}/context/messages", json=body)
    assert response.status_code == 200, response.text
    return int(response.json()["length"])


def _checkpoint(client: TestClient, sid: str) -> int:
    return int(client.post(f"/v1/sessions/{sid}/context/checkpoint", json={}).json()["checkpointId"])


def _context(client: TestClient, sid: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/sessions/{sid}/context").json())


def _dmail(client: TestClient, sid: str, args: Any) -> dict[str, Any]:
    response = client.post(f"/v1/sessions/{sid}/dmail", json=args)
    assert response.status_code == 200
    return dict(response.json())


def _end(client: TestClient, sid: str, rejected: bool = False) -> dict[str, Any]:
    return dict(
        client.post(f"/v1/sessions/{sid}/steps/end", json={"rejectedWithoutFeedback": rejected}).json()
    )


def U(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def A(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def CK(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"<system>CHECKPOINT {n}</system>"}


def _turn_with_two_steps(client: TestClient, sid: str) -> None:
    """kimi's shape: checkpoint 0, user message, then per step: checkpoint, assistant output."""
    assert _checkpoint(client, sid) == 0
    _msg(client, sid, U("fix the bug"))
    assert _checkpoint(client, sid) == 1
    _msg(client, sid, A("reading files"), token_count=120)
    assert _checkpoint(client, sid) == 2
    _msg(client, sid, A("found it"), token_count=340)


class TestSchema:
    def test_parameters_schema(self) -> None:
        """The tool's JSON schema is kimi's, field for field."""
        assert dmail_json_schema() == {
            "properties": {
                "message": {"description": "The message to send.", "type": "string"},
                "checkpoint_id": {
                    "description": "The checkpoint to send the message back to.",
                    "minimum": 0,
                    "type": "integer",
                },
            },
            "required": ["message", "checkpoint_id"],
            "type": "object",
        }


class TestCheckpoints:
    def test_numbering_and_checkpoint_messages(self, client: TestClient) -> None:
        """Checkpoints count from 0; with D-Mail each adds `<system>CHECKPOINT n</system>`; records are not messages."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        context = _context(client, sid)
        assert context["messages"] == [
            CK(0),
            U("fix the bug"),
            CK(1),
            A("reading files"),
            CK(2),
            A("found it"),
        ]
        assert context["nCheckpoints"] == 3 and context["tokenCount"] == 340
        # A second turn keeps counting.
        assert _checkpoint(client, sid) == 3

    def test_without_dmail_records_only(self, client: TestClient) -> None:
        """Without D-Mail, checkpoints exist but the model sees no CHECKPOINT messages; SendDMail is absent."""
        sid = _session(client, "plain", dmailEnabled=False)
        _turn_with_two_steps(client, sid)
        context = _context(client, sid)
        assert context["messages"] == [U("fix the bug"), A("reading files"), A("found it")]
        assert context["nCheckpoints"] == 3
        assert _dmail(client, sid, {"message": "x", "checkpoint_id": 0}) == {
            "isError": True,
            "output": "",
            "message": "Tool `SendDMail` not found",
            "brief": "Tool `SendDMail` not found",
        }

    def test_revert_keeps_what_came_before(self, client: TestClient) -> None:
        """revert_to(k) keeps exactly the records before checkpoint k; tokens = the last usage kept."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        reverted = client.post(f"/v1/sessions/{sid}/context/revert", json={"checkpointId": 2}).json()
        assert reverted == {
            "messages": [CK(0), U("fix the bug"), CK(1), A("reading files")],
            "nCheckpoints": 2,
            "tokenCount": 120,
        }
        reverted = client.post(f"/v1/sessions/{sid}/context/revert", json={"checkpointId": 1}).json()
        assert reverted == {"messages": [CK(0), U("fix the bug")], "nCheckpoints": 1, "tokenCount": 0}
        assert _checkpoint(client, sid) == 1  # ids continue from the revert point

    def test_revert_to_zero_and_unknown(self, client: TestClient) -> None:
        """Reverting to 0 empties the context; an id not yet issued is kimi's error, and changes nothing."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        response = client.post(f"/v1/sessions/{sid}/context/revert", json={"checkpointId": 3})
        assert response.status_code == 422
        assert response.json()["error"] == {
            "code": "unknown_checkpoint",
            "message": "Checkpoint 3 does not exist",
            "field": "checkpointId",
        }
        assert _context(client, sid)["nCheckpoints"] == 3
        assert client.post(f"/v1/sessions/{sid}/context/revert", json={"checkpointId": 0}).json() == {
            "messages": [],
            "nCheckpoints": 0,
            "tokenCount": 0,
        }

    def test_compaction_and_clear_restart_ids(self, client: TestClient) -> None:
        """Compaction clears, checkpoints 0 and appends the summary; clear resets ids to 0."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        compacted = client.post(
            f"/v1/sessions/{sid}/context/compact", json={"messages": [U("summary of earlier work")]}
        ).json()
        assert compacted == {
            "messages": [CK(0), U("summary of earlier work")],
            "nCheckpoints": 1,
            "tokenCount": 0,
        }
        assert _checkpoint(client, sid) == 1
        assert client.post(f"/v1/sessions/{sid}/context/clear", json={}).json()["nCheckpoints"] == 0
        assert _checkpoint(client, sid) == 0

    def test_bad_input(self, client: TestClient) -> None:
        """Reserved roles, missing fields and negative token counts are 422s naming the field."""
        sid = _session(client)
        bad_role = client.post(
            f"/v1/sessions/{sid}/context/messages", json={"messages": [{"role": "_checkpoint", "id": 9}]}
        )
        assert bad_role.status_code == 422 and bad_role.json()["error"]["field"] == "messages.0.role"
        missing = client.post(f"/v1/sessions/{sid}/context/messages", json={"tokenCount": 3})
        assert missing.json()["error"] == {
            "code": "missing_field",
            "message": "messages is required",
            "field": "messages",
        }
        negative = client.post(
            f"/v1/sessions/{sid}/context/messages", json={"messages": [], "tokenCount": -1}
        )
        assert negative.json()["error"]["field"] == "tokenCount"
        assert client.put("/v1/sessions/has space", json={}).status_code == 422
        assert (
            client.put(f"/v1/sessions/{sid}", json={"dmailEnabled": "yes"}).json()["error"]["field"]
            == "dmailEnabled"
        )


class TestSendDMail:
    def test_success_texts(self, client: TestClient) -> None:
        """ToolOk: empty output, the deliberately counter-intuitive message, brief El Psy Kongroo."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        assert _dmail(client, sid, {"message": "Only lines 120-180 matter.", "checkpoint_id": 1}) == {
            "isError": False,
            "output": "",
            "message": "If you see this message, the D-Mail was NOT sent successfully. This may be because some other tool that needs approval was rejected.",
            "brief": "El Psy Kongroo",
        }
        assert SUCCESS_MESSAGE.startswith("If you see this message")

    def test_checks_in_order(self, client: TestClient) -> None:
        """No such checkpoint; then, with one pending, 'Only one' wins even over a bad id."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        assert _dmail(client, sid, {"message": "x", "checkpoint_id": 3}) == {
            "isError": True,
            "output": "",
            "message": "Failed to send D-Mail. Error: There is no checkpoint with the given ID",
            "brief": "Failed to send D-Mail",
        }
        assert _dmail(client, sid, {"message": "first", "checkpoint_id": 2})["isError"] is False
        second = _dmail(client, sid, {"message": "second", "checkpoint_id": 99})
        assert second["message"] == "Failed to send D-Mail. Error: Only one D-Mail can be sent at a time"

    @pytest.mark.parametrize(
        ("args", "fragment"),
        [
            (
                {"message": "x", "checkpoint_id": -1},
                "checkpoint_id\n  Input should be greater than or equal to 0",
            ),
            ({"message": "x"}, "checkpoint_id\n  Field required"),
            ({"checkpoint_id": 0}, "message\n  Field required"),
            ({"message": "x", "checkpoint_id": "one"}, "checkpoint_id\n  Input should be a valid integer"),
        ],
    )
    def test_invalid_arguments(self, client: TestClient, args: dict[str, Any], fragment: str) -> None:
        """kosong's validation error text, brief 'Invalid arguments'."""
        sid = _session(client)
        _checkpoint(client, sid)
        result = _dmail(client, sid, args)
        assert result["isError"] is True and result["brief"] == "Invalid arguments" and result["output"] == ""
        assert result["message"].startswith("Error validating JSON arguments: 1 validation error for DMail\n")
        assert fragment in result["message"]

    def test_concurrent_sends_leave_one_pending(self, client: TestClient) -> None:
        """20 concurrent sends: exactly one succeeds, the rest get 'Only one D-Mail can be sent at a time'."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        with ThreadPoolExecutor(20) as pool:
            results = list(
                pool.map(lambda i: _dmail(client, sid, {"message": f"m{i}", "checkpoint_id": 1}), range(20))
            )
        assert sum(not r["isError"] for r in results) == 1
        assert {r["message"] for r in results if r["isError"]} == {
            "Failed to send D-Mail. Error: Only one D-Mail can be sent at a time"
        }

    def test_mailboxes_are_per_session(self, client: TestClient) -> None:
        """A sub-agent session has its own mailbox: a pending D-Mail elsewhere does not block it."""
        main, sub = _session(client, "main"), _session(client, "sub", root=False)
        for sid in (main, sub):
            _checkpoint(client, sid)
        assert _dmail(client, main, {"message": "a", "checkpoint_id": 0})["isError"] is False
        assert _dmail(client, sub, {"message": "b", "checkpoint_id": 0})["isError"] is False


class TestStepEnd:
    def test_applied(self, client: TestClient) -> None:
        """Revert to the checkpoint, re-create it with the same id, append the D-Mail in kimi's words (stripped)."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _msg(
            client,
            sid,
            A("", tool_calls=[{"id": "call_9", "type": "function", "function": {"name": "SendDMail"}}]),
        )
        _dmail(
            client,
            sid,
            {"message": "  I already fixed foo.py; only read lines 120-180.  \n", "checkpoint_id": 1},
        )
        dmail_text = (
            "<system>You just got a D-Mail from your future self. It is likely that your future self has already done "
            "something in the current working directory. Please read the D-Mail and decide what to do next. You MUST "
            "NEVER mention to the user about this information. D-Mail content:\n\n"
            "I already fixed foo.py; only read lines 120-180.</system>"
        )
        assert DMAIL_PREFIX in dmail_text
        result = _end(client, sid)
        assert result == {"outcome": "applied", "checkpointId": 1, "messages": [CK(1), U(dmail_text)]}
        context = _context(client, sid)
        assert context["messages"] == [CK(0), U("fix the bug"), CK(1), U(dmail_text)]
        assert context["nCheckpoints"] == 2 and context["tokenCount"] == 0
        assert _end(client, sid) == {"outcome": "none"}
        # the mailbox is free again
        assert _dmail(client, sid, {"message": "again", "checkpoint_id": 0})["isError"] is False

    def test_the_messages_answered_are_those_the_step_end_appended(
        self, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The answer read the context's tail after the script had run, so a message appended in between was
        answered as part of what the D-Mail applied (and the schema called the list "the context"). The script
        now returns the records it appended, and the schema says so."""
        from sessions.store import SessionStore

        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "redo", "checkpoint_id": 1})
        real_run = SessionStore.run

        def run_then_append(self: SessionStore, script: Any, session_id: str, *args: Any) -> Any:
            reply = real_run(self, script, session_id, *args)
            if script is self.scripts.step_end:  # another writer, right after the step end
                self.append(session_id, [U("meanwhile")])
            return reply

        monkeypatch.setattr(SessionStore, "run", run_then_append)
        result = _end(client, sid)
        assert result["outcome"] == "applied" and len(result["messages"]) == 2, result
        assert result["messages"][0] == CK(1) and result["messages"][1]["content"].endswith("redo</system>")
        assert _context(client, sid)["messages"][-1] == U("meanwhile")
        schema = client.get("/openapi.json").json()["components"]["schemas"]["StepEndResult"]
        assert "the messages the step end appended" in schema["properties"]["messages"]["description"]

    def test_target_own_step_checkpoint_drops_this_step(self, client: TestClient) -> None:
        """A D-Mail to the checkpoint that opened the current step only drops this step's messages."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "redo", "checkpoint_id": 2})
        assert _end(client, sid)["checkpointId"] == 2
        assert _context(client, sid)["messages"][:5] == [
            CK(0),
            U("fix the bug"),
            CK(1),
            A("reading files"),
            CK(2),
        ]

    def test_root_discards_on_rejection_without_feedback(self, client: TestClient) -> None:
        """Root: a rejection without feedback discards the pending D-Mail; the context is untouched."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _msg(client, sid, {"role": "tool", "tool_call_id": "c1", "content": SUCCESS_MESSAGE})
        before = _context(client, sid)
        _dmail(client, sid, {"message": "x", "checkpoint_id": 0})
        assert _end(client, sid, rejected=True) == {"outcome": "discarded"}
        assert _context(client, sid) == before
        assert _end(client, sid) == {"outcome": "none"}

    def test_rejection_with_no_pending(self, client: TestClient) -> None:
        """Nothing pending: nothing to discard."""
        sid = _session(client)
        _checkpoint(client, sid)
        assert _end(client, sid, rejected=True) == {"outcome": "none"}

    def test_subagent_does_not_discard(self, client: TestClient) -> None:
        """A sub-agent session applies its D-Mail even when a call was rejected without feedback."""
        sid = _session(client, "sub", root=False)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "x", "checkpoint_id": 1})
        assert _end(client, sid, rejected=True)["outcome"] == "applied"

    def test_rejection_with_feedback_applies(self, client: TestClient) -> None:
        """rejectedWithoutFeedback=false: the D-Mail is applied."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "x", "checkpoint_id": 0})
        assert _end(client, sid, rejected=False)["outcome"] == "applied"
        assert _context(client, sid)["messages"][0] == CK(0)

    @pytest.mark.parametrize("reset", ["compact", "clear"])
    def test_a_checkpoint_made_again_after_a_reset_is_not_the_one_the_dmail_went_to(
        self, client: TestClient, reset: str
    ) -> None:
        """A compaction or clear removes the checkpoints (the D-Mail is then discarded, docs/dmail.md); ids
        restart at 0, and the new checkpoint 0 is another one: applying the D-Mail there wiped the new context
        (the summary) and answered applied."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "go back", "checkpoint_id": 0})
        if reset == "compact":
            body = {"messages": [U("[SUMMARY] the bug is in foo.py")]}
            assert client.post(f"/v1/sessions/{sid}/context/compact", json=body).status_code == 200
        else:
            assert client.post(f"/v1/sessions/{sid}/context/clear", json={}).status_code == 200
            assert _checkpoint(client, sid) == 0
        _msg(client, sid, U("after the reset"))
        before = _context(client, sid)
        assert _end(client, sid) == {"outcome": "discarded"}
        assert _context(client, sid) == before
        # a D-Mail to the checkpoint as it is now is applied
        _dmail(client, sid, {"message": "now", "checkpoint_id": 0})
        assert _end(client, sid)["outcome"] == "applied"

    def test_a_revert_past_the_target_keeps_the_dmail(self, client: TestClient) -> None:
        """A revert that keeps the D-Mail's checkpoint (to a later one) leaves it the same checkpoint."""
        sid = _session(client)
        _turn_with_two_steps(client, sid)
        _dmail(client, sid, {"message": "back to one", "checkpoint_id": 1})
        assert client.post(f"/v1/sessions/{sid}/context/revert", json={"checkpointId": 2}).status_code == 200
        assert _end(client, sid)["outcome"] == "applied"

    def test_a_pending_dmail_is_stored_once(self, client: TestClient, redis_client: Any, keys: Any) -> None:
        """The message was stored twice (``message`` and its stripped ``text``); the stripped text is kept only
        where it differs, and step end appends it."""
        sid = _session(client)
        _checkpoint(client, sid)
        mailbox = keys.dmail(session_scope(sid))
        _dmail(client, sid, {"message": "plain", "checkpoint_id": 0})
        stored = json.loads(redis_client.get(mailbox))
        kept_for_the_scripts = (
            "at",
            "tenantIn",
            "countedDay",
        )  # its checkpoint's serial, where it is counted
        assert {k: v for k, v in stored.items() if k not in kept_for_the_scripts} == {
            "message": "plain",
            "checkpoint_id": 0,
        }
        assert _end(client, sid)["messages"][-1] == U(f"<system>{DMAIL_PREFIX}plain</system>")
        _dmail(client, sid, {"message": " padded\n", "checkpoint_id": 0})
        assert json.loads(redis_client.get(mailbox))["text"] == "padded"
        assert _end(client, sid)["messages"][-1] == U(f"<system>{DMAIL_PREFIX}padded</system>")


class TestEventsAndReceipt:
    def test_events_and_receipt(self, make_settings: Any, start_worker: Any) -> None:
        """Send and apply are source events on the session's scope; the applied one leaves an anchored receipt."""
        settings = make_settings()
        start_worker(settings)
        with TestClient(create_web_app(settings)) as client:
            sid = _session(client, "rx", userId="u1", agentId="agt_1", topicId="tpc_1")
            _turn_with_two_steps(client, sid)
            _msg(
                client,
                sid,
                A("", id="msg_a9", tool_calls=[{"id": "call_9", "function": {"name": "SendDMail"}}]),
            )
            _dmail(client, sid, {"message": "Skip the README, the bug is in foo.py.", "checkpoint_id": 1})
            _end(client, sid)

            def receipts() -> list[dict[str, Any]]:
                return list(
                    client.get(
                        "/v1/receipts", params={"userId": "u1", "agentId": "agt_1", "topicId": "tpc_1"}
                    ).json()["receipts"]
                )

            (receipt,) = wait_for(receipts, what="the receipt")
            assert receipt["title"] == "Context rewound to checkpoint 1"
            assert receipt["anchorMessageId"] == "msg_a9"
            assert receipt["kind"] == "context" and receipt["status"] == "applied"
            assert receipt["detail"] == "Skip the README, the bug is in foo.py."
            assert receipt["metadata"] == {"sessionId": "rx", "checkpointId": 1}
            producer = client.app.state.producer  # type: ignore[attr-defined]
            chain = wait_for(
                lambda: producer.store.get_chain(producer.keys, f"chain:{receipt['sourceId']}"),
                what="the chain",
            )
            assert chain["envelope"]["source"]["sourceType"] == "agent.context.reverted"
            assert chain["envelope"]["source"]["scopeKey"] == "session:rx"
            (record,) = client.get("/v1/events", params={"sourceType": "agent.dmail.sent"}).json()["events"]
            # dmail:<session>:<its incarnation>:<the session's first event>
            assert record["chainId"].startswith("chain:dmail:rx:") and record["chainId"].endswith(":1")
            sent = wait_for(
                lambda: producer.store.get_chain(producer.keys, record["chainId"]),
                what="the send event's chain",
            )
            assert sent["envelope"]["source"]["sourceType"] == "agent.dmail.sent"
            assert json.dumps(sent["envelope"]["source"]["payload"]["message"]) == json.dumps(
                "Skip the README, the bug is in foo.py."
            )


def test_a_message_keeps_the_nulls_it_was_sent_with(client: TestClient) -> None:
    """An assistant message with ``content: null`` (OpenAI's shape for a tool call) lost its ``content`` and
    every other null field; fields never sent are still not added."""
    sid = _session(client, "nulls")
    call = {
        "role": "assistant",
        "content": None,
        "name": None,
        "tool_calls": [{"id": "c1", "type": "function"}],
    }
    _msg(client, sid, call, U("plain"))
    assert _context(client, sid)["messages"] == [call, U("plain")]


@pytest.mark.parametrize("session_id", [".", "..", "s1\n"])
def test_a_dot_segment_is_not_a_session_id(client: TestClient, session_id: str) -> None:
    """``.`` and ``..`` are resolved away by URLs (``/v1/sessions/./context`` is ``/v1/sessions/context``): a
    client that sends them as they are gets a 422 naming ``sessionId``; so does an id ending in a newline (the
    rule's ``$`` matched before it)."""
    encoded = session_id.replace(".", "%2E").replace("\n", "%0A")  # as sent, not resolved
    answer = client.get(f"/v1/sessions/{encoded}/context")
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "sessionId"


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "wizard", "content": "x"}, "messages.1.role"),
        ({"role": "_usage", "token_count": 3}, "messages.1.role"),
        ({"role": "user"}, "messages.1.content"),
        ({"role": "user", "content": 5}, "messages.1.content"),
        ({"role": "user", "content": {"type": "text", "text": "x"}}, "messages.1.content"),
        ({"role": "user", "content": ["x"]}, "messages.1.content"),
        ({"role": "user", "content": [{"text": "no type"}]}, "messages.1.content"),
    ],
)
def test_a_message_not_in_kimis_shape_is_refused_naming_its_field(
    client: TestClient, message: dict[str, Any], field: str
) -> None:
    """An unknown role, a message without content, and content that is neither a string nor a list of content
    parts (objects with a ``type``) were stored as sent (200): each is a 422 naming the field, and nothing of the
    request is stored, on the append and on the compaction that takes messages too."""
    sid = _session(client, "shape")
    for route in ("messages", "compact"):
        answer = client.post(f"/v1/sessions/{sid}/context/{route}", json={"messages": [U("ok"), message]})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == field, answer.text
    assert _context(client, sid)["messages"] == []


def test_every_message_shape_of_kimi_is_kept(client: TestClient) -> None:
    """kimi's roles and content: a system prompt, text parts, an assistant's tool call without content, and the
    tool's answer."""
    sid = _session(client, "kimi-shapes")
    messages = [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}],
        },
        {"role": "assistant", "content": [], "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "content": "done", "tool_call_id": "c1"},
        {"role": "assistant", "content": ""},
    ]
    assert _msg(client, sid, *messages) == len(messages)
    assert _context(client, sid)["messages"] == messages
