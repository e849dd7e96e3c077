"""Routing cost vs parsing: facts + rules + decision for a 20-message request, against json.loads of the
same body, in the same run; and requests/s of POST /v1/route on one web process."""

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


def _median_us(fn: Callable[[], Any], rounds: int = 15, inner: int = 200) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner * 1e6)
    return statistics.median(samples)


def route_vs_json() -> tuple[float, float, int]:
    router = load_router(CONFIG)
    request = twenty_message_request()
    body = json.dumps(request)
    assert router.route(request)["decision"] is not None
    parse_us = _median_us(lambda: json.loads(body))
    route_us = _median_us(lambda: router.route(request))
    return route_us, parse_us, len(body)


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
