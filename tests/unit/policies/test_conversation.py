"""The chat.request handler (policies/conversation.py), called directly: it emits the decision POST /v1/route
answered when the event carries it (routing again only events that do not), and signal.conversation.* only for
the config's own conversation rules (external signals take part in the decision but emit none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policies.conversation import ChatRequestPayload, RoutingDeps, plugin
from policies.routing import MAX_EXTERNAL_SIGNALS, ReloadingRouter
from worker.chain.context import Deps, HandlerContext
from worker.core.errors import PermanentFailure
from worker.core.nodes import ChainRef, Dispatch, Source

CONFIG = """
routing:
  signals:
    conversation:
      - name: multi_turn_user
        feature: { type: count, source: { type: message, role: user } }
        predicate: { gte: 2 }
  decisions:
    - name: long-chat
      priority: 10
      rules: { type: conversation, name: multi_turn_user }
      modelRefs: [ { model: big-model } ]
    - name: fallback
      priority: 1
      modelRefs: [ { model: small-model } ]
"""
HI = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def _handle(payload: dict[str, Any], config: Path | None) -> Dispatch:
    """Run the chat.request handler on one source event carrying ``payload``."""
    (policy,) = plugin().policies  # type: ignore[misc]
    (handler,) = policy.handlers
    source = Source(
        source_id="req-1",
        source_type="chat.request",
        scope_key="route:req-1",
        timestamp=1,
        payload=payload,
        chain=ChainRef(chain_id="chain:req-1", root_source_id="req-1"),
    )
    router = ReloadingRouter(config, check_every_s=0) if config is not None else None
    ctx = HandlerContext(
        scope_key="route:req-1", node_timestamp=2, deps_of=Deps({RoutingDeps: RoutingDeps(router)})
    )
    result = handler.handle(source, ctx)
    assert isinstance(result, Dispatch)
    return result


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(CONFIG)
    return path


def _types(dispatch: Dispatch) -> list[str]:
    return [s.signal_type for s in dispatch.signals]


def test_the_answered_decision_is_emitted_not_routed_again(config: Path) -> None:
    """An event recorded by POST /v1/route carries routeResult: the handler emits that answer (and the
    fingerprint of the config that gave it) even where the worker's config would decide otherwise."""
    answered = {
        "facts": {"userMessageCount": 1},
        "signals": {"conversation:multi_turn_user": {"value": 1.0, "matched": False, "confidence": 0.0}},
        "decision": {
            "name": "older-config",
            "confidence": 0.0,
            "matchedRules": [],
            "modelRefs": [{"model": "m0"}],
        },
        "model": "m0",
    }
    payload = {"request": HI, "routeResult": answered, "configFingerprint": "sha256:0123456789ab"}
    ChatRequestPayload.model_validate(payload)  # the door admits it
    dispatch = _handle(payload, config)
    decided = dispatch.signals[-1].payload
    assert decided["decision"]["name"] == "older-config" and decided["model"] == "m0"
    assert decided["configFingerprint"] == "sha256:0123456789ab"
    assert dispatch.signals[0].payload == {
        "rule": "multi_turn_user",
        "value": 1.0,
        "matched": False,
        "confidence": 0.0,
    }
    # no router needed for an answered event
    assert _handle(payload, None).signals[-1].payload["model"] == "m0"


def test_an_event_without_an_answer_is_routed_by_the_worker(config: Path) -> None:
    """An event enqueued directly (no routeResult) is routed with the configured router; its decided signal names
    that config's fingerprint."""
    decided = _handle({"request": HI}, config).signals[-1].payload
    assert decided["decision"]["name"] == "fallback" and decided["model"] == "small-model"
    assert decided["configFingerprint"].startswith("sha256:")


def test_external_conversation_signals_emit_no_conversation_signals(config: Path) -> None:
    """External signals of type conversation take part in the decision but emit no signal.conversation.*: only
    the config's rules do (3,000 of them made the chain die with FANOUT_BUDGET)."""
    external = [{"type": "conversation", "name": f"n{i}"} for i in range(MAX_EXTERNAL_SIGNALS)]
    dispatch = _handle({"request": HI, "externalSignals": external}, config)
    assert _types(dispatch) == ["signal.conversation.multi_turn_user", "signal.routing.decided"]


def test_too_many_external_signals_are_refused(config: Path) -> None:
    """Above 256 external signals the door refuses the payload and the handler dead-letters it, naming the field."""
    external = [{"type": "conversation", "name": f"n{i}"} for i in range(MAX_EXTERNAL_SIGNALS + 1)]
    with pytest.raises(PermanentFailure, match=r"payload\.externalSignals: holds 257 entries"):
        _handle({"request": HI, "externalSignals": external}, config)
    with pytest.raises(ValueError, match="externalSignals"):
        ChatRequestPayload.model_validate({"request": HI, "externalSignals": external})


def test_an_external_signal_naming_a_config_rule_is_dead_lettered(config: Path) -> None:
    """An external signal named like one of the worker's config rules is a permanent failure naming the field."""
    external = [{"type": "Conversation", "name": "multi_turn_user", "error": "classifier down"}]
    with pytest.raises(PermanentFailure, match=r"payload\.externalSignals\[0\]\.name"):
        _handle({"request": HI, "externalSignals": external}, config)


def test_a_malformed_answer_is_refused(config: Path) -> None:
    """A routeResult that is not a RouteResult is refused at the door and dead-lettered by the handler."""
    payload = {"request": HI, "routeResult": {"decision": "x"}}
    with pytest.raises(ValueError, match="routeResult"):
        ChatRequestPayload.model_validate(payload)
    with pytest.raises(PermanentFailure, match=r"payload\.routeResult"):
        _handle(payload, config)
