"""Routing cost vs parsing: facts + rules + decision for a 20-message request, against json.loads of the
same body, in the same run (also for a first-turn request that matches no rule, and for the 20-message
request with an external signal, which makes the router evaluate its decision trees); and requests/s of
POST /v1/route on one web process."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from policies.routing import load_router

CONFIG = Path(__file__).resolve().parent / "data" / "router.yaml"


def twenty_message_request() -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. Follow the repository conventions."},
        {"role": "developer", "content": "Prefer small diffs; run the tests before answering."},
    ]
    for turn in range(6):
        messages.append(
            {
                "role": "user",
                "content": f"Step {turn}: please look at module_{turn}.py and fix the failing test.",
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"module_{turn}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "def f(x):\n    return x + 1\n" * 8}
        )
    assert len(messages) == 20
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"{n} tool",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for n in ("read_file", "write_file", "run_tests", "search")
    ]
    return {"model": "auto", "messages": messages, "tools": tools, "tool_choice": "auto"}


def _block_us(fn: Callable[[], Any], inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner * 1e6


def _paired_median_us(
    first: Callable[[], Any], second: Callable[[], Any], rounds: int = 15, inner: int = 200
) -> tuple[float, float]:
    """Median µs per call of ``first`` and of ``second``, their blocks alternating round by round: this shared
    machine's speed moves within a second, and a ratio of two figures measured one after the other carries
    that move (the same json.loads measured 20 and 31 µs in two runs)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(_block_us(first, inner))
        b.append(_block_us(second, inner))
    return statistics.median(a), statistics.median(b)


def route_vs_json() -> tuple[float, float, int]:
    router = load_router(CONFIG)
    request = twenty_message_request()
    body = json.dumps(request)
    assert router.route(request)["decision"] is not None
    parse_us, route_us = _paired_median_us(lambda: json.loads(body), lambda: router.route(request))
    return route_us, parse_us, len(body)


def first_turn_request() -> dict[str, Any]:
    """A conversation's first request: instructions and one user message, no tools. It matches none of the
    config's rules (one user turn, no developer message, no tools, no image, no urgent word), so the router
    answers from its no-match entry: the fallback decision."""
    return {
        "model": "auto",
        "messages": [
            {
                "role": "system",
                "content": "You are a careful coding agent. Follow the repository conventions.",
            },
            {
                "role": "user",
                "content": "Please explain what this function does and suggest a clearer name:\n"
                + "def f(x):\n    return x + 1\n" * 8,
            },
        ],
    }


def _route_and_parse(request: dict[str, Any], external: list[dict[str, Any]]) -> tuple[float, float, int]:
    router = load_router(CONFIG)
    body = json.dumps({"request": request, "externalSignals": external} if external else request)
    router.route(request, "openai-chat", external)
    parse_us, route_us = _paired_median_us(
        lambda: json.loads(body), lambda: router.route(request, "openai-chat", external)
    )
    return route_us, parse_us, len(body)


def route_no_match_vs_json() -> tuple[float, float, int]:
    """(route_us, json_loads_us, body bytes) for :func:`first_turn_request` (the no-match fast path)."""
    request = first_turn_request()
    assert load_router(CONFIG).route(request)["decision"]["name"] == "fallback"
    return _route_and_parse(request, [])


def route_with_external_vs_json() -> tuple[float, float, int]:
    """(route_us, json_loads_us, body bytes) for the 20-message request with one external signal, which the
    decisions do not reference: the decision trees are evaluated per request instead of looked up."""
    return _route_and_parse(twenty_message_request(), [{"type": "domain", "name": "code", "confidence": 0.8}])


def http_route_rate(url: str, seconds: float = 3.0) -> float:
    import httpx

    body = {"request": twenty_message_request(), "protocol": "openai-chat"}
    with httpx.Client(base_url=url, timeout=10) as client:
        assert client.post("/v1/route", json=body).status_code == 200
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            client.post("/v1/route", json=body)
            n += 1
        return n / (time.perf_counter() - t0)
