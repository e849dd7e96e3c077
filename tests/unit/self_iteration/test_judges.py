"""The rule-based judges: every rule with an input that triggers it and one that does not."""

from __future__ import annotations

import pytest

from policies.self_iteration.judges.rules import (
    SAFE_SKILL_INTENT,
    RuleDomainJudge,
    RuleSatisfactionJudge,
    RuleSkillIntentClassifier,
    SatisfactionVerdict,
)

SAT = RuleSatisfactionJudge()
DOM = RuleDomainJudge()
SKILL = RuleSkillIntentClassifier()
NOT_SATISFIED = SatisfactionVerdict("not_satisfied", 0.8, "x")


@pytest.mark.parametrize(
    ("message", "result", "cue"),
    [
        ("Going forward, I prefer concise answers.", "not_satisfied", "future_preference"),
        ("以后回答简短一些", "not_satisfied", "future_preference"),
        ("From now on answer in French", "not_satisfied", "future_preference"),
        ("Next time include sources", "not_satisfied", "future_preference"),
        ("Please create a skill from this workflow", "not_satisfied", "skill_request"),
        ("把这个做成技能", "not_satisfied", "skill_request"),
        ("Update the skill with the new steps", "not_satisfied", "skill_request"),
        ("That's wrong, the port is 5432", "not_satisfied", "correction"),
        ("不对，应该是5432", "not_satisfied", "correction"),
        ("This is too long", "not_satisfied", "change_request"),
        ("太啰嗦了", "not_satisfied", "change_request"),
        ("Perfect, exactly what I wanted", "satisfied", "praise"),
        ("太好了，正是我想要的", "satisfied", "praise"),
    ],
)
def test_satisfaction_rules_trigger(message: str, result: str, cue: str) -> None:
    """Each cue class produces its result and names itself in the evidence."""
    verdict = SAT.judge(message)
    assert verdict.result == result
    assert verdict.evidence[0]["cue"] == cue


@pytest.mark.parametrize(
    "message",
    [
        "Thanks.",
        "ok",
        "好的",
        "thank you!",
        "What is the capital of France?",
        "I went forward with the plan",
        "the next step",
        "I like it",
    ],
)
def test_satisfaction_rules_do_not_trigger(message: str) -> None:
    """Acknowledgements and ordinary messages are neutral (no future/correction/skill/praise cue)."""
    assert SAT.judge(message).result == "neutral"


@pytest.mark.parametrize(
    ("message", "targets"),
    [
        ("Going forward, I prefer concise answers.", ["memory"]),
        ("I always want metric units", ["memory"]),
        ("我喜欢简短的回答", ["memory"]),
        ("Save this deploy workflow as a checklist", ["skill"]),
        ("I prefer this release checklist", ["memory", "skill"]),
        ("按照这个流程来", ["skill"]),
        ("This answer has too many headings", ["prompt"]),
        ("这个回答太长", ["prompt"]),
        ("That's wrong", ["none"]),
    ],
)
def test_domain_rules(message: str, targets: list[str]) -> None:
    """memory and skill fan out; prompt only alone; nothing → none."""
    assert [t.target for t in DOM.judge_domains(message, NOT_SATISFIED)] == targets


@pytest.mark.parametrize(
    ("message", "intent", "route"),
    [
        ("Please create a skill for this", "create", "direct_decision"),
        ("把这个做成技能", "create", "direct_decision"),
        ("Update the skill with the new step", "refine", "direct_decision"),
        ("改进技能的第二步", "refine", "direct_decision"),
    ],
)
def test_skill_intent_rules(message: str, intent: str, route: str) -> None:
    """Explicit create/refine requests are direct decisions."""
    result = SKILL.classify(message)
    assert (result.action_intent, result.route, result.explicitness) == (intent, route, "explicit_action")


@pytest.mark.parametrize(
    "message", ["This checklist was useful", "skills are nice", "I prefer short answers"]
)
def test_skill_intent_fallback(message: str) -> None:
    """Anything else gets LobeHub's safe weak-positive fallback."""
    assert SKILL.classify(message) == SAFE_SKILL_INTENT
    assert SAFE_SKILL_INTENT.to_payload() == {
        "skillActionIntent": "maintain",
        "skillIntentConfidence": 0.35,
        "skillIntentExplicitness": "weak_positive",
        "skillIntentReason": "insufficient-evidence",
        "skillRoute": "accumulate",
    }
