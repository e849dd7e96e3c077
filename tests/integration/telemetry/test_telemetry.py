"""Telemetry on a real Redis: LobeHub's instruments and spans (in-memory exporters, pipeline in process),
/metrics from real web + worker processes, and one trace from the HTTP enqueue to the action handler."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from producers import Producer
from tests.conftest import free_port, wait_for
from tests.support.prom import Sample, parse, total
from worker.drain.pipeline import Pipeline
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.telemetry.process_metrics import exposition
from worker.telemetry.recorder import Telemetry, configure_telemetry

pytestmark = pytest.mark.integration


@dataclass
class Rig:
    producer: Producer
    pipeline: Pipeline
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    telemetry: Telemetry

    def points(self, name: str) -> list[tuple[dict[str, Any], float]]:
        """(attributes, value or histogram count) for every data point of a metric."""
        self.telemetry.flush_measurements()
        data = self.metrics.get_metrics_data()
        out: list[tuple[dict[str, Any], float]] = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                assert sm.scope.name == "server-services-agent-signal"
                for metric in sm.metrics:
                    if metric.name == name:
                        for p in metric.data.data_points:
                            out.append(
                                (dict(p.attributes or {}), float(getattr(p, "value", getattr(p, "count", 0))))
                            )
        return out

    def total(self, name: str, **attrs: str) -> float:
        wanted = {f"agent.signal.{k}": v for k, v in attrs.items()}
        return sum(v for a, v in self.points(name) if wanted.items() <= a.items())

    def span_names(self) -> list[str]:
        return [s.name for s in self.spans.get_finished_spans()]


@pytest.fixture
def rig(make_settings: Any) -> Iterator[Rig]:
    settings = make_settings()
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry = configure_telemetry(
        settings, service_name="test", span_processors=[SimpleSpanProcessor(spans)], metric_readers=[metrics]
    )
    producer = Producer(settings, telemetry=telemetry)
    yield Rig(producer, build_pipeline(settings, telemetry=telemetry), spans, metrics, telemetry)
    producer.close()
    telemetry.shutdown()


def _msg(source_id: str, scope: str = "topic:t1", **payload: Any) -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": source_id,
        "scopeKey": scope,
        "payload": {"message": "hi", **payload},
    }


# Every series the happy chain feeds, each exactly once: (instrument, attributes it is read under).
HAPPY_CHAIN_SERIES: list[tuple[str, dict[str, str]]] = [
    (
        "agent_signal_source_events_total",
        {"source_event_status": "accepted", "source_type": "bot.message.merged"},
    ),
    ("agent_signal_source_occurrences_total", {"source_type": "bot.message.merged"}),
    (
        "agent_signal_signal_occurrences_total",
        {"signal_domain": "message", "signal_outcome": "received", "signal_type": "signal.message.received"},
    ),
    ("agent_signal_signal_occurrences_total", {"signal_domain": "action", "signal_outcome": "applied"}),
    ("agent_signal_action_occurrences_total", {"action_type": "action.activity.record"}),
    (
        "agent_signal_action_results_total",
        {"action_type": "action.activity.record", "result_status": "applied"},
    ),
    (
        "agent_signal_signal_action_transitions_total",
        {"action_type": "action.activity.record", "signal_type": "signal.message.received"},
    ),
    ("agent_signal_chains_total", {"final_status": "applied", "source_type": "bot.message.merged"}),
    ("agent_signal_chain_duration_ms", {"final_status": "applied"}),  # fed (LobeHub never does)
    ("agent_signal_action_duration_ms", {"result_status": "applied"}),
    (
        "agent_signal_workflow_runs_total",
        {"workflow_status": "generated", "source_type": "bot.message.merged"},
    ),
    ("agent_signal_handler_runs_total", {"handler_kind": "source", "handler_status": "ok"}),
    ("agent_signal_handler_runs_total", {"handler_kind": "action", "handler_id": "handler.activity.record"}),
    ("agent_signal_handler_duration_ms", {"handler_kind": "signal", "handler_id": "signal.activity-planner"}),
]


def _assert_happy_chain_spans(rig: Rig) -> None:
    """The chain's spans: observe with its final status, ids and five node events; the action handler's run;
    and the chain continuing the enqueue's trace."""
    names = rig.span_names()
    for name in (
        "agent_signal.source_event.generate",
        "agent_signal.handler.run",
        "agent_signal.observe",
        "agent_signal.workflow.run",
        "agent_signal.scope.drain",
    ):
        assert name in names
    observe = next(s for s in rig.spans.get_finished_spans() if s.name == "agent_signal.observe")
    assert observe.attributes is not None
    assert observe.attributes["agent.signal.final_status"] == "applied"
    assert observe.attributes["agent.signal.final_action_type"] == "action.activity.record"
    assert (
        observe.attributes["agent.signal.operation_id"] == "op-1"
        and observe.attributes["agent.signal.topic_id"] == "tpc_1"
    )
    assert [e.name for e in observe.events] == [
        "agent_signal.source",
        "agent_signal.signal",
        "agent_signal.signal",
        "agent_signal.action",
        "agent_signal.result",
    ]
    handler = next(
        s
        for s in rig.spans.get_finished_spans()
        if s.name == "agent_signal.handler.run"
        and s.attributes
        and s.attributes["agent.signal.handler_kind"] == "action"
    )
    assert (
        handler.attributes is not None
        and handler.attributes["agent.signal.handler_result_status"] == "applied"
    )
    generate = next(
        s for s in rig.spans.get_finished_spans() if s.name == "agent_signal.source_event.generate"
    )
    assert generate.context is not None and handler.context is not None
    assert generate.context.trace_id == handler.context.trace_id  # the chain continues the enqueue's trace


class TestInstruments:
    def test_happy_chain(self, rig: Rig) -> None:
        """Source, signal, action, result, transition, chain (with duration), workflow run and handler metrics."""
        rig.producer.enqueue(_msg("m1", operationId="op-1", agentId="agt_1", topicId="tpc_1"))
        rig.pipeline.drain_scope("topic:t1")
        for name, attrs in HAPPY_CHAIN_SERIES:
            assert rig.total(name, **attrs) == 1, f"{name} {attrs}"
        _assert_happy_chain_spans(rig)

    def test_failed_action(self, rig: Rig) -> None:
        """A failed result: result counter 'failed', chain final status 'failed', the retriable failure counted."""
        rig.producer.enqueue(
            {"sourceType": "test.fail-action", "sourceId": "f1", "scopeKey": "topic:t2", "payload": {}}
        )
        rig.pipeline.drain_scope("topic:t2")
        assert (
            rig.total(
                "agent_signal_action_results_total", action_type="action.test.fail", result_status="failed"
            )
            == 1
        )
        assert (
            rig.total("agent_signal_chains_total", final_status="failed", source_type="test.fail-action") == 1
        )
        assert rig.total("agent_signal_signal_occurrences_total", signal_type="signal.action.failed") == 1
        assert (
            rig.total("agent_signal_workflow_runs_total", workflow_status="generated") == 1
        )  # a failed result is not an error
        chain = rig.producer.store.get_chain(rig.producer.keys, "chain:f1")
        assert chain is not None
        record = chain["record"]
        assert record["finalStatus"] == "failed"
        assert record["conclusionChain"]["finalReason"] == "The upstream store is unavailable."
        assert record["summary"]["attemptBreakdown"]["retriableFailures"] == 1
        (run,) = chain["envelope"]["handlerRuns"]
        assert run["status"] == "failed" and run["error"] == {
            "code": "TEST_UPSTREAM_DOWN",
            "message": "The upstream store is unavailable.",
        }

    def test_handler_exception_is_an_error_run(self, rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
        """A handler that raises: handler status 'error', workflow 'error', no chain counted, span status ERROR."""
        # One attempt: the retry's full-jitter delay may draw a few ms, less than the time to the commit's take
        # of the next head on a loaded machine, and the same drain_scope would then run the event again.
        monkeypatch.setattr("worker.drain.event.backoff_ms", lambda *args, **kwargs: 60_000)
        # the test plugin's flaky source handler raises until test:fixed is set
        quoted = "PAYLOAD-TEXT my ssn 123-45-6789"  # the handler's error quotes it, as a parser's would
        rig.producer.enqueue(
            {
                "sourceType": "test.flaky",
                "sourceId": "bad",
                "scopeKey": "topic:t3",
                "payload": {"errorText": quoted},
            }
        )
        rig.pipeline.drain_scope("topic:t3")
        assert (
            rig.total("agent_signal_handler_runs_total", handler_status="error", handler_kind="source") == 1
        )
        assert rig.total("agent_signal_workflow_runs_total", workflow_status="error") == 1
        assert rig.total("agent_signal_chains_total") == 0
        failed = [
            s
            for s in rig.spans.get_finished_spans()
            if s.name == "agent_signal.handler.run" and s.status.status_code.name == "ERROR"
        ]
        assert len(failed) == 1
        # the exception as log lines show it: its type and frames, not its message (OpenTelemetry's default)
        [event] = [e for e in failed[0].events if e.name == "exception"]
        assert event.attributes is not None and event.attributes["exception.type"]
        exported = [
            (
                s.name,
                dict(s.attributes or {}),
                s.status.description,
                [dict(e.attributes or {}) for e in s.events],
            )
            for s in rig.spans.get_finished_spans()
        ]
        assert quoted not in repr(exported)

    def test_duplicate(self, rig: Rig) -> None:
        """A duplicate enqueue is counted as 'duplicate' and runs no chain."""
        rig.producer.enqueue(_msg("d1", scope="topic:t4"))
        rig.producer.enqueue(_msg("d1", scope="topic:t4"))
        rig.pipeline.drain_scope("topic:t4")
        assert rig.total("agent_signal_source_events_total", source_event_status="duplicate") == 1
        assert rig.total("agent_signal_source_events_total", source_event_status="accepted") == 1
        assert rig.total("agent_signal_chains_total") == 1

    def test_contended_scope_loses_nothing(self, rig: Rig) -> None:
        """Two events on a scope whose lease is held: both accepted (no 'scope_locked'), both run after release."""
        from worker.drain.lease import ScopeLease

        lease = ScopeLease(rig.pipeline.store.scripts, ttl_s=5, renew_interval_s=1, window_s=86_400)
        rig.producer.enqueue(_msg("c1", scope="topic:t5"))
        grant, _, _ = lease.acquire(
            rig.pipeline.keys.for_tenant("default"), "topic:t5", now_ms=int(time.time() * 1000)
        )
        assert grant is not None
        rig.producer.enqueue(_msg("c2", scope="topic:t5"))
        assert rig.pipeline.drain_scope("topic:t5").next == "busy"
        lease.stop_renewing()
        assert lease.hand_off(grant)
        rig.pipeline.drain_scope("topic:t5")
        assert rig.total("agent_signal_source_events_total", source_event_status="scope_locked") == 0
        assert rig.total("agent_signal_source_events_total", source_event_status="accepted") == 2
        assert rig.total("agent_signal_chains_total") == 2


class TestProjection:
    def test_envelope_and_record(self, rig: Rig) -> None:
        """GET-shaped chain document: LobeHub's edges, handler runs, breakdowns, dominant path; durationMs set."""
        rig.producer.enqueue(_msg("p1", scope="topic:t6", operationId="op-9"))
        rig.pipeline.drain_scope("topic:t6")
        chain = rig.producer.store.get_chain(rig.producer.keys, "chain:p1")
        assert chain is not None
        envelope, record = chain["envelope"], chain["record"]
        action_id = "p1:signal:message-received:action:activity"
        assert envelope["edges"] == [
            {"from": "p1", "relation": "produced", "to": "p1:signal:message-received"},
            {"from": action_id, "relation": "produced", "to": f"{action_id}:result"},
            {"from": "p1:signal:message-received", "relation": "triggered", "to": action_id},
            {"from": action_id, "relation": "resulted-in", "to": f"{action_id}:result"},
        ]
        (run,) = envelope["handlerRuns"]
        assert (
            run["id"] == f"{action_id}:attempt:1"
            and run["status"] == "ok"
            and run["handlerType"] == "action.activity.record"
        )
        assert run["inputRefIds"] == ["p1:signal:message-received"] and run["outputRefIds"] == [
            f"{action_id}:result"
        ]
        assert envelope["traceId"] == "op-9" and envelope["version"] == 1
        assert record["id"] == "agent-signal:p1" and record["operationId"] == "op-9"
        assert record["conclusionChain"]["dominantPath"] == [
            "bot.message.merged",
            "signal.message.received",
            "signal.action.applied",
            "action.activity.record",
        ]
        assert record["conclusionChain"]["compressedSignals"] == {
            "message": {"outcomes": {"received": 1}, "total": 1},
            "action": {"outcomes": {"applied": 1}, "total": 1},
        }
        assert record["summary"]["statusBreakdown"] == {"applied": 1, "failed": 0, "skipped": 0}
        assert record["summary"]["attemptBreakdown"] == {
            "failed": 0,
            "retriableFailures": 0,
            "skipped": 0,
            "succeeded": 1,
            "total": 1,
        }
        assert record["finalStatus"] == "applied" and record["conclusionChain"]["finalReason"].startswith(
            "Counted one"
        )
        assert isinstance(record["durationMs"], float) and len(record["traceId"]) == 32


def test_a_plugin_tasks_events_count_as_follow_ups(rig: Rig) -> None:
    """The worker's emitter, which plugin tasks enqueue through (the reference agent reports
    agent.execution.completed so), counts what it stores with origin follow_up: accepted, then duplicate."""
    emitter = rig.pipeline.ctx.emitter
    assert emitter is not None

    def counted(status: str) -> float:
        rig.telemetry.flush_measurements()
        samples = parse(exposition().decode())
        return total(samples, "agent_signal_events_total", status=status, origin="follow_up")

    before = counted("accepted"), counted("duplicate")
    event = _msg("task-emitted-1", scope="topic:task-emitted")
    assert emitter.emit(event).status == "accepted"
    assert emitter.emit(event).status == "duplicate"
    assert (counted("accepted"), counted("duplicate")) == (before[0] + 1, before[1] + 1)


def test_follow_ups_count_as_admitted_with_their_origin(
    make_settings: Any, start_worker: Any, start_web: Any, keys: BucketKeys
) -> None:
    """Issue 28: on the dashboard done + dead exceeded accepted, because events the service enqueues itself were
    never counted. A chain's follow-ups count in agent_signal_events_total with ``origin="follow_up"`` (accepted,
    or duplicate when already stored); what the door admitted has ``origin="door"``; every done event was
    admitted by one or the other."""
    metrics_port = free_port()
    settings = make_settings(metrics_export_interval_ms=200)
    start_worker(
        settings.model_copy(update={"worker_metrics_port": metrics_port, "worker_metrics_host": "127.0.0.1"})
    )
    _, url = start_web(settings)
    # Given the follow-up to topic:f1 already sent through the door (so the commit finds it stored)
    counter = f"{keys.bucket_prefix}test:direct"
    direct = {"sourceType": "test.counter", "sourceId": "fan:topic:f1", "scopeKey": "topic:f1"}
    fanout = {"sourceType": "test.fanout", "sourceId": "fan", "scopeKey": "topic:fan"}
    for event in (
        {**direct, "payload": {"counterKey": counter}},
        {**fanout, "payload": {"to": ["topic:f1", "topic:f2"]}},
    ):
        answer = httpx.post(f"{url}/v1/events", json=event, timeout=10)
        assert answer.status_code == 202 and answer.json()["results"][0]["status"] == "accepted", answer.text

    # When the fan-out ran: its follow-up to topic:f2 is new, the one to topic:f1 a duplicate
    def scraped() -> list[Sample] | None:
        samples = parse(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)
        return samples if total(samples, "agent_signal_events_total", status="done") == 3 else None

    worker = wait_for(scraped, timeout_s=60, what="the fan-out and its new follow-up done")
    door = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    # Then each admission is counted once, labelled by where it came from
    follow_up = {"tenant": "default", "origin": "follow_up"}
    assert total(worker, "agent_signal_events_total", status="accepted", **follow_up) == 1
    assert total(worker, "agent_signal_events_total", status="duplicate", **follow_up) == 1
    assert total(door, "agent_signal_events_total", status="accepted", tenant="default", origin="door") == 2
    accepted = total(door, "agent_signal_events_total", status="accepted")
    accepted += total(worker, "agent_signal_events_total", status="accepted")
    assert accepted == 3 == total(worker, "agent_signal_events_total", status="done")


def test_metrics_scrape_and_one_trace(
    make_settings: Any, start_worker: Any, start_web: Any, tmp_path: Path
) -> None:
    """After a burst through web + worker, the web's /metrics shows what its door accepted and the worker's own
    metrics port what the worker did; one trace id links the HTTP enqueue span to the action handler's span."""
    trace_file = tmp_path / "spans.jsonl"
    metrics_port = free_port()
    settings = make_settings(metrics_export_interval_ms=200, trace_file=str(trace_file))
    start_worker(
        settings.model_copy(update={"worker_metrics_port": metrics_port, "worker_metrics_host": "127.0.0.1"})
    )
    _, url = start_web(settings)
    events = [_msg(f"b{i}", scope=f"topic:burst-{i % 3}") for i in range(12)]
    response = httpx.post(f"{url}/v1/events", json={"events": events}, timeout=10)
    assert response.status_code == 202
    ids = [r["eventId"] for r in response.json()["results"]]
    wait_for(
        lambda: all(httpx.get(f"{url}/v1/events/{i}").json()["status"] == "done" for i in ids),
        what="the burst",
    )
    door = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    assert (
        total(
            door,
            "agent_signal_source_events_total",
            agent_signal_source_event_status="accepted",
            agent_signal_source_type="bot.message.merged",
        )
        == 12
    )
    assert total(door, "agent_signal_events_total", tenant="default", status="accepted") == 12

    def worker_done() -> list[Sample] | None:
        samples = parse(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text)
        done = total(
            samples,
            "agent_signal_chains_total",
            agent_signal_final_status="applied",
            agent_signal_source_type="bot.message.merged",
        )
        return samples if done == 12 else None

    worker = wait_for(worker_done, timeout_s=30, what="the worker's metrics on its own port")
    assert total(worker, "agent_signal_events_total", tenant="default", status="done") == 12
    assert total(worker, "agent_signal_workflow_runs_total") == 12
    assert total(worker, "agent_signal_chain_duration_ms_count") == 12

    def spans() -> list[dict[str, Any]]:
        return (
            [json.loads(line) for line in trace_file.read_text().splitlines()] if trace_file.exists() else []
        )

    def linked() -> bool:
        all_spans = spans()
        http = [s for s in all_spans if s["name"] == "POST /v1/events"]
        handlers = [
            s
            for s in all_spans
            if s["name"] == "agent_signal.handler.run"
            and s["attributes"].get("agent.signal.handler_kind") == "action"
        ]
        return (
            bool(http)
            and len({h["traceId"] for h in handlers} & {http[0]["traceId"]}) == 1
            and len(handlers) == 12
        )

    wait_for(linked, timeout_s=30, what="spans in the trace file")
    all_spans = spans()
    http = next(s for s in all_spans if s["name"] == "POST /v1/events")
    pids = {s["pid"] for s in all_spans if s["traceId"] == http["traceId"]}
    assert len(pids) == 2, "the trace crosses the web process and the worker child"


def test_development_snapshots(make_settings: Any, tmp_path: Path) -> None:
    """With AGENT_SIGNAL_ENV=development each drained event writes a snapshot and updates latest.json."""
    settings = make_settings(env="development", tracing_dir=str(tmp_path / ".agent-tracing"))
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=configure_telemetry(settings, service_name="test"))
    producer.enqueue(_msg("snap-1", scope="topic:snap", operationId="op-snap"))
    pipeline.drain_scope("topic:snap")
    files = sorted(p.name for p in (tmp_path / ".agent-tracing").iterdir())
    assert "latest.json" in files and len(files) == 2
    snapshot = json.loads((tmp_path / ".agent-tracing" / "latest.json").read_text())
    assert (
        snapshot["operationId"] == "op-snap"
        and snapshot["completionReason"] == "done"
        and snapshot["totalSteps"] == 1
    )
    (step,) = snapshot["steps"]
    assert step["context"]["phase"] == "agent_signal_workflow" and step["stepType"] == "call_tool"
    assert [e["type"] for e in step["events"]][:2] == ["agent_signal.source", "agent_signal.signal"]
    name = next(f for f in files if f != "latest.json")
    assert name.endswith(f"_{snapshot['traceId'][:12]}.json") and ":" not in name
    producer.close()
