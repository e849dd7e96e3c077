"""The judges, without a language model: deterministic rules (documented in docs/self-iteration.md, "Judges") that answer the
same questions as LobeHub's LLM judges, in the same shapes.

* satisfaction: ``satisfied`` | ``not_satisfied`` | ``neutral`` with confidence, reason and evidence cues.
  Future-facing preference corrections and explicit skill create/update requests are ``not_satisfied``
  (LobeHub's prompt says so); plain acknowledgements ("Thanks.", "ok", "好的") are ``neutral``.
* domains: 1-4 targets among ``memory`` (a durable user preference), ``skill`` (a reusable workflow,
  checklist or template; may fan out with memory), ``prompt`` (this reply's wording or format; exclusive),
  ``none``.
* skill intent: an explicit create/refine request is a direct decision; anything else gets LobeHub's safe
  fallback ``{maintain, 0.35, weak_positive, insufficient-evidence, accumulate}``.

Every rule has a test with an input that triggers it and one that does not (tests/unit/self_iteration).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "SAFE_SKILL_INTENT",
    "DomainTarget",
    "RuleDomainJudge",
    "RuleSatisfactionJudge",
    "RuleSkillIntentClassifier",
    "SatisfactionVerdict",
    "SkillIntent",
]


@dataclass(frozen=True)
class SatisfactionVerdict:
    result: str  # satisfied | not_satisfied | neutral
    confidence: float
    reason: str
    evidence: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class DomainTarget:
    target: str  # memory | skill | prompt | none
    confidence: float
    reason: str
    evidence: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class SkillIntent:
    action_intent: str | None
    confidence: float
    explicitness: str
    reason: str
    route: str

    def to_payload(self) -> dict[str, Any]:
        return {
            "skillActionIntent": self.action_intent,
            "skillIntentConfidence": self.confidence,
            "skillIntentExplicitness": self.explicitness,
            "skillIntentReason": self.reason,
            "skillRoute": self.route,
        }


SAFE_SKILL_INTENT = SkillIntent("maintain", 0.35, "weak_positive", "insufficient-evidence", "accumulate")


class SatisfactionJudge(Protocol):
    def judge(self, message: str, serialized_context: str | None) -> SatisfactionVerdict: ...


class DomainJudge(Protocol):
    def judge_domains(self, message: str, verdict: SatisfactionVerdict) -> list[DomainTarget]: ...


class SkillIntentClassifier(Protocol):
    def classify(self, message: str, serialized_context: str | None) -> SkillIntent: ...


def _rx(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


# Each rule: (name, pattern). The first matching rule of a class is the evidence cue.
FUTURE_PREFERENCE = [
    (
        "future_preference",
        _rx(
            r"\bgoing forward\b",
            r"\bfrom now on\b",
            r"\bin the future\b",
            r"\bnext time\b",
            r"以后",
            r"今后",
            r"下次",
            r"从现在开始",
        ),
    ),
]
CORRECTION = [
    (
        "correction",
        _rx(
            r"\bthat'?s (?:wrong|not right|incorrect)\b",
            r"\bnot what I (?:asked|wanted|meant)\b",
            r"\bplease (?:don'?t|stop)\b",
            r"\bstop (?:doing|using)\b",
            r"不对",
            r"错了",
            r"不要再",
            r"别再",
        ),
    ),
    (
        "change_request",
        _rx(
            r"\btoo (?:long|verbose|short|wordy)\b",
            r"\bmake it (?:shorter|longer|simpler|more concise)\b",
            r"太长",
            r"太啰嗦",
            r"简短一些",
            r"更简洁",
        ),
    ),
]
SKILL_REQUEST = [
    (
        "skill_request",
        _rx(
            r"\b(?:create|save|make|turn) (?:this|it|that)? ?(?:into |as )?(?:a |an )?(?:new )?(?:skill|workflow|checklist|template)\b",
            r"\bupdate (?:the|this|your) (?:skill|workflow|checklist)\b",
            r"做成技能",
            r"保存为技能",
            r"记住这个流程",
            r"更新技能",
        ),
    ),
]
SATISFIED = [
    (
        "praise",
        _rx(
            r"\bperfect\b",
            r"\bexactly what I (?:wanted|needed)\b",
            r"\bgreat (?:job|work|answer)\b",
            r"\bthis is (?:great|excellent|perfect)\b",
            r"\bworks (?:perfectly|great)\b",
            r"完美",
            r"太好了",
            r"正是我想要的",
            r"很好用",
        ),
    ),
]
ACK = _rx(r"^\s*(?:thanks?(?: you)?|thx|ok(?:ay)?|got it|sure|好的|谢谢|收到)[.!\u3002\uff01]*\s*$")


def _first(rules: list[tuple[str, re.Pattern[str]]], text: str) -> tuple[str, str] | None:
    for name, pattern in rules:
        match = pattern.search(text)
        if match:
            return name, match.group(0)
    return None


class RuleSatisfactionJudge:
    """Satisfaction by cue rules; the order of checks is: acknowledgement, dissatisfaction, praise."""

    def judge(self, message: str, serialized_context: str | None = None) -> SatisfactionVerdict:
        text = message.strip()
        if not text or ACK.match(text):
            return SatisfactionVerdict("neutral", 0.7, "acknowledgement without feedback")
        for rules, reason in (
            (FUTURE_PREFERENCE, "future-facing preference correction"),
            (SKILL_REQUEST, "explicit request to create or update a skill"),
            (CORRECTION, "the user corrects or asks for a change"),
        ):
            hit = _first(rules, text)
            if hit:
                return SatisfactionVerdict(
                    "not_satisfied", 0.85, reason, [{"cue": hit[0], "excerpt": hit[1]}]
                )
        hit = _first(SATISFIED, text)
        if hit:
            return SatisfactionVerdict(
                "satisfied", 0.8, "the user approves the reply", [{"cue": hit[0], "excerpt": hit[1]}]
            )
        return SatisfactionVerdict("neutral", 0.5, "no satisfaction cue")


MEMORY_RULES = [
    (
        "durable_preference",
        _rx(
            r"\bI (?:really )?(?:prefer|like|love|hate|want)\b",
            r"\bI'?m (?:a|an)\b",
            r"\bmy (?:name|role|job|timezone) is\b",
            r"\balways\b",
            r"\bnever\b",
            r"偏好",
            r"喜欢",
            r"我是",
            r"我的名字",
        ),
    ),
    ("future_preference", FUTURE_PREFERENCE[0][1]),
]
SKILL_RULES = [
    (
        "reusable_procedure",
        _rx(
            r"\bskill\b",
            r"\bworkflow\b",
            r"\bchecklist\b",
            r"\btemplate\b",
            r"\bprocedure\b",
            r"\bsteps? (?:for|to)\b",
            r"技能",
            r"流程",
            r"步骤",
            r"模板",
        ),
    ),
]
PROMPT_RULES = [
    (
        "this_reply",
        _rx(
            r"\bthis (?:answer|reply|response)\b",
            r"\byour (?:last|previous) (?:answer|reply|response)\b",
            r"\bthe formatting here\b",
            r"这次回答",
            r"这个回答",
        ),
    ),
]


class RuleDomainJudge:
    """Targets by rules: memory and skill may fan out; prompt is exclusive; nothing → none."""

    def judge_domains(self, message: str, verdict: SatisfactionVerdict) -> list[DomainTarget]:
        targets: list[DomainTarget] = []
        memory = _first(MEMORY_RULES, message)
        skill = _first(SKILL_RULES, message)
        if memory:
            targets.append(
                DomainTarget(
                    "memory", 0.8, "durable user preference", [{"cue": memory[0], "excerpt": memory[1]}]
                )
            )
        if skill:
            targets.append(
                DomainTarget(
                    "skill", 0.75, "reusable workflow or template", [{"cue": skill[0], "excerpt": skill[1]}]
                )
            )
        if targets:
            return targets
        prompt = _first(PROMPT_RULES, message)
        if prompt:
            return [
                DomainTarget(
                    "prompt",
                    0.7,
                    "about this reply's wording or format",
                    [{"cue": prompt[0], "excerpt": prompt[1]}],
                )
            ]
        return [DomainTarget("none", 0.6, "no durable domain")]


EXPLICIT_CREATE = _rx(
    r"\b(?:create|make|save) (?:this |it |that )?(?:into |as )?(?:a |an )?(?:new )?skill\b",
    r"做成技能",
    r"新建技能",
    r"保存为技能",
)
EXPLICIT_REFINE = _rx(
    r"\b(?:update|improve|refine|fix) (?:the|this|your|that) skill\b", r"更新技能", r"改进技能"
)


class RuleSkillIntentClassifier:
    """Explicit create/refine → direct decision; otherwise LobeHub's safe weak-positive fallback."""

    def classify(self, message: str, serialized_context: str | None = None) -> SkillIntent:
        if EXPLICIT_CREATE.search(message):
            return SkillIntent(
                "create", 0.9, "explicit_action", "explicit request to create a skill", "direct_decision"
            )
        if EXPLICIT_REFINE.search(message):
            return SkillIntent(
                "refine", 0.9, "explicit_action", "explicit request to refine a skill", "direct_decision"
            )
        return SAFE_SKILL_INTENT
