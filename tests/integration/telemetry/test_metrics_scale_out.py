"""Metrics that stay true across replicas: two web processes and two worker processes (one with two prefork
children) after a known burst. Every counter summed across the four scrapes equals what was sent, the latency
histogram is cumulative and its quantiles land within one bucket of the true ones (read from the events'
own records), the backlog gauge rises while a scope is paused and reaches 0 when drained, and every query of
the Grafana dashboard names series and labels that exist in the scraped data."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.conftest import ROOT, free_ports, wait_for
from tests.support.prom import (
    Sample,
    bucket_bounds,
    buckets,
    declared,
    histogram_quantile,
    parse,
    total,
)
from worker.keys.layout import BucketKeys
from worker.telemetry.process_metrics import BUCKETS_MS

pytestmark = pytest.mark.integration

SCOPES = 6
PER_SCOPE = 10
PAUSED = "topic:scale-0"


def _event(i: int) -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": f"m{i}",
        "scopeKey": f"topic:scale-{i % SCOPES}",
        "payload": {"message": f"hello {i}"},
    }


def _true_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def _bucket_index(value: float) -> int:
    return [*BUCKETS_MS, math.inf].index(bucket_bounds(value, BUCKETS_MS)[1])


def test_counters_histograms_and_backlog_across_replicas(
    make_settings: Any, start_worker: Any, start_web: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    settings = make_settings(metrics_export_interval_ms=200)
    worker_ports = free_ports(2)
    for port, concurrency in zip(worker_ports, (1, 2), strict=True):
        local = {"worker_metrics_port": port, "worker_metrics_host": "127.0.0.1"}
        start_worker(settings.model_copy(update=local), concurrency=concurrency)
    webs = [start_web(settings)[1], start_web(settings)[1]]

    def state() -> list[Sample]:
        return parse(httpx.get(f"{webs[0]}/metrics/state", timeout=10).text)

    assert httpx.post(f"{webs[0]}/v1/scopes/{PAUSED}/pause", timeout=10).status_code == 200
    events = [_event(i) for i in range(SCOPES * PER_SCOPE)]
    half = len(events) // 2
    ids: list[str] = []
    for url, batch in ((webs[0], events[:half]), (webs[1], events[half:])):
        reply = httpx.post(f"{url}/v1/events", json={"events": batch}, timeout=30)
        assert reply.status_code == 202, reply.text
        ids += [r["eventId"] for r in reply.json()["results"]]
    duplicates = events[:7]
    reply = httpx.post(f"{webs[1]}/v1/events", json={"events": duplicates}, timeout=30)
    assert [r["status"] for r in reply.json()["results"]] == ["duplicate"] * 7
    bad = httpx.post(f"{webs[0]}/v1/events", json={"sourceType": "bot.message.merged"}, timeout=10)
    assert bad.status_code == 422

    # The paused scope's events wait: the backlog says so (whatever the workers did with the others).
    wait_for(
        lambda: total(state(), "agent_signal_backlog_events", tenant="default") == PER_SCOPE,
        what="the backlog to hold exactly the paused scope's events",
    )
    assert httpx.get(f"{webs[1]}/v1/backlog", timeout=10).json()["eventsWaiting"] == PER_SCOPE
    assert httpx.post(f"{webs[1]}/v1/scopes/{PAUSED}/resume", timeout=10).status_code == 200
    wait_for(
        lambda: total(state(), "agent_signal_backlog_events", tenant="default") == 0,
        timeout_s=60,
        what="the backlog gauge to reach 0",
    )
    assert total(state(), "agent_signal_stuck_scopes", tenant="default") == 0

    def scrapes() -> list[str]:
        return [httpx.get(f"{u}/metrics", timeout=10).text for u in webs] + [
            httpx.get(f"http://127.0.0.1:{p}/metrics", timeout=10).text for p in worker_ports
        ]

    sent = len(events)

    def settled() -> list[Sample] | None:  # workers flush their buffered measurements within a second
        samples = parse(*scrapes())
        done = total(samples, "agent_signal_events_total", tenant="default", status="done")
        return samples if done >= sent else None

    samples = wait_for(settled, timeout_s=30, what="every done event in the workers' metrics")
    count = lambda name, **labels: total(samples, name, **labels)  # noqa: E731
    assert count("agent_signal_events_total", tenant="default", status="accepted") == sent
    assert count("agent_signal_events_total", tenant="default", status="duplicate") == len(duplicates)
    assert count("agent_signal_events_total", tenant="default", status="rejected") == 1
    assert count("agent_signal_events_total", tenant="default", status="done") == sent
    assert count("agent_signal_workflow_runs_total", tenant="default") == sent
    assert count("agent_signal_chains_total") == sent
    assert count("agent_signal_source_events_total", agent_signal_source_event_status="accepted") == sent
    assert count("agent_signal_event_latency_ms_count", tenant="default") == sent
    per_process = [total(parse(text), "agent_signal_events_total", status="done") for text in scrapes()[2:]]
    assert sum(per_process) == sent  # each worker counts only what it committed

    _check_latency_histogram(samples, redis_client, keys, ids, sent)

    texts = [*scrapes(), httpx.get(f"{webs[0]}/metrics/state", timeout=10).text]
    _check_dashboard(samples + state(), declared(*texts))


def _check_latency_histogram(
    samples: list[Sample], redis_client: Redis, keys: BucketKeys, ids: list[str], sent: int
) -> None:
    """The latency histogram against the events' own records (doneAt - enqueuedAt, the same clock): cumulative,
    counting all ``sent`` events, and each estimated quantile within one bucket of the true one."""
    pipe = redis_client.pipeline(transaction=False)
    for event_id in ids:
        pipe.hmget(keys.event(event_id), ["enqueuedAt", "doneAt"])
    latencies = [float(int(done) - int(enq)) for enq, done in pipe.execute()]
    cumulative = buckets(samples, "agent_signal_event_latency_ms", tenant="default")
    counts = [c for _, c in cumulative]
    assert counts == sorted(counts) and counts[-1] == sent
    quantiles = [histogram_quantile(q, cumulative) for q in (0.5, 0.9, 0.99)]
    assert quantiles == sorted(quantiles)
    for q, estimate in zip((0.5, 0.9, 0.99), quantiles, strict=True):
        truth = _true_quantile(latencies, q)
        assert abs(_bucket_index(estimate) - _bucket_index(truth)) <= 1, (q, estimate, truth)


def _check_dashboard(samples: list[Sample], families: set[str]) -> None:
    """Every series a dashboard query reads is declared in the scraped data and, where it has samples, has
    the labels the query groups by (a counter nothing incremented, such as fence rejections, has none)."""
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "agent-signal.json").read_text())
    labels_of: dict[str, set[str]] = {}
    for s in samples:
        labels_of.setdefault(s.name, set()).update(s.labels)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    for expr in exprs:
        names = set(re.findall(r"\b(agent_signal_[a-z_]+)\b", re.sub(r"by \([^)]*\)", "", expr)))
        assert names, expr
        for name in names:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert base in families or name in families, f"{expr}: no family {name} in the scrapes"
            if name not in labels_of:
                continue
            for group in re.findall(r"by \(([^)]*)\)", expr):
                wanted = {g.strip() for g in group.split(",")} - {"le"}
                assert wanted <= labels_of[name], f"{expr}: {name} lacks {wanted - labels_of[name]}"
