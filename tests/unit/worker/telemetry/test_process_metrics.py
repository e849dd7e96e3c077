"""Per-process Prometheus metrics: every recorder's attributes have labels, histograms are cumulative, and
processes writing to one multiprocess directory are summed by the collector."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import generate_latest

from tests.support.prom import buckets, parse, total
from worker.settings import Settings
from worker.telemetry.instruments import INSTRUMENT_ATTRS, INSTRUMENT_DESCRIPTIONS
from worker.telemetry.plan import HandlerRuns
from worker.telemetry.process_metrics import (
    BUCKETS_MS,
    LABELS,
    OTHER_SOURCE_TYPE,
    SOURCE_TYPE_LABELS_MAX,
    ProcessMetrics,
)
from worker.telemetry.recorder import Telemetry, configure_telemetry


def _telemetry() -> tuple[Telemetry, ProcessMetrics]:
    metrics = ProcessMetrics(INSTRUMENT_DESCRIPTIONS)
    return Telemetry(TracerProvider(), None, tracing=False, metrics=metrics), metrics


def test_every_lobehub_instrument_has_labels() -> None:
    """The label table covers LobeHub's 15 instruments (and the engine's own)."""
    assert set(INSTRUMENT_ATTRS.values()) <= set(LABELS)


def test_every_recorder_lands_in_prometheus() -> None:
    """Each recorder's attributes fit its instrument's labels (a missing label would raise at flush)."""
    telemetry, metrics = _telemetry()
    telemetry.source_event(status="accepted", source_type="t", duration_ms=3, tenant="a")
    runs = HandlerRuns()
    runs.add(("h", "signal", "n", "succeeded"), 7)
    committed = {"tenant": "a", "source_type": "t", "workflow_status": "completed"}
    telemetry.event_committed(**committed, outcome="done", duration_ms=30, latency_ms=12)
    telemetry.event_committed(**committed, outcome="retry", duration_ms=20, latency_ms=None)
    telemetry.handler_runs(runs)
    telemetry.handler_runs(runs)
    telemetry.terminal(node_kind="action", node_type="n", status="done", reason="r")
    telemetry.fence_rejected(tenant="a")
    telemetry.rejected(2, tenant="a")
    telemetry.flush_measurements()
    samples = parse(generate_latest(metrics.registry).decode())
    assert total(samples, "agent_signal_events_total", tenant="a", status="accepted") == 1
    assert total(samples, "agent_signal_events_total", tenant="a", status="done") == 1
    assert total(samples, "agent_signal_events_total", tenant="a", status="retried") == 1
    assert total(samples, "agent_signal_events_total", tenant="a", status="rejected") == 2
    assert total(samples, "agent_signal_fence_rejected_total", tenant="a") == 1
    assert total(samples, "agent_signal_handler_runs_total", agent_signal_handler_id="h") == 2
    assert total(samples, "agent_signal_handler_duration_ms_sum", agent_signal_handler_id="h") == 14
    assert total(samples, "agent_signal_event_latency_ms_count", tenant="a") == 1
    assert total(samples, "agent_signal_workflow_duration_ms_sum", tenant="a") == 50
    assert total(samples, "agent_signal_workflow_runs_total", tenant="a") == 2


def test_an_attribute_without_a_label_is_refused() -> None:
    metrics = ProcessMetrics({})
    with pytest.raises(ValueError, match="no label for attribute"):
        metrics.add("agent_signal_chains_total", {"agent.signal.nope": "x"})


def test_histogram_buckets_are_cumulative() -> None:
    """The defect this replaced: empty buckets never written, so le=5 could exceed le=25."""
    metrics = ProcessMetrics({})
    metrics.observe("agent_signal_event_latency_ms", {"tenant": "a"}, [1, 1, 1, 30, 30, 9000])
    cumulative = buckets(parse(generate_latest(metrics.registry).decode()), "agent_signal_event_latency_ms")
    assert [le for le, _ in cumulative] == [*BUCKETS_MS, float("inf")]
    counts = [c for _, c in cumulative]
    assert counts == sorted(counts) and counts[-1] == 6
    assert dict(cumulative)[5.0] == 3 and dict(cumulative)[50.0] == 5


def test_minutes_of_latency_land_in_buckets_of_their_own() -> None:
    """An event's enqueue -> done spans its backlog and its retries' backoff (a minute's cap by default): past
    10 s each minute-scale value has a finite bucket, so a quantile reads it instead of a flat 10 s; the
    OpenTelemetry meter (OTLP) is given the same bounds."""
    metrics = ProcessMetrics({})
    metrics.observe("agent_signal_event_latency_ms", {"tenant": "a"}, [30_000, 120_000, 600_000])
    cumulative = dict(
        buckets(parse(generate_latest(metrics.registry).decode()), "agent_signal_event_latency_ms")
    )
    assert cumulative[10_000.0] == 0
    assert (cumulative[30_000.0], cumulative[120_000.0], cumulative[600_000.0]) == (1, 2, 3)
    reader = InMemoryMetricReader()
    telemetry = configure_telemetry(
        Settings(telemetry_enabled=True), service_name="t", metric_readers=[reader]
    )
    assert telemetry.meter_provider is not None
    telemetry.meter_provider.get_meter("t").create_histogram("h_ms").record(120_000)
    data = reader.get_metrics_data()
    assert data is not None
    [point] = [
        p
        for r in data.resource_metrics
        for sm in r.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    ]
    assert tuple(point.explicit_bounds) == BUCKETS_MS
    telemetry.shutdown()


CHILD = """
import sys
from worker.telemetry.process_metrics import process_metrics
process_metrics().add("agent_signal_events_total", {"tenant": "a", "status": "done"}, float(sys.argv[1]))
process_metrics().observe("agent_signal_event_latency_ms", {"tenant": "a"}, [float(sys.argv[1])])
"""


def test_processes_sharing_a_directory_are_summed(tmp_path: Path) -> None:
    """Two processes (as a worker's prefork children) write to one directory; the collector sums them."""
    root = Path(__file__).resolve().parents[4]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for value in ("3", "4"):
        subprocess.run([sys.executable, "-c", CHILD, value], cwd=root, env=env, check=True, timeout=60)
    reader = (
        "import os\nfrom worker.telemetry.process_metrics import exposition\nprint(exposition().decode())"
    )
    text = subprocess.run(
        [sys.executable, "-c", reader],
        cwd=root,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    samples = parse(text)
    assert total(samples, "agent_signal_events_total", tenant="a", status="done") == 7
    assert total(samples, "agent_signal_event_latency_ms_count", tenant="a") == 2


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 0.5, 1.0, 1.0001, 7, 250, 10**9, -3],
        [float("nan"), 2.0, float("inf")],
        [float("inf"), -float("inf"), 3.0],
        [2.0, float("inf"), 2.0, 0.0],
        [(i * 7919 % 1000) / 7.0 for i in range(500)] + [float(b) for b in BUCKETS_MS if b != float("inf")],
        [],
    ],
    ids=["edges of buckets", "nan and inf", "both infinities", "inf and repeats", "many", "nothing"],
)
def test_a_pre_aggregated_flush_exposes_what_observing_one_by_one_does(values: list[float]) -> None:
    """observe_many reads prometheus_client's own bucket fields: the exposition must equal the one of calling
    ``observe`` per value, bucket for bucket, count and sum (an upgrade that moves the fields fails here)."""
    from prometheus_client import CollectorRegistry, Histogram

    from worker.telemetry.process_metrics import observe_many

    texts = []
    for aggregated in (False, True):
        registry = CollectorRegistry()
        child = Histogram("agent_signal_x_ms", "x", ["k"], registry=registry, buckets=BUCKETS_MS).labels("v")
        if aggregated:
            observe_many(child, values)
        else:
            for value in values:
                child.observe(value)
        texts.append(
            "\n".join(
                line for line in generate_latest(registry).decode().splitlines() if "_created" not in line
            )
        )
    assert texts[0] == texts[1]
    assert ("agent_signal_x_ms_count" in texts[1]) and texts[1].count("_bucket{") == len(BUCKETS_MS) + (
        0 if BUCKETS_MS[-1] == float("inf") else 1
    )


def test_source_types_past_the_cap_share_one_label_value() -> None:
    """With unknown source types allowed, callers name them: past SOURCE_TYPE_LABELS_MAX a process counts the
    rest under one value, so its series stay bounded and no count is lost."""
    metrics = ProcessMetrics({})
    extra = 40
    for i in range(SOURCE_TYPE_LABELS_MAX + extra):
        metrics.add("agent_signal_source_occurrences_total", {"agent.signal.source_type": f"made.up.{i}"})
    samples = parse(generate_latest(metrics.registry).decode())
    named = {
        s.labels["agent_signal_source_type"]
        for s in samples
        if s.name == "agent_signal_source_occurrences_total"
    }
    assert len(named) == SOURCE_TYPE_LABELS_MAX + 1 and OTHER_SOURCE_TYPE in named
    assert total(samples, "agent_signal_source_occurrences_total") == SOURCE_TYPE_LABELS_MAX + extra
    assert (
        total(samples, "agent_signal_source_occurrences_total", agent_signal_source_type=OTHER_SOURCE_TYPE)
        == extra
    )


def test_the_metrics_directory_is_emptied_of_metric_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker empties its metrics directory of an earlier run's metric files (prometheus_client's names only);
    an operator's own files there, a SQLite ``app.db`` too, and the directory itself stay (it was removed whole:
    AGENT_SIGNAL_METRICS_DIR=$HOME would have lost $HOME)."""
    from worker.telemetry.process_metrics import MULTIPROC_ENV, use_multiprocess_dir

    # set, so that it is restored (removed) afterwards: use_multiprocess_dir sets it, and left set it turned every
    # later /metrics of this pytest process into the multiprocess files' frozen sums (delenv of an absent
    # variable records nothing to restore)
    monkeypatch.setenv(MULTIPROC_ENV, "")
    directory = tmp_path / "metrics"
    directory.mkdir()
    for metric_file in ("counter_123.db", "gauge_livesum_9.db", "histogram_77.db"):
        (directory / metric_file).write_bytes(b"old")
    for own in ("notes.txt", "app.db", "celerybeat-schedule.db", "counter_x.db"):
        (directory / own).write_text("keep")
    assert use_multiprocess_dir(directory) == directory
    assert sorted(p.name for p in directory.iterdir()) == [
        "app.db",
        "celerybeat-schedule.db",
        "counter_x.db",
        "notes.txt",
    ]
    assert use_multiprocess_dir(tmp_path / "new" / "dir").is_dir()  # made when missing


def test_a_metrics_directory_that_cannot_be_made_is_a_refusal_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``AGENT_SIGNAL_METRICS_DIR=/proc/xx agent-signal worker`` ended in a FileNotFoundError traceback."""
    from worker.runtime.main import run_worker
    from worker.settings import SettingsError
    from worker.telemetry.process_metrics import MULTIPROC_ENV

    monkeypatch.setenv(MULTIPROC_ENV, os.environ.get(MULTIPROC_ENV, ""))  # restored after the test
    settings = Settings(redis_url="redis://127.0.0.1:1/0", metrics_dir="/proc/agent-signal-none/x")
    with pytest.raises(SettingsError, match=r"refusing to start: AGENT_SIGNAL_METRICS_DIR \(/proc/"):
        run_worker(settings)
