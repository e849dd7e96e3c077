"""The SDK for agent runtimes: the agent-facing tools of a session over HTTP.

client = SessionClient("http://127.0.0.1:8000", token=...)
client.configure("s1", dmailEnabled=True, functions=["approval"])
client.signal("s1", "need_approval", {"plan": "..."})    # -> the signal tool's text
client.send_dmail("s1", "read lines 120-180 only", 3)     # -> {"isError", "output", "message", "brief"}
client.end_step("s1", rejected_without_feedback=False)    # -> {"outcome", ...}
"""

from __future__ import annotations

from typing import Any

import httpx

from worker.intake.source_event import EventError, InvalidEvent

__all__ = ["SessionClient"]


class SessionClient:
    def __init__(
        self,
        url: str = "",
        *,
        token: str | None = None,
        client: httpx.Client | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = client or httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        if response.status_code >= 400:
            try:
                error = EventError.model_validate(response.json()["error"])
            except (ValueError, KeyError):
                error = EventError(code=f"http_{response.status_code}", message=response.text[:200])
            raise InvalidEvent(error, status_code=response.status_code)
        return response.json()

    # settings and context
    def configure(self, session_id: str, **settings: Any) -> dict[str, Any]:
        return dict(self._call("PUT", f"/v1/sessions/{session_id}", settings))

    def append(self, session_id: str, messages: list[dict[str, Any]], token_count: int | None = None) -> int:
        body: dict[str, Any] = {"messages": messages}
        if token_count is not None:
            body["tokenCount"] = token_count
        return int(self._call("POST", f"/v1/sessions/{session_id}/context/messages", body)["length"])

    def checkpoint(self, session_id: str) -> int:
        return int(self._call("POST", f"/v1/sessions/{session_id}/context/checkpoint", {})["checkpointId"])

    def context(self, session_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/sessions/{session_id}/context"))

    # tools
    def signal(self, session_id: str, signal_type: str, payload: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"type": signal_type}
        if payload is not None:
            body["payload"] = payload
        return str(self._call("POST", f"/v1/sessions/{session_id}/signal", body)["output"])

    def send_dmail(self, session_id: str, message: str, checkpoint_id: int) -> dict[str, Any]:
        return dict(
            self._call(
                "POST",
                f"/v1/sessions/{session_id}/dmail",
                {"message": message, "checkpoint_id": checkpoint_id},
            )
        )

    def end_step(self, session_id: str, *, rejected_without_feedback: bool = False) -> dict[str, Any]:
        return dict(
            self._call(
                "POST",
                f"/v1/sessions/{session_id}/steps/end",
                {"rejectedWithoutFeedback": rejected_without_feedback},
            )
        )

    # function state machine
    def activate(self, session_id: str, name: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/sessions/{session_id}/functions/activate", {"name": name}))

    def turn(self, session_id: str, *, user_messaged: bool) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/sessions/{session_id}/turn", {"userMessaged": user_messaged}))

    def idle(self, session_id: str, **inputs: Any) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/sessions/{session_id}/idle", inputs))

    def tool_after(self, session_id: str, name: str, args: Any = None, output: Any = None) -> list[str]:
        body = {"name": name, "args": args, "output": output}
        return list(self._call("POST", f"/v1/sessions/{session_id}/tool", body)["injects"])

    def state(self, session_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/sessions/{session_id}/state"))

    def close(self) -> None:
        self.http.close()
