"""The self-iteration plugin object: its settings, typed dependencies, Celery task and door check.

It admits LobeHub's 17 source types and checks the payloads its handlers read at the door
(policies/self_iteration/payloads.py). Settings (``AGENT_SIGNAL_SELF_ITERATION_ENABLED``, ``AGENT_SIGNAL_AGENT_RUNNER*``, ``AGENT_SIGNAL_JUDGE_*``)
are validated at boot. Handlers reach Redis reads, the runner and the judges through
``ctx.deps(SelfIterationDeps)``; their writes go through ``ctx.effects`` and ``ctx.emit``. The feature gate
is one admission hook at the door (gated events answer ``status: "gated"`` and are not stored) and the same
:func:`~policies.self_iteration.gate.enabled_for` check in the worker. The same hook refuses (``gated``) a
completion whose run's origin event an erasure made a tombstone, and the agent-run task and deliverer drop such a
run (policies/self_iteration/origin.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from policies.self_iteration.agent.reference_agent import (
    RunDropped,
    completion_event,
    completion_probe,
    run_reference_agent,
)
from policies.self_iteration.agent.runners import (
    AGENT_RUN_OUTBOX,
    AGENT_RUN_TASK,
    AgentRunner,
    RunnerError,
    RunRefused,
    RunRequest,
    TaskRunner,
    WebhookRunner,
)
from policies.self_iteration.bundle import self_iteration_policies
from policies.self_iteration.deps import SelfIterationDeps, SelfIterationSettings
from policies.self_iteration.erasure import erase_user
from policies.self_iteration.gate import GATED_SOURCE_TYPES, enabled_for
from policies.self_iteration.origin import ORIGIN_FIELD, completion_origin, origin_erased, origins_erased
from policies.self_iteration.payloads import LOBEHUB_SOURCE_TYPES, PAYLOAD_SCHEMAS
from policies.self_iteration.records.documents import DocumentStore
from worker.plugin import (
    AdmissionHook,
    Deliverer,
    OutboxRecord,
    PermanentFailure,
    Plugin,
    PluginRuntime,
    PluginTask,
    PreparedEvent,
    RetryLater,
    UnlessErased,
)

__all__ = ["plugin"]

log = logging.getLogger(__name__)

COMPLETION = "agent.execution.completed"
GATED = "gated"  # an admission gate's verdict: answered, not stored (the door's status for a refused event)


def _runner(settings: SelfIterationSettings, runtime: PluginRuntime) -> AgentRunner | None:
    if settings.agent_runner == "webhook":  # the settings model checked URL and secret at boot
        previous = settings.agent_runner_previous_secret
        return WebhookRunner(
            settings.agent_runner_url or "",
            settings.agent_runner_secret or "",
            previous_secrets=() if previous is None else (previous,),
        )
    if runtime.publish is None:
        return None  # the web process runs no handlers
    return TaskRunner(runtime.publish, settings.agent_runner_queue)


def _deps(runtime: PluginRuntime) -> SelfIterationDeps:
    settings = runtime.settings_for(SelfIterationSettings)
    deps = SelfIterationDeps(
        redis=runtime.redis,
        enabled_by_default=settings.self_iteration_enabled,
        runner=_runner(settings, runtime),
    )
    if not settings.judge_url:
        return deps
    from policies.self_iteration.judges.openai_compatible import (
        OpenAIDomainJudge,
        OpenAIJudgeClient,
        OpenAISatisfactionJudge,
    )

    client = OpenAIJudgeClient(settings.judge_url, settings.judge_model, settings.judge_api_key)
    return SelfIterationDeps(
        redis=deps.redis,
        enabled_by_default=deps.enabled_by_default,
        runner=deps.runner,
        satisfaction_judge=OpenAISatisfactionJudge(client),
        domain_judge=OpenAIDomainJudge(client),
    )


def _gate(runtime: PluginRuntime) -> AdmissionHook:
    default = runtime.settings_for(SelfIterationSettings).self_iteration_enabled

    def gate(events: Sequence[PreparedEvent]) -> Mapping[int, str | UnlessErased]:
        """Self-iteration events whose user has the feature off, and completions of runs whose origin event an
        erasure made a tombstone, are answered ``gated`` and not stored; any other completion naming its origin is
        admitted only while that origin is still no tombstone when the enqueue script writes it (UnlessErased:
        an erasure between this look and the write brought the user back, a scale walk found)."""
        answers = _origin_answers(runtime, events)
        candidates = [
            (i, e.user_id)
            for i, e in enumerate(events)
            if e.source_type in GATED_SOURCE_TYPES and e.user_id and not isinstance(answers.get(i), str)
        ]
        for tenant in {events[i].tenant for i, _ in candidates}:
            mine = [(i, u) for i, u in candidates if events[i].tenant == tenant]
            keys = runtime.keys.for_tenant(tenant)
            verdicts = enabled_for(runtime.redis, keys, default, [u for _, u in mine], strict=True)
            answers.update(
                {index: GATED for (index, _), enabled in zip(mine, verdicts, strict=True) if not enabled}
            )
        return answers

    return gate


def _origin_answers(runtime: PluginRuntime, events: Sequence[PreparedEvent]) -> dict[int, str | UnlessErased]:
    """The gate's answer for each completion (``agent.execution.completed``) that names its run's origin event:
    ``gated`` when the origin is a tombstone (the run was asked for before its user was erased, and its
    completion would bring the user back: a new event, receipts, a scope), else admitted only while it stays no
    tombstone (UnlessErased). A completion that names no origin (a run asked for before runs named one) gets none."""
    named = [
        (index, event.tenant, origin)
        for index, event in enumerate(events)
        if event.source_type == COMPLETION and (origin := completion_origin(event.body))
    ]
    checks = [(runtime.keys.for_tenant(tenant), origin, None) for _, tenant, origin in named]
    answers: dict[int, str | UnlessErased] = {}
    for (index, _, origin), erased in zip(named, origins_erased(runtime.redis, checks), strict=True):
        if erased:
            log.info("a completion refused: its run's origin event %s was erased", origin)
        answers[index] = GATED if erased else UnlessErased(origin, GATED)
    return answers


def _run_deliverer(runtime: PluginRuntime) -> Deliverer:
    """Hands an outboxed run request to the configured runner (the process's SelfIterationDeps)."""

    def deliver(record: OutboxRecord) -> None:
        runner = runtime.deps.get(SelfIterationDeps).runner
        if runner is None:
            raise RunnerError("no agent runner is configured in this process")
        # The record's tenant and scope are the engine's, not the handler's payload: a run cannot cross tenants,
        # and its completion runs in the scope of the event that staged it (a request of before carries none). The
        # record names that event too: the origin of a request of before, which does not.
        payload = {**record.payload, "tenant": record.tenant}
        if record.scope_key:
            payload["scopeKey"] = record.scope_key
        if record.event_id and not payload.get(ORIGIN_FIELD):
            payload[ORIGIN_FIELD] = record.event_id
        request = RunRequest.from_json_dict(payload)
        if _origin_erased(runtime, request):
            _dropped(request, "not handed over")
            return
        _check_completion(runtime, request)
        try:
            runner.dispatch(request)
        except RunRefused as exc:  # dead at once: the relay would send the same refused request ten times
            raise PermanentFailure(str(exc), code="RUN_REFUSED") from None
        except RunnerError as exc:
            if exc.retry_after_s is None:
                raise
            raise RetryLater(str(exc), delay_s=exc.retry_after_s) from None  # the relay waits as asked

    return deliver


def _agent_run(runtime: PluginRuntime, payload: dict[str, Any]) -> None:
    """The reference agent: do the run, then report ``agent.execution.completed`` (the app's job otherwise). A run
    whose origin event an erasure made a tombstone is dropped (no retry): checked before it runs, right before it
    writes, and its completion at the door (the admission hook)."""
    request = _run_request(payload)
    keys = runtime.keys.for_tenant(request.tenant)
    if _origin_erased(runtime, request):
        _dropped(request, "not run")
        return
    if runtime.emitter is None:  # no other attempt changes that
        raise PermanentFailure("the reference agent needs the engine's emitter", code="NO_EMITTER")
    try:
        self_iteration = run_reference_agent(
            DocumentStore(runtime.redis, keys), request, proceed=lambda: not _origin_erased(runtime, request)
        )
    except RunDropped:
        _dropped(request, "stopped before its write")
        return
    runtime.emitter.emit(
        completion_event(request, self_iteration), tenant=request.tenant, scope_key=request.scope_key
    )


def _run_request(payload: dict[str, Any]) -> RunRequest:
    """The task's request; one that is not a run request is a PermanentFailure (no attempt reads it otherwise)."""
    try:
        return RunRequest.from_json_dict(payload)
    except (KeyError, TypeError, ValueError) as exc:
        message = f"the task's payload is not a run request ({type(exc).__name__})"
        raise PermanentFailure(message, code="BAD_RUN_REQUEST") from None


def _run_dead(runtime: PluginRuntime, payload: dict[str, Any], error: str) -> None:
    """A run that failed every attempt: the outbox record that asked for it is settled ``dead`` with the run's error,
    so ``GET /v1/outbox/dead`` lists it and ``POST /v1/outbox/redrive`` hands the run over again (a redrive of a
    run whose origin was erased meanwhile is dropped again, not run). A request of before names no scope, and a
    record gone (its retention, an erasure) cannot be listed: a log line says so."""
    request = _run_request(payload)
    listed = request.scope_key is not None and runtime.fail_record(
        request.tenant, request.scope_key, AGENT_RUN_OUTBOX, request.operation_id, error
    )
    if listed:
        log.warning("agent run (%s) failed for good; its outbox record is dead: %s", request.slug, error)
    else:
        log.error(
            "agent run (%s) failed for good, and no delivered outbox record of it is left to list",
            request.slug,
        )


def _check_completion(runtime: PluginRuntime, request: RunRequest) -> None:
    """Before the reference agent is handed a run: raise PermanentFailure (the record is dead at once, listed by
    ``GET /v1/outbox/dead``) when the emitter would refuse the run's completion. The run would write its memory and
    lose its receipts, the task's failure logged and nothing else (a fuzzing audit): a request no completion can
    come of is not run. Another runner's completion is the app's own (checked at the door when it posts it)."""
    if runtime.emitter is None or runtime.settings_for(SelfIterationSettings).agent_runner != "reference":
        return
    try:
        runtime.emitter.validate(
            completion_probe(request), tenant=request.tenant, scope_key=request.scope_key
        )
    except ValueError as exc:  # InvalidEvent: it names the field
        message = f"the run's completion would be refused, so it was not run: {exc}"
        raise PermanentFailure(message, code="RUN_COMPLETION_REFUSED") from None


def _origin_erased(runtime: PluginRuntime, request: RunRequest) -> bool:
    keys = runtime.keys.for_tenant(request.tenant)
    return origin_erased(runtime.redis, keys, request.origin_event_id, request.scope_key)


def _dropped(request: RunRequest, what: str) -> None:
    """Said without the user: the origin event's id and the run's kind."""
    log.info("agent run (%s) %s: its origin event %s was erased", request.slug, what, request.origin_event_id)


def plugin() -> Plugin:
    """LobeHub's self-iteration: feedback → memory and skill runs → receipts, reviews, the feature gate."""
    return Plugin(
        "self-iteration",
        policies=self_iteration_policies(),
        settings=SelfIterationSettings,
        services=_deps,
        tasks=[PluginTask(AGENT_RUN_TASK, _agent_run, dead=_run_dead)],
        admission=_gate,
        deliverers={AGENT_RUN_OUTBOX: _run_deliverer},
        # LobeHub compatibility: all 17 of its source types, and the payloads its handlers read
        source_types=LOBEHUB_SOURCE_TYPES,
        payload_schemas=PAYLOAD_SCHEMAS,
        # the completion fan-out reads the run's user there: it must be the event's (the credential's) user
        user_fields={"agent.execution.completed": ["selfIteration.userId"]},
        erase_user=erase_user,
    )
