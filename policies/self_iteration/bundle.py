"""The self-iteration handler bundles, in LobeHub's registration order (reference §3.1)."""

from __future__ import annotations

from policies.self_iteration.handlers.actions import skill_management_handler, user_memory_handler
from policies.self_iteration.handlers.analyze_intent import domain_judge, feedback_planner, satisfaction_judge
from policies.self_iteration.handlers.completion import completion_fanout, skill_synthesis
from policies.self_iteration.handlers.procedure import tool_outcome_procedure
from policies.self_iteration.handlers.reviews import nightly_review, self_feedback_intent, self_reflection
from worker.plugin import Policy, define_action_handler, define_signal_handler, define_source_handler

__all__ = ["self_iteration_policies"]

DOMAIN_SIGNALS = tuple(f"signal.feedback.domain.{t}" for t in ("memory", "prompt", "skill", "none"))


def self_iteration_policies() -> list[Policy]:
    return [
        Policy(
            "analyze-intent",
            [
                define_source_handler(
                    ("tool.outcome.completed", "tool.outcome.failed"),
                    "source.tool-outcome.procedure",
                    tool_outcome_procedure,
                ),
                define_source_handler(
                    "agent.user.message", "agent.user.message:feedback-satisfaction-judge", satisfaction_judge
                ),
                define_signal_handler(
                    "signal.feedback.satisfaction", "signal.feedback-domain-judge", domain_judge
                ),
                define_signal_handler(DOMAIN_SIGNALS, "signal.feedback-action-planner", feedback_planner),
                define_action_handler(
                    "action.skill-management.handle",
                    "handler.skill-management.handle",
                    skill_management_handler,
                ),
                define_source_handler(
                    "agent.execution.completed", "agent.execution.completed:skill-synthesis", skill_synthesis
                ),
                define_action_handler(
                    "action.user-memory.handle", "handler.user-memory.handle", user_memory_handler
                ),
            ],
        ),
        Policy(
            "review-nightly",
            [
                define_source_handler(
                    "agent.nightly_review.requested",
                    "agent.nightly_review.requested:shared-review",
                    nightly_review,
                ),
                define_source_handler(
                    "agent.self_reflection.requested",
                    "agent.self_reflection.requested:shared-review",
                    self_reflection,
                ),
                define_source_handler(
                    "agent.self_feedback_intent.declared",
                    "agent.self_feedback_intent.declared:shared-review",
                    self_feedback_intent,
                ),
            ],
        ),
        Policy(
            "completion",
            [
                define_source_handler(
                    "agent.execution.completed",
                    "agent.execution.completed:completion-fanout",
                    completion_fanout,
                )
            ],
        ),
    ]
