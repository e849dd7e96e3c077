"""Judges backed by an OpenAI-compatible chat-completions endpoint with JSON-schema output
(``AGENT_SIGNAL_JUDGE_URL``, ``AGENT_SIGNAL_JUDGE_MODEL``, key in ``AGENT_SIGNAL_JUDGE_API_KEY``).

Strict schemas as LobeHub's (``agent_signal_feedback_satisfaction``, ``agent_signal_feedback_domain_route``).
An answer that is not valid JSON or breaks the schema raises :class:`MalformedJudgeOutput`; the policy records
it as a diagnostic and concludes the chain (LobeHub's behaviour). Transport errors propagate (the event is
retried with backoff).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from policies.self_iteration.judges.rules import DomainTarget, SatisfactionVerdict

__all__ = ["MalformedJudgeOutput", "OpenAIDomainJudge", "OpenAIJudgeClient", "OpenAISatisfactionJudge"]

SATISFACTION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["confidence", "evidence", "reason", "result"],
    "properties": {
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "evidence": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["cue", "excerpt"],
                "properties": {"cue": {"type": "string"}, "excerpt": {"type": "string"}},
            },
        },
        "reason": {"type": "string"},
        "result": {"type": "string", "enum": ["satisfied", "neutral", "not_satisfied"]},
    },
}
DOMAIN_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["targets"],
    "properties": {
        "targets": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["confidence", "evidence", "reason", "target"],
                "properties": {
                    "confidence": {"type": "number"},
                    "evidence": {"type": "array", "items": {"type": "object"}},
                    "reason": {"type": "string"},
                    "target": {"type": "string", "enum": ["memory", "none", "prompt", "skill"]},
                },
            },
        }
    },
}


class MalformedJudgeOutput(ValueError):
    """The model's answer is not the JSON the schema asks for."""


class OpenAIJudgeClient:
    def __init__(self, url: str, model: str, api_key: str | None = None, *, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s

    def generate_object(self, name: str, schema: dict[str, Any], system: str, user: str) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            },
        }
        response = httpx.post(
            f"{self.url}/chat/completions", json=body, headers=self.headers, timeout=self.timeout_s
        )
        response.raise_for_status()
        try:
            content = response.json()["choices"][0]["message"]["content"]
            data = json.loads(content)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise MalformedJudgeOutput(f"structured output could not be parsed: {exc}") from None
        if not isinstance(data, dict):
            raise MalformedJudgeOutput("structured output is not an object")
        return data


class OpenAISatisfactionJudge:
    SYSTEM = (
        "Judge only whether the user is satisfied with the assistant's last reply. satisfied = approving or "
        "reinforcing; not_satisfied = dissatisfied, correcting, or asking for a change (future-facing preference "
        "corrections and explicit skill create/update requests count as not_satisfied); neutral = unclear, mixed "
        "or an acknowledgement. Never judge domains or actions."
    )

    def __init__(self, client: OpenAIJudgeClient) -> None:
        self.client = client

    def judge(self, message: str, serialized_context: str | None = None) -> SatisfactionVerdict:
        user = json.dumps(
            {"message": message, "serializedContext": serialized_context or ""}, ensure_ascii=False
        )
        data = self.client.generate_object(
            "agent_signal_feedback_satisfaction", SATISFACTION_SCHEMA, self.SYSTEM, user
        )
        result, confidence = data.get("result"), data.get("confidence")
        if result not in ("satisfied", "neutral", "not_satisfied") or not isinstance(confidence, int | float):
            raise MalformedJudgeOutput(f"invalid_type: satisfaction output {data!r}")
        evidence = [e for e in data.get("evidence", []) if isinstance(e, dict)]
        return SatisfactionVerdict(str(result), float(confidence), str(data.get("reason", "")), evidence)


class OpenAIDomainJudge:
    SYSTEM = (
        "Route the feedback to 1-4 targets: memory = a durable user preference; prompt = the assistant's own "
        "wording/behaviour/format (exclusive); skill = a reusable workflow, checklist or template (may fan out "
        "with memory); none = vague or an acknowledgement."
    )

    def __init__(self, client: OpenAIJudgeClient) -> None:
        self.client = client

    def judge_domains(self, message: str, verdict: SatisfactionVerdict) -> list[DomainTarget]:
        user = json.dumps(
            {
                "message": message,
                "result": verdict.result,
                "reason": verdict.reason,
                "evidence": verdict.evidence,
            },
            ensure_ascii=False,
        )
        data = self.client.generate_object(
            "agent_signal_feedback_domain_route", DOMAIN_SCHEMA, self.SYSTEM, user
        )
        targets = data.get("targets")
        if not isinstance(targets, list) or not 1 <= len(targets) <= 4:
            raise MalformedJudgeOutput(f"invalid_type: targets {targets!r}")
        out = []
        for t in targets:
            if not isinstance(t, dict) or t.get("target") not in ("memory", "none", "prompt", "skill"):
                raise MalformedJudgeOutput(f"invalid_type: target {t!r}")
            out.append(
                DomainTarget(
                    t["target"],
                    float(t.get("confidence", 0)),
                    str(t.get("reason", "")),
                    list(t.get("evidence") or []),
                )
            )
        return out
