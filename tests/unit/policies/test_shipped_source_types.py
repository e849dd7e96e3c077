"""Where the shipped source types live: each plugin declares the types its handlers listen to, the self-iteration
plugin declares LobeHub's 17, payload schemas belong to declared types, and the UI lists the same set."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from policies.conversation import ChatRequestPayload
from policies.routing import PROTOCOLS, validate_route_input
from policies.self_iteration.payloads import LOBEHUB_SOURCE_TYPES
from tests.conftest import ROOT
from tests.support.payload_schemas import shipped_plugins, shipped_source_types
from worker.plugin import Plugin
from worker.settings import Settings

OURS = {
    "chat.request",
    "agent.signal.emitted",
    "agent.dmail.sent",
    "agent.context.reverted",
    "agent.dmail.discarded",
}


@pytest.fixture(scope="module")
def plugins() -> list[Plugin]:
    return shipped_plugins(Settings(env="test"))


def _by_name(plugins: list[Plugin]) -> dict[str, Plugin]:
    return {p.name: p for p in plugins}


def test_lobehubs_seventeen_and_ours_are_declared_by_their_plugins(plugins: list[Plugin]) -> None:
    """Self-iteration (LobeHub compatibility) declares LobeHub's 17; ours come from routing and the agent tools."""
    named = _by_name(plugins)
    assert len(set(LOBEHUB_SOURCE_TYPES)) == 17
    assert set(named["self-iteration"].source_types) == set(LOBEHUB_SOURCE_TYPES)
    assert set(named["conversation"].source_types) == {"chat.request"}
    assert set(named["dmail"].source_types) == OURS - {"chat.request"}
    assert set(shipped_source_types(plugins)) == set(LOBEHUB_SOURCE_TYPES) | OURS


def test_each_plugin_declares_what_its_source_handlers_listen_to(plugins: list[Plugin]) -> None:
    """No shipped source handler listens to a type its own plugin leaves to another plugin to admit."""
    for plugin in plugins:
        assert not callable(plugin.policies), plugin.name  # shipped plugins list their policies
        listened = {
            t
            for policy in plugin.policies  # a list (asserted above)
            for handler in policy.handlers
            if handler.kind == "source"
            for t in handler.listen
        }
        assert listened <= set(plugin.source_types), (plugin.name, listened - set(plugin.source_types))


def test_payload_schemas_belong_to_declared_types(plugins: list[Plugin]) -> None:
    """A plugin checks payloads only of types it declares itself."""
    for plugin in plugins:
        assert set(plugin.payload_schemas) <= set(plugin.source_types), plugin.name


def test_the_ui_lists_the_shipped_source_types(plugins: list[Plugin]) -> None:
    """The Send form's and the runs filter's list (producers/ui/examples.js) is the shipped plugins' set."""
    text = (ROOT / "producers" / "ui" / "examples.js").read_text(encoding="utf-8")
    listed = re.search(r"const DECLARED_SOURCE_TYPES = (\[.*?\]);", text, re.S)
    assert listed, "examples.js must define DECLARED_SOURCE_TYPES as one JSON array"
    assert json.loads(re.sub(r",\s*\]", "]", listed.group(1))) == shipped_source_types(plugins)


ROUTE_INPUTS: list[Any] = [
    {"request": {"messages": []}},
    {"request": {}, "protocol": "anthropic-messages", "externalSignals": [{"type": "t", "name": "n"}]},
    {
        "request": {},
        "externalSignals": [{"type": "t", "name": "n", "confidence": 1, "value": 0.5, "error": "x"}],
    },
    {},
    {"request": []},
    {"request": {}, "protocol": "grpc"},
    {"request": {}, "protocol": None},
    {"request": {}, "externalSignals": None},
    {"request": {}, "externalSignals": ["x"]},
    {"request": {}, "externalSignals": [{"type": " ", "name": "n"}]},
    {"request": {}, "externalSignals": [{"type": "t"}]},
    {"request": {}, "externalSignals": [{"type": "t", "name": "n", "confidence": True}]},
    {"request": {}, "externalSignals": [{"type": "t", "name": "n", "value": "0.5"}]},
    {"request": {}, "externalSignals": [{"type": "t", "name": "n", "error": 3}]},
    {
        "request": {},
        "externalSignals": [{"type": "t", "name": "n"}, {"type": " T ", "name": "n", "error": "x"}],
    },
    {"request": {}, "externalSignals": [{"type": "t", "name": "n"}, {"type": "t", "name": "N"}]},
]


@pytest.mark.parametrize("payload", ROUTE_INPUTS)
def test_the_chat_request_schema_agrees_with_the_router_input_check(payload: Any) -> None:
    """The door's chat.request model refuses exactly what the handler's validate_route_input refuses."""
    try:
        validate_route_input(payload, prefix="payload.")
        handler_ok = True
    except ValueError:
        handler_ok = False
    try:
        ChatRequestPayload.model_validate(payload)
        door_ok = True
    except ValidationError:
        door_ok = False
    assert door_ok == handler_ok


def test_the_chat_request_protocols_are_the_routers() -> None:
    """The model's protocol literal is the router's list."""
    assert ChatRequestPayload.model_json_schema()["properties"]["protocol"]["enum"] == list(PROTOCOLS)
