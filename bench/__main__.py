"""``make bench``: runs every benchmark and prints a table of ratios against same-run baselines."""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from bench import ingest_bench, pipeline_bench, routing_bench
from bench._env import make_settings, redis_url, web


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "--events", type=int, default=4000, help="events (and no-op tasks) per throughput run"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds per throughput figure (median)"
    )
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    figures: dict[str, float] = {}
    with redis_url() as url:
        print(
            f"Redis: {url.split('?')[0]}  (2 worker processes; baseline = plain Celery no-op task)",
            file=sys.stderr,
        )
        noop = pipeline_bench.noop_rate(url, args.events)
        # Telemetry on and off alternate, and each figure is the median of its rounds: this machine is
        # shared and one run can differ from the next by a third.
        burst_runs, burst_off_runs, spread_runs, spread_off_runs, rss = [], [], [], [], 0
        for _ in range(args.rounds):
            rate, rss = pipeline_bench.pipeline_rate(url, args.events, scopes=8)
            burst_runs.append(rate)
            burst_off_runs.append(
                pipeline_bench.pipeline_rate(url, args.events, scopes=8, telemetry_enabled=False)[0]
            )
            spread_runs.append(
                pipeline_bench.pipeline_rate(url, args.events // 2, scopes=args.events // 2)[0]
            )
            spread_off_runs.append(
                pipeline_bench.pipeline_rate(
                    url, args.events // 2, scopes=args.events // 2, telemetry_enabled=False
                )[0]
            )
        burst, burst_off = statistics.median(burst_runs), statistics.median(burst_off_runs)
        spread, spread_off = statistics.median(spread_runs), statistics.median(spread_off_runs)
        p50, p99 = pipeline_bench.latency_ms(url, 200)
        enq_rt, work_rt = pipeline_bench.round_trips_per_event(url, 1000, scopes=10)
        route_us, parse_us, body_bytes = routing_bench.route_vs_json()
        with web(
            make_settings(url, router_config=str(routing_bench.CONFIG), route_record_events=False)
        ) as base:
            route_rps = routing_bench.http_route_rate(base)
        ingest_off, ingest_on = ingest_bench.ingest_auth_rates(url, rounds=args.rounds)
    figures.update(
        noop_tasks_per_s=noop,
        pipeline_burst_events_per_s=burst,
        pipeline_burst_telemetry_off_events_per_s=burst_off,
        pipeline_spread_events_per_s=spread,
        pipeline_spread_telemetry_off_events_per_s=spread_off,
        latency_p50_ms=p50,
        latency_p99_ms=p99,
        enqueue_round_trips_per_event=enq_rt,
        worker_round_trips_per_event=work_rt,
        worker_peak_rss_mib=rss / 1024,
        route_us=route_us,
        json_loads_us=parse_us,
        http_route_rps=route_rps,
        ingest_auth_off_events_per_s=ingest_off,
        ingest_auth_on_events_per_s=ingest_on,
    )
    rows.append(("plain Celery no-op task", f"{noop:,.0f} tasks/s", "1.00x", "baseline"))
    rows.append(
        (
            "pipeline, burst (8 scopes)",
            f"{burst:,.0f} events/s",
            f"{burst / noop:.2f}x",
            "goal >= 0.6x, stretch >= 1.0x",
        )
    )
    overhead = (burst_off - burst) / burst_off * 100
    rows.append(
        (
            "pipeline, burst, telemetry off",
            f"{burst_off:,.0f} events/s",
            f"{burst_off / noop:.2f}x",
            f"telemetry costs {overhead:+.1f}% (goal <= 10%)",
        )
    )
    rows.append(
        (
            "pipeline, spread (1 event/scope)",
            f"{spread:,.0f} events/s",
            f"{spread / noop:.2f}x",
            "goal >= 0.6x",
        )
    )
    rows.append(
        (
            "pipeline, spread, telemetry off",
            f"{spread_off:,.0f} events/s",
            f"{spread_off / noop:.2f}x",
            f"telemetry costs {(spread_off - spread) / spread_off * 100:+.1f}%",
        )
    )
    rows.append(("Redis round trips / event (worker)", f"{work_rt:.2f}", "", "goal <= 6"))
    rows.append(("Redis round trips / event (enqueue)", f"{enq_rt:.3f}", "", "batched enqueue_many"))
    rows.append(("enqueue -> done latency, idle worker", f"p50 {p50:.1f} ms / p99 {p99:.1f} ms", "", ""))
    rows.append(("worker peak RSS (one child)", f"{rss / 1024:.0f} MiB", "", ""))
    rows.append(
        ("json.loads of a 20-message request", f"{parse_us:.1f} us ({body_bytes} B)", "1.00x", "baseline")
    )
    rows.append(
        (
            "route it (facts + 8 rules + 6 decisions)",
            f"{route_us:.1f} us",
            f"{route_us / parse_us:.2f}x",
            "goal <= 1.0x, stretch <= 0.5x",
        )
    )
    rows.append(("POST /v1/route, one web process", f"{route_rps:,.0f} requests/s", "", "sequential client"))
    rows.append(
        (
            "POST /v1/events, auth off (loopback)",
            f"{ingest_off:,.0f} events/s",
            "1.00x",
            "baseline, 1 event/request",
        )
    )
    rows.append(
        (
            "POST /v1/events, API key + rate bucket",
            f"{ingest_on:,.0f} events/s",
            f"{ingest_on / ingest_off:.2f}x",
            f"auth costs {(ingest_off - ingest_on) / ingest_off * 100:+.1f}% (goal <= 5%)",
        )
    )
    widths = [max(len(r[i]) for r in [*rows, ("benchmark", "value", "ratio", "note")]) for i in range(4)]
    header = ("benchmark", "value", "ratio", "note")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
