"""The SDK for agent runtimes: the agent-facing tools of a session over HTTP.

client = SessionClient("http://127.0.0.1:8000", token=...)
client.configure("s1", dmailEnabled=True, functions=["approval"])
client.signal("s1", "need_approval", {"plan": "..."})    # -> the signal tool's text
client.send_dmail("s1", "read lines 120-180 only", 3)     # -> {"isError", "output", "message", "brief"}
client.end_step("s1", rejected_without_feedback=False)    # -> {"outcome", ...}

Every session route has its call: ``configure``/``settings``, ``append``, ``checkpoint``, ``context``, ``revert``,
``clear``, ``compact``; ``signal``, ``send_dmail``, ``end_step``; ``activate``, ``deactivate``, ``turn``, ``idle``,
``tool_after``, ``state``, ``attention``, ``artifacts``, ``put_artifact``.

An error answer raises: ``StoreUnavailable`` for a 503 and ``OverLimit`` for a 429, both with ``retry_after_s``
(the answer's Retry-After), else ``InvalidEvent`` naming the field (producers/sdk/http_door.py). The token is
checked when the client is made (whitespace around it dropped; a ValueError that never quotes it for one a header
cannot carry) and sent on every call, also through an httpx client given as ``client``; ``url`` may hold no user
name or password. Calls are not retried: a repeated signal or D-Mail is a second one.

``timeout_s`` (default 30 s) is each call's deadline, the whole answer included: a server that trickles it is cut
off there (an ``httpx.TimeoutException``; a client given as ``client`` keeps its own transport, its timeouts capped
by that deadline). A success answer that is not the route's (no JSON object, a field missing or of another kind)
is :class:`~producers.sdk.http_door.UnexpectedAnswer`. ``with SessionClient(...) as client:`` closes it.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import httpx

from producers.sdk.http_door import (
    UnexpectedAnswer,
    bearer_headers,
    bearer_token,
    check_client_url,
    door_url,
    error_of,
    json_object,
    origin,
)
from sessions.ids import session_id_problem
from worker.intake.source_event import EventError, InvalidEvent
from worker.outbox.deadline import Deadline, deadline_transport, send_within

__all__ = ["RECORD_ERROR_HEADER", "SessionClient"]

log = logging.getLogger(__name__)

RECORD_ERROR_HEADER = "Agent-Signal-Record-Error"  # the door's (producers/http/records.py)


class SessionClient:
    def __init__(
        self,
        url: str = "",
        *,
        token: str | None = None,
        client: httpx.Client | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s is {timeout_s}; give the seconds a call may take in all (above 0)")
        if client is not None:
            check_client_url(client)
        self.headers = bearer_headers(bearer_token(token))  # per call: a given client has none of ours
        self.timeout_s = timeout_s
        self.http = client or httpx.Client(
            base_url=door_url(url), timeout=timeout_s, transport=deadline_transport(door_url(url))
        )

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    last_record_error: str | None = None
    """The last call's ``Agent-Signal-Record-Error``: its change was made, but the source event recording it was
    refused (the user's quota, a full inbox; the code). Also logged as a warning."""

    def _session(self, method: str, session_id: str, rest: str = "", body: Any = None) -> dict[str, Any]:
        """``_call`` on ``/v1/sessions/<session_id><rest>``, the id checked first: ``s1/..`` or ``.`` would be
        resolved away by the URL into another session's path."""
        if (problem := session_id_problem(session_id)) is not None:
            raise InvalidEvent(
                EventError(code="invalid_id", message=f"sessionId {problem}", field="sessionId")
            )
        return self._call(method, f"/v1/sessions/{session_id}{rest}", body)

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """The route's JSON object, within the call's deadline; the SDK's error for an error answer."""
        deadline = Deadline(self.timeout_s)
        request = self.http.build_request(method, path, json=body, headers=self.headers)
        with deadline.applied():
            response = send_within(self.http, request, deadline)
        self.last_record_error = response.headers.get(RECORD_ERROR_HEADER)
        if self.last_record_error is not None:
            log.warning("%s %s: done, but its record was refused (%s)", method, path, self.last_record_error)
        if response.status_code >= 400:
            raise error_of(response)
        return json_object(response, "a JSON object")

    def _field(self, answer: dict[str, Any], name: str, kind: type[Any]) -> Any:
        """``answer[name]`` when it is a ``kind``; else :class:`UnexpectedAnswer` (not a KeyError, not ``"None"``)."""
        value = answer.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            got = "null" if value is None else type(value).__name__
            raise UnexpectedAnswer(
                f"answered {name!r} as {got}, not {kind.__name__}", origin(self.http.base_url)
            )
        return value

    # settings and context
    def configure(self, session_id: str, **settings: Any) -> dict[str, Any]:
        return dict(self._session("PUT", session_id, "", settings))

    def append(self, session_id: str, messages: list[dict[str, Any]], token_count: int | None = None) -> int:
        body: dict[str, Any] = {"messages": messages}
        if token_count is not None:
            body["tokenCount"] = token_count
        return int(self._field(self._session("POST", session_id, "/context/messages", body), "length", int))

    def checkpoint(self, session_id: str) -> int:
        answer = self._session("POST", session_id, "/context/checkpoint", {})
        return int(self._field(answer, "checkpointId", int))

    def settings(self, session_id: str) -> dict[str, Any]:
        return dict(self._session("GET", session_id))

    def context(self, session_id: str) -> dict[str, Any]:
        return dict(self._session("GET", session_id, "/context"))

    def revert(self, session_id: str, checkpoint_id: int) -> dict[str, Any]:
        """Back to checkpoint ``checkpoint_id`` (kimi's revert_to): the context as it is then."""
        return dict(self._session("POST", session_id, "/context/revert", {"checkpointId": checkpoint_id}))

    def clear(self, session_id: str) -> dict[str, Any]:
        """Everything goes; checkpoint ids restart at 0."""
        return dict(self._session("POST", session_id, "/context/clear", {}))

    def compact(self, session_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The context replaced by ``messages`` (a summary) after checkpoint 0."""
        return dict(self._session("POST", session_id, "/context/compact", {"messages": messages}))

    # tools
    def signal(self, session_id: str, signal_type: str, payload: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"type": signal_type}
        if payload is not None:
            body["payload"] = payload
        return str(self._field(self._session("POST", session_id, "/signal", body), "output", str))

    def send_dmail(self, session_id: str, message: str, checkpoint_id: int) -> dict[str, Any]:
        return dict(
            self._session(
                "POST",
                session_id,
                "/dmail",
                {"message": message, "checkpoint_id": checkpoint_id},
            )
        )

    def end_step(self, session_id: str, *, rejected_without_feedback: bool = False) -> dict[str, Any]:
        return dict(
            self._session(
                "POST",
                session_id,
                "/steps/end",
                {"rejectedWithoutFeedback": rejected_without_feedback},
            )
        )

    # function state machine
    def activate(self, session_id: str, name: str) -> dict[str, Any]:
        return dict(self._session("POST", session_id, "/functions/activate", {"name": name}))

    def deactivate(self, session_id: str, name: str) -> dict[str, Any]:
        return dict(self._session("POST", session_id, "/functions/deactivate", {"name": name}))

    def turn(self, session_id: str, *, user_messaged: bool) -> dict[str, Any]:
        return dict(self._session("POST", session_id, "/turn", {"userMessaged": user_messaged}))

    def idle(self, session_id: str, **inputs: Any) -> dict[str, Any]:
        return dict(self._session("POST", session_id, "/idle", inputs))

    def tool_after(self, session_id: str, name: str, args: Any = None, output: Any = None) -> list[str]:
        body = {"name": name, "args": args, "output": output}
        return list(self._field(self._session("POST", session_id, "/tool", body), "injects", list))

    def state(self, session_id: str) -> dict[str, Any]:
        return dict(self._session("GET", session_id, "/state"))

    def attention(self, session_id: str) -> list[dict[str, Any]]:
        """The pausing signals whose function is still gated."""
        return list(self._field(self._session("GET", session_id, "/attention"), "items", list))

    def artifacts(self, session_id: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._session("GET", session_id, "/artifacts").items()}

    def put_artifact(self, session_id: str, name: str, content: str) -> dict[str, Any]:
        """Write artifact ``name``, one path segment: a name with ``/`` (which no route can take) or an empty one
        is :class:`InvalidEvent` naming ``name``, before anything is sent. ``.`` and ``..`` are sent encoded (as
        they are, a URL reads them as "this" and "the parent" segment, and the call reached another route)."""
        if not name or "/" in name:
            message = "name: an artifact name is one non-empty path segment (no '/')"
            raise InvalidEvent(EventError(code="invalid_field", message=message, field="name"))
        segment = name.replace(".", "%2E") if name in (".", "..") else quote(name, safe="")
        return dict(self._session("PUT", session_id, f"/artifacts/{segment}", {"content": content}))

    def close(self) -> None:
        self.http.close()
