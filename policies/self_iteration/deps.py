"""The self-iteration plugin's settings and the typed dependencies its handlers get with
``ctx.deps(SelfIterationDeps)`` (built by :mod:`policies.self_iteration.plugin`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import httpx
from pydantic import field_validator, model_validator
from redis import Redis

from policies.self_iteration.agent.runners import AgentRunner
from policies.self_iteration.gate import enabled_for
from policies.self_iteration.judges.rules import (
    DomainJudge,
    RuleDomainJudge,
    RuleSatisfactionJudge,
    RuleSkillIntentClassifier,
    SatisfactionJudge,
    SkillIntentClassifier,
)
from policies.webhook_signing import webhook_headers
from worker.plugin import Keys, PluginSettings

__all__ = ["SelfIterationDeps", "SelfIterationSettings"]


class SelfIterationSettings(PluginSettings):
    """The self-iteration section of ``AGENT_SIGNAL_*``."""

    self_iteration_enabled: bool = True  # the feature gate's default (per-user overrides in Redis)
    agent_runner: Literal["reference", "celery", "webhook"] = "reference"
    agent_runner_url: str | None = None  # webhook runner: where run requests are POSTed
    agent_runner_secret: str | None = None  # webhook runner: Standard Webhooks secret (whsec_… or any string)
    agent_runner_previous_secret: str | None = None  # webhook runner, mid-rotation: also signed with this one
    agent_runner_queue: str | None = None  # celery runner: the app's queue (default: ours, reference agent)
    judge_url: str | None = None  # OpenAI-compatible base URL (…/v1); unset: the rule-based judges
    judge_model: str = "gpt-4o-mini"
    judge_api_key: str | None = None

    @field_validator("agent_runner_previous_secret", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``AGENT_SIGNAL_AGENT_RUNNER_PREVIOUS_SECRET=""`` (how a manifest often 'unsets' a variable, the last
        step of a rotation) is no previous secret, not an unusable one."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _webhook_needs_a_target(self) -> SelfIterationSettings:
        """A webhook runner's URL and secret are checked at boot: a bad one failed every delivery, each run
        ending dead in the outbox, unseen. The secret is never quoted back."""
        if self.agent_runner != "webhook":
            return self
        if not (self.agent_runner_url and self.agent_runner_secret):
            raise ValueError(
                "AGENT_SIGNAL_AGENT_RUNNER=webhook needs AGENT_SIGNAL_AGENT_RUNNER_URL and _SECRET"
            )
        try:
            url = httpx.URL(self.agent_runner_url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"AGENT_SIGNAL_AGENT_RUNNER_URL is not a URL ({exc})") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(
                "AGENT_SIGNAL_AGENT_RUNNER_URL must be an http(s) URL with a host, e.g. https://runs.example/hook"
            )
        checked = [("AGENT_SIGNAL_AGENT_RUNNER_SECRET", self.agent_runner_secret)]
        if self.agent_runner_previous_secret is not None:
            checked.append(("AGENT_SIGNAL_AGENT_RUNNER_PREVIOUS_SECRET", self.agent_runner_previous_secret))
        for name, secret in checked:
            try:
                webhook_headers(secret, "boot-check", b"{}")
            except (
                Exception
            ):  # binascii.Error, standardwebhooks' own errors: the secret's form, said without it
                raise ValueError(
                    f"{name} is not a usable Standard Webhooks secret: whsec_ followed by base64, or any "
                    "other string (used as its bytes)"
                ) from None
        return self


@dataclass(frozen=True, slots=True)
class SelfIterationDeps:
    """What the self-iteration handlers use besides their node and context."""

    redis: Redis  # reads only: writes are staged through ctx.effects
    enabled_by_default: bool
    runner: AgentRunner | None
    satisfaction_judge: SatisfactionJudge = field(default_factory=RuleSatisfactionJudge)
    domain_judge: DomainJudge = field(default_factory=RuleDomainJudge)
    skill_intent: SkillIntentClassifier = field(default_factory=RuleSkillIntentClassifier)

    def enabled(self, user_id: str | None, keys: Keys) -> bool:
        """The feature gate for one user of the tenant of ``keys`` (override in Redis, else the setting);
        handlers pass ``ctx.keys``, so the override read is their event's tenant's."""
        return enabled_for(self.redis, keys, self.enabled_by_default, [user_id])[0]
