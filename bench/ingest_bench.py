"""Ingest through the front door, authentication, tenant limits and quotas on vs off (issues 12 and 26: they
cost <= 5%).

Two ``agent-signal web`` processes on the same Redis: one with no credential configured (the loopback default)
and the storage quotas off, one with a bootstrap key whose tenant ``bench`` sends with an ``ingest`` API key
(verified, cached, its own and its tenant's rate buckets charged in one script: the rates are set far above
what one client reaches, so the buckets are exercised but never refuse) and the storage quotas on (the
tenant's retained events and the user's stored bytes read and counted by the enqueue script). Events name one
of 16 users. A sequential client posts one event per request, the two servers alternating rounds; each figure
is the median.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import httpx

from bench._env import make_settings, web

BOOT = "bench-bootstrap-key-" + uuid.uuid4().hex

__all__ = ["ingest_auth_rates"]


def _post_for(client: httpx.Client, headers: dict[str, str], seconds: float, tag: str) -> float:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        event: dict[str, Any] = {
            "sourceType": "agent.user.message",
            "sourceId": f"{tag}-{n}",
            "scopeKey": f"topic:bench-{n % 64}",
            "userId": f"bench-user-{n % 16}",
            "payload": {"message": "hello"},
        }
        response = client.post("/v1/events", json=event, headers=headers)
        if response.status_code != 202:
            raise RuntimeError(f"ingest answered {response.status_code}: {response.text[:200]}")
        n += 1
    return n / (time.perf_counter() - t0)


def ingest_auth_rates(url: str, *, rounds: int = 3, seconds: float = 2.0) -> tuple[float, float]:
    """(events/s with auth off, events/s with auth on), medians of alternating rounds."""
    off_settings = make_settings(url, tenant_max_events=0, user_max_bytes=0, tenant_max_bytes=0)
    on_settings = make_settings(
        url, bootstrap_key=BOOT, rate_limit_per_s=1_000_000, tenant_rate_limit_per_s=1_000_000
    )
    off_runs: list[float] = []
    on_runs: list[float] = []
    with web(off_settings) as off_url, web(on_settings) as on_url:
        with (
            httpx.Client(base_url=off_url, timeout=10) as off,
            httpx.Client(base_url=on_url, timeout=10) as on,
        ):
            made = on.post(
                "/v1/keys",
                json={"tenant": "bench", "role": "ingest"},
                headers={"Authorization": f"Bearer {BOOT}"},
            )
            made.raise_for_status()
            key = {"Authorization": f"Bearer {made.json()['key']}"}
            _post_for(off, {}, 0.5, "warm-off")
            _post_for(on, key, 0.5, "warm-on")
            for r in range(rounds):
                off_runs.append(_post_for(off, {}, seconds, f"off-{r}"))
                on_runs.append(_post_for(on, key, seconds, f"on-{r}"))
    return statistics.median(off_runs), statistics.median(on_runs)
