"""External signals in the engine: an AND of huge confidences stays finite, a signal may not stand in for one of
the config's own rules, and each is published under the key leaves match it by."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from policies.routing import InvalidRouteInput, load_router_text

CONFIG = """
routing:
  signals:
    conversation:
      - name: image_input
        feature: { type: exists, source: { type: image_content } }
    keyword:
      - name: urgent
        operator: OR
        keywords: ["urgent"]
  decisions:
    - name: vision
      priority: 100
      rules: { type: conversation, name: image_input }
      modelRefs: [ { model: vision-model } ]
    - name: both
      priority: 10
      rules: { operator: AND, conditions: [ {type: domain, name: a}, {type: domain, name: b} ] }
      modelRefs: [ { model: big } ]
    - name: quick
      priority: 5
      rules: { type: keyword, name: urgent }
      modelRefs: [ { model: fast } ]
providers: { defaults: { default_model: small } }
"""
IMAGE = {
    "model": "auto",
    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
}
HI = {"messages": [{"role": "user", "content": "hi"}]}


def test_an_and_of_huge_confidences_stays_finite() -> None:
    """Two confidences of 1e308 under an AND average to 1e308, not infinity (the library, without the door's
    0..1 check: the answer must still be JSON)."""
    external = [
        {"type": "domain", "name": "a", "confidence": 1e308},
        {"type": "domain", "name": "b", "confidence": 1e308},
    ]
    result = load_router_text(CONFIG).route(HI, "openai-chat", external)
    assert result["decision"]["name"] == "both"
    assert math.isfinite(result["decision"]["confidence"]) and result["decision"]["confidence"] == 1e308
    json.dumps(result, allow_nan=False)


def test_an_and_of_ordinary_confidences_is_their_mean() -> None:
    """The overflow guard leaves ordinary means as they were (sum / count)."""
    external = [
        {"type": "domain", "name": "a", "confidence": 0.2},
        {"type": "domain", "name": "b", "confidence": 0.7},
    ]
    decision = load_router_text(CONFIG).route(HI, "openai-chat", external)["decision"]
    assert decision["confidence"] == (0.2 + 0.7) / 2


@pytest.mark.parametrize(
    "signal",
    [
        {"type": "conversation", "name": "image_input", "error": "classifier down"},
        {"type": "Conversation", "name": "image_input", "confidence": 0.2},
        {"type": " conversation ", "name": "IMAGE_INPUT"},
        {"type": "keyword", "name": "urgent", "confidence": 0.5},
    ],
)
def test_an_external_signal_naming_a_config_rule_is_refused(signal: dict[str, Any]) -> None:
    """An external signal whose type:name is one of the config's own rules is refused, naming
    externalSignals[i].name (it published over the rule's entry while the decision still read the rule)."""
    router = load_router_text(CONFIG)
    with pytest.raises(InvalidRouteInput) as refused:
        router.route(IMAGE, "openai-chat", [{"type": "domain", "name": "a"}, signal])
    assert refused.value.field == "externalSignals[1].name"
    assert refused.value.message.startswith("externalSignals[1].name: ")


def test_an_external_signal_is_published_under_its_lower_cased_type() -> None:
    """``"type": "Domain"`` is published as ``domain:…``, the key a ``domain`` leaf matches it by: one entry."""
    result = load_router_text(CONFIG).route(
        HI, "openai-chat", [{"type": " Domain", "name": "a", "confidence": 0.3}]
    )
    assert result["signals"]["domain:a"] == {"matched": True, "confidence": 0.3}
    assert [k for k in result["signals"] if k.lower().strip().startswith("domain")] == ["domain:a"]


@pytest.mark.parametrize(
    ("first", "second", "published", "decision"),
    [
        (
            {},
            {"error": "classifier timeout"},
            {"matched": False, "confidence": 0.0, "error": "classifier timeout"},
            None,
        ),
        ({"error": "classifier timeout"}, {"confidence": 0.4}, {"matched": True, "confidence": 0.4}, "both"),
        ({"confidence": 0.9, "value": 3}, {"confidence": 0.4}, {"matched": True, "confidence": 0.4}, "both"),
    ],
)
def test_a_later_entry_replaces_an_earlier_one_entirely(
    first: dict[str, Any], second: dict[str, Any], published: dict[str, Any], decision: str | None
) -> None:
    """The library, without the door's duplicate check: the later entry of a type:name wins in the decision as
    in the published signals (an audit, finding 5: the earlier match still decided while its error was
    published), and the earlier entry's value and error do not linger."""
    external = [{"type": "domain", "name": "b"}, {"type": "domain", "name": "a", **first}]
    external.append({"type": "Domain", "name": "a", **second})
    result = load_router_text(CONFIG).route(HI, "openai-chat", external)
    assert result["signals"]["domain:a"] == published
    assert (result["decision"] or {}).get("name") == decision
