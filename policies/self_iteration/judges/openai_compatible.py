"""Judges backed by an OpenAI-compatible chat-completions endpoint with JSON-schema output
(``AGENT_SIGNAL_JUDGE_URL``, ``AGENT_SIGNAL_JUDGE_MODEL``, key in ``AGENT_SIGNAL_JUDGE_API_KEY``).

Strict schemas as LobeHub's (``agent_signal_feedback_satisfaction``, ``agent_signal_feedback_domain_route``).
An answer that is not valid JSON (``NaN`` and ``Infinity`` included) or breaks the schema raises
:class:`MalformedJudgeOutput`, whatever is wrong with it: each answer is validated by a pydantic model of its
schema (strict types, confidence a finite number, satisfaction confidence within 0..1), as LobeHub re-validates
with zod. The policy records it as a diagnostic and concludes the chain (LobeHub's behaviour). Transport errors
propagate (the event is retried with backoff).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


class _Output(BaseModel):
    """An answer's object: strict JSON types (no "0.5" for a number, no true for 1); unknown keys ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


_Confidence = Annotated[float, Field(allow_inf_nan=False)]


class _Evidence(_Output):
    cue: str
    excerpt: str


class _Satisfaction(_Output):
    """SATISFACTION_SCHEMA as a model."""

    confidence: Annotated[_Confidence, Field(ge=0, le=1)]
    evidence: list[_Evidence]
    reason: str
    result: Literal["satisfied", "neutral", "not_satisfied"]


class _Target(_Output):
    confidence: _Confidence
    evidence: list[dict[str, Any]]
    reason: str
    target: Literal["memory", "none", "prompt", "skill"]


class _Domains(_Output):
    """DOMAIN_SCHEMA as a model."""

    targets: Annotated[list[_Target], Field(min_length=1, max_length=4)]


OutputT = TypeVar("OutputT", bound=_Output)


def _validated(model: type[OutputT], data: dict[str, Any]) -> OutputT:
    """``data`` as ``model``; any way it breaks the schema is a MalformedJudgeOutput (never a TypeError)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:5]
        )
        name = model.__name__.strip("_").lower()
        raise MalformedJudgeOutput(f"invalid_type: {name} output: {problems}") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


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
            data = json.loads(content, parse_constant=_no_constant)
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
        out = _validated(_Satisfaction, data)
        evidence = [e.model_dump() for e in out.evidence]
        return SatisfactionVerdict(out.result, out.confidence, out.reason, evidence)


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
        out = _validated(_Domains, data)
        return [DomainTarget(t.target, t.confidence, t.reason, list(t.evidence)) for t in out.targets]
