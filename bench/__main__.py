"""``make bench``: runs every benchmark and prints a table of ratios against same-run baselines (each ratio the
median of its rounds' ratios, each round's baseline beside what it divides).

Sections (``--only``/``--skip`` pick them): ``pipeline`` (no-op baseline, burst and spread with telemetry on
and off, latency, round trips, RSS), ``peer`` (the same burst and spread on the one-task-per-event Celery app a
user would write instead, bench/peer_app.py, and ours as ratios to it), ``routing``, ``ingest``, ``scaling``
(1, 2 and 4 worker processes), ``scopes`` (the same workload while 100, 10,000 and 100,000 scopes exist) and
``memory`` (Redis bytes per retained event, on a private Redis) and ``redis`` (commands inside the scripts and
Redis CPU per drained burst event, on a private Redis).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from bench import (
    ingest_bench,
    memory_bench,
    peer_bench,
    pipeline_bench,
    redis_work_bench,
    routing_bench,
    scaling_bench,
    scopes_bench,
)
from bench._env import make_settings, redis_url, web

Row = tuple[str, str, str, str]


class Report:
    """What the sections add: table rows, ``--json`` figures, footnotes, and each section's wall time."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.figures: dict[str, float] = {}
        self.notes: list[str] = []
        self.times_s: dict[str, float] = {}


@dataclass(frozen=True)
class PipelineRounds:
    """Each round's figure per shape (events or tasks per second), in round order, and the peak RSS (KiB)."""

    noop: list[float]
    burst: list[float]
    burst_off: list[float]
    spread: list[float]
    spread_off: list[float]
    rss_kib: int


def paired_ratio(values: list[float], baselines: list[float]) -> float:
    """The median of each round's ratio to the baseline measured in the same round: a drift of the machine between
    rounds (this one is shared) falls on both sides of a ratio, where a ratio of the two medians can pair one
    round's figure with another round's baseline."""
    return statistics.median(v / b for v, b in zip(values, baselines, strict=True))


def paired_cost_pct(on: list[float], off: list[float]) -> float:
    """Telemetry's cost, in percent of the rate with it off: the median of each round's on/off pair."""
    return statistics.median((o - n) / o * 100 for n, o in zip(on, off, strict=True))


def pipeline_rounds(url: str, args: argparse.Namespace) -> PipelineRounds:
    """The no-op baseline, burst and spread with telemetry on and off, ``args.rounds`` times.

    Every round measures the no-op baseline too, then each shape with telemetry on and off, the order of the two
    swapped every other round (a bench audit found "on" always first, so a drift within a round fell on one
    side). The rows read rates as the medians of the rounds and ratios as the medians of each round's ratio
    (:func:`paired_ratio`): this machine is shared and one run can differ from the next by a third, so a baseline
    measured once, minutes before the rows it divides, would carry that moment into every ratio."""
    found = PipelineRounds([], [], [], [], [], 0)
    rss = 0
    burst = partial(pipeline_bench.pipeline_rate, url, args.events, scopes=pipeline_bench.BURST_SCOPES)
    spread = partial(pipeline_bench.pipeline_rate, url, args.events // 2, scopes=args.events // 2)
    for round_index in range(args.rounds):
        found.noop.append(pipeline_bench.noop_rate(url, args.events))
        on_first = round_index % 2 == 0
        for on in (True, False) if on_first else (False, True):
            rate, peak = burst() if on else burst(telemetry_enabled=False)
            (found.burst if on else found.burst_off).append(rate)
            rss = max(rss, peak)
        for on in (True, False) if on_first else (False, True):
            (found.spread if on else found.spread_off).append(
                (spread() if on else spread(telemetry_enabled=False))[0]
            )
    return PipelineRounds(found.noop, found.burst, found.burst_off, found.spread, found.spread_off, rss)


def workers_only_rounds(url: str, args: argparse.Namespace) -> tuple[list[float], list[float], list[float]]:
    """(no-op tasks/s, burst, spread events/s) per round, with the sending and the enqueue left out: each side's
    queue filled before the clock starts (:func:`pipeline_bench.prefilled_noop_rate`), rounds alternating. The
    goal rows time both end to end; the no-op's one ``send_task`` per task is slower than our batched enqueue, so
    part of their ratios is the cheaper door, and these rows show the workers alone."""
    noop_runs: list[float] = []
    burst_runs: list[float] = []
    spread_runs: list[float] = []
    for _ in range(args.rounds):
        noop_runs.append(pipeline_bench.prefilled_noop_rate(url, args.events))
        burst_runs.append(
            pipeline_bench.prefilled_pipeline_rate(url, args.events, pipeline_bench.BURST_SCOPES)
        )
        spread_runs.append(pipeline_bench.prefilled_pipeline_rate(url, args.events // 2, args.events // 2))
    return noop_runs, burst_runs, spread_runs


BURST_GOAL, SPREAD_GOAL, P99_GOAL, TELEMETRY_GOAL_PCT = 5.0, 2.0, 1.2, 5.0  # issue 29, against the no-op task


def _verdict(ok: bool) -> str:
    return "holds" if ok else "MISSED"


def _telemetry_note(on: list[float], off: list[float]) -> str:
    cost = paired_cost_pct(on, off)
    return f"telemetry costs {cost:+.1f}% (goal <= {TELEMETRY_GOAL_PCT:.0f}%): {_verdict(cost <= TELEMETRY_GOAL_PCT)}"


def pipeline_section(url: str, args: argparse.Namespace, out: Report) -> None:
    rounds = pipeline_rounds(url, args)
    noop, burst, burst_off, spread, spread_off = (
        statistics.median(runs)
        for runs in (rounds.noop, rounds.burst, rounds.burst_off, rounds.spread, rounds.spread_off)
    )
    burst_x, burst_off_x = (
        paired_ratio(rounds.burst, rounds.noop),
        paired_ratio(rounds.burst_off, rounds.noop),
    )
    spread_x, spread_off_x = (
        paired_ratio(rounds.spread, rounds.noop),
        paired_ratio(rounds.spread_off, rounds.noop),
    )
    enq_rt, work_rt = pipeline_bench.round_trips_per_event(url, 1000, scopes=10)
    out.figures.update(
        noop_tasks_per_s=noop,
        pipeline_burst_events_per_s=burst,
        pipeline_burst_telemetry_off_events_per_s=burst_off,
        pipeline_spread_events_per_s=spread,
        pipeline_spread_telemetry_off_events_per_s=spread_off,
        pipeline_burst_ratio=burst_x,
        pipeline_spread_ratio=spread_x,
        telemetry_cost_burst_pct=paired_cost_pct(rounds.burst, rounds.burst_off),
        telemetry_cost_spread_pct=paired_cost_pct(rounds.spread, rounds.spread_off),
        enqueue_round_trips_per_event=enq_rt,
        worker_round_trips_per_event=work_rt,
        worker_peak_rss_mib=rounds.rss_kib / 1024,
    )
    out.rows += [
        (
            "plain Celery no-op task",
            f"{noop:,.0f} tasks/s",
            "1.00x",
            "baseline, measured in every round; end to end: one send_task per task, timed (ours: enqueue_many)",
        ),
        (
            "pipeline, burst (8 scopes)",
            f"{burst:,.0f} events/s",
            f"{burst_x:.2f}x",
            f"goal >= {BURST_GOAL:.0f}x (issue 29): {_verdict(burst_x >= BURST_GOAL)}",
        ),
        (
            "pipeline, burst, telemetry off",
            f"{burst_off:,.0f} events/s",
            f"{burst_off_x:.2f}x",
            _telemetry_note(rounds.burst, rounds.burst_off),
        ),
        (
            "pipeline, spread (1 event/scope)",
            f"{spread:,.0f} events/s",
            f"{spread_x:.2f}x",
            f"goal >= {SPREAD_GOAL:.0f}x (issue 29): {_verdict(spread_x >= SPREAD_GOAL)}",
        ),
        (
            "pipeline, spread, telemetry off",
            f"{spread_off:,.0f} events/s",
            f"{spread_off_x:.2f}x",
            _telemetry_note(rounds.spread, rounds.spread_off),
        ),
    ]
    out.rows += workers_only_rows(url, args, out)
    out.rows += [
        ("Redis round trips / event (worker)", f"{work_rt:.2f}", "", "goal <= 6"),
        ("Redis round trips / event (enqueue)", f"{enq_rt:.3f}", "", "batched enqueue_many"),
        ("worker peak RSS (one child)", f"{rounds.rss_kib / 1024:.0f} MiB", "", ""),
    ]
    out.rows += latency_rows(url, out)


def workers_only_rows(url: str, args: argparse.Namespace, out: Report) -> list[Row]:
    """The throughput rows again with each side's queue filled first: what the workers alone do."""
    noop_runs, burst_runs, spread_runs = workers_only_rounds(url, args)
    noop, burst, spread = (statistics.median(runs) for runs in (noop_runs, burst_runs, spread_runs))
    burst_x, spread_x = paired_ratio(burst_runs, noop_runs), paired_ratio(spread_runs, noop_runs)
    out.figures.update(
        noop_workers_only_tasks_per_s=noop,
        pipeline_burst_workers_only_events_per_s=burst,
        pipeline_spread_workers_only_events_per_s=spread,
    )
    return [
        (
            "no-op task, queue filled first",
            f"{noop:,.0f} tasks/s",
            "1.00x",
            "baseline: the workers alone (the sends done before the clock starts)",
        ),
        (
            "pipeline, burst, queue filled first",
            f"{burst:,.0f} events/s",
            f"{burst_x:.2f}x",
            "the workers alone (the enqueue done before the clock starts); no goal of its own",
        ),
        (
            "pipeline, spread, queue filled first",
            f"{spread:,.0f} events/s",
            f"{spread_x:.2f}x",
            "the same, one event per scope",
        ),
    ]


LATENCY_SAMPLES = 1000  # each; the p99 is then the 10th slowest, not the 2nd of 200


def latency_rows(url: str, out: Report) -> list[Row]:
    """Enqueue -> done on an idle worker (the lease at enqueue off, the default, then on), and the no-op task's
    send -> done, measured in the same run on the same worker process, the samples taken in turn."""
    found = pipeline_bench.latencies_ms(url, LATENCY_SAMPLES)
    (noop_p50, noop_p99), (p50, p99), (g50, g99) = found.noop, found.ours, found.granted
    out.figures.update(
        latency_p50_ms=p50,
        latency_p99_ms=p99,
        noop_latency_p50_ms=noop_p50,
        noop_latency_p99_ms=noop_p99,
        leased_latency_p50_ms=g50,
        leased_latency_p99_ms=g99,
    )
    return [
        (
            "no-op task send -> done, idle worker",
            f"p50 {noop_p50:.1f} ms / p99 {noop_p99:.1f} ms",
            "1.00x",
            f"baseline (p99), {LATENCY_SAMPLES:,} samples taken in turn with the two rows below",
        ),
        (
            "enqueue -> done latency, idle worker",
            f"p50 {p50:.1f} ms / p99 {p99:.1f} ms",
            f"{p99 / noop_p99:.2f}x",
            f"p99 vs the no-op task's p99 (goal <= {P99_GOAL}x, issue 29): {_verdict(p99 / noop_p99 <= P99_GOAL)}",
        ),
        (
            "the same, lease at enqueue on",
            f"p50 {g50:.1f} ms / p99 {g99:.1f} ms",
            f"{g99 / noop_p99:.2f}x",
            f"AGENT_SIGNAL_LEASE_AT_ENQUEUE=true (off by default): {_verdict(g99 / noop_p99 <= P99_GOAL)}",
        ),
    ]


def peer_section(url: str, args: argparse.Namespace, out: Report) -> None:
    peer = peer_bench.compare_with_peer(url, args.events, rounds=args.rounds)
    out.rows += peer.rows()
    out.figures.update(peer.figures())
    out.notes += peer.notes()


def routing_section(url: str, args: argparse.Namespace, out: Report) -> None:
    route_us, parse_us, body_bytes = routing_bench.route_vs_json()
    with web(make_settings(url, router_config=str(routing_bench.CONFIG), route_record_events=False)) as base:
        route_rps = routing_bench.http_route_rate(base)
    out.figures.update(route_us=route_us, json_loads_us=parse_us, http_route_rps=route_rps)
    out.rows += [
        ("json.loads of a 20-message request", f"{parse_us:.1f} us ({body_bytes} B)", "1.00x", "baseline"),
        (
            "route it (facts + 8 rules + 6 decisions)",
            f"{route_us:.1f} us",
            f"{route_us / parse_us:.2f}x",
            "goal <= 0.5x",
        ),
        ("POST /v1/route, one web process", f"{route_rps:,.0f} requests/s", "", "sequential client"),
    ]
    no_match_us, no_match_parse_us, no_match_bytes = routing_bench.route_no_match_vs_json()
    external_us, external_parse_us, _ = routing_bench.route_with_external_vs_json()
    out.figures.update(route_no_match_us=no_match_us, route_external_signal_us=external_us)
    out.rows += [
        (
            "route a first-turn request (matches no rule)",
            f"{no_match_us:.1f} us",
            f"{no_match_us / no_match_parse_us:.2f}x",
            f"vs json.loads of its own {no_match_bytes} B body; the no-match entry",
        ),
        (
            "route the 20-message request + 1 external signal",
            f"{external_us:.1f} us",
            f"{external_us / external_parse_us:.2f}x",
            "decision trees evaluated per request",
        ),
    ]


def ingest_section(url: str, args: argparse.Namespace, out: Report) -> None:
    ingest_off, ingest_on = ingest_bench.ingest_auth_rates(url, rounds=args.rounds)
    out.figures.update(ingest_auth_off_events_per_s=ingest_off, ingest_auth_on_events_per_s=ingest_on)
    out.rows += [
        (
            "POST /v1/events, auth and quotas off (loopback)",
            f"{ingest_off:,.0f} events/s",
            "1.00x",
            "baseline, 1 event/request",
        ),
        (
            "POST /v1/events, API key + tenant bucket + quotas",
            f"{ingest_on:,.0f} events/s",
            f"{ingest_on / ingest_off:.2f}x",
            f"auth, limits and quotas cost {(ingest_off - ingest_on) / ingest_off * 100:+.1f}% (goal <= 5%)",
        ),
    ]


def scaling_section(url: str, args: argparse.Namespace, out: Report) -> None:
    scaling = scaling_bench.scaling_rates(url, args.events, rounds=args.rounds)
    out.rows += scaling.rows()
    out.figures.update(scaling.figures())
    out.notes += scaling.notes()


def scopes_section(url: str, args: argparse.Namespace, out: Report) -> None:
    growth = scopes_bench.scope_growth(url, args.events, args.scope_counts)
    out.rows += growth.rows()
    out.figures.update(growth.figures())
    out.notes += growth.notes()


def memory_section(url: str, args: argparse.Namespace, out: Report) -> None:
    events = args.memory_events
    memory = memory_bench.retained_memory(events, scopes=max(1, events // 10))  # its own Redis, not url
    out.rows += memory.rows()
    out.figures.update(memory.figures())


def redis_section(url: str, args: argparse.Namespace, out: Report) -> None:
    work = redis_work_bench.redis_work(args.redis_events)  # its own Redis, not url
    out.rows += work.rows()
    out.figures.update(work.figures())


SECTIONS: dict[str, Callable[[str, argparse.Namespace, Report], None]] = {
    "pipeline": pipeline_section,
    "peer": peer_section,
    "routing": routing_section,
    "ingest": ingest_section,
    "scaling": scaling_section,
    "scopes": scopes_section,
    "memory": memory_section,
    "redis": redis_section,
}


def scope_counts(text: str) -> tuple[int, ...]:
    """``--scope-counts``: :func:`bench.scopes_bench.parse_scope_counts`, its complaint as argparse's."""
    try:
        return scopes_bench.parse_scope_counts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "--events", type=int, default=4000, help="events (and no-op tasks) per throughput run"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds per throughput figure (median)"
    )
    parser.add_argument(
        "--memory-events",
        type=int,
        default=10_000,
        help="events retained for the memory figure, over a tenth as many scopes (default 10,000)",
    )
    parser.add_argument(
        "--redis-events",
        type=int,
        default=2000,
        help="burst events drained for the Redis work rows (commands in scripts, CPU), default 2,000",
    )
    parser.add_argument(
        "--scope-counts",
        type=scope_counts,
        default=scopes_bench.DEFAULT_SCOPE_COUNTS,
        metavar="N,N,...",
        help="the scopes rows' scope counts, rising (default 100,10000,100000); the first is the window's",
    )
    parser.add_argument(
        "--only", action="append", choices=list(SECTIONS), help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--skip",
        action="append",
        choices=list(SECTIONS),
        default=[],
        help="leave this section out (repeatable)",
    )
    return parser.parse_args(argv)


def print_table(out: Report) -> None:
    header = ("benchmark", "value", "ratio", "note")
    widths = [max(len(r[i]) for r in [*out.rows, header]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in out.rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for note in out.notes:
        print(f"* {note}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = [name for name in (args.only or SECTIONS) if name not in args.skip]
    out = Report()
    with redis_url() as url:
        print(
            f"Redis: {url.split('?')[0]}  ({pipeline_bench.WORKER_PROCESSES} worker processes unless a row "
            "says otherwise; baseline = plain Celery no-op task)",
            file=sys.stderr,
        )
        for name in chosen:
            t0 = time.perf_counter()
            SECTIONS[name](url, args, out)
            out.times_s[name] = time.perf_counter() - t0
    print_table(out)
    print(
        "section wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in out.times_s.items()), file=sys.stderr
    )
    if args.json:
        print(json.dumps(out.figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
