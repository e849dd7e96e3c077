"""bench.pipeline_bench.drain_next_in_process runs one drain_next message's loop in the bench's process: the
spread shape's counted and profiled rows drain lone events through it, as a worker does."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from bench._env import cleanup, make_settings
from bench.pipeline_bench import bench_events, drain_next_in_process
from bench.profiling import lone_phases, profile_drain
from producers import Producer
from worker.runtime.app import build_pipeline


def test_one_message_drains_lone_scopes_up_to_its_limit(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(redis_url, scopes_per_drain=3)
    producer = Producer(settings)
    try:
        producer.enqueue_many(bench_events(5, 5, "dn"))
        pipeline = build_pipeline(settings)
        assert drain_next_in_process(pipeline) == 3  # scopes_per_drain
        assert "not handed on" not in caplog.text  # the hand-on went to the app that sends nowhere
        assert producer.store.stats(producer.keys).get("done", 0) == 3
        assert drain_next_in_process(pipeline) == 2  # the rest, then nothing is ready
        assert producer.store.stats(producer.keys).get("done", 0) == 5
        assert drain_next_in_process(pipeline) == 0
    finally:
        cleanup(producer.store.client, settings.key_prefix)
        producer.close()


def test_the_spread_split_drains_every_event(redis_url: str) -> None:
    parts = profile_drain.drain_split(redis_url, 12, 1, telemetry=False, around=nullcontext, spread=True)
    assert set(parts) == {"enqueue", "enqueue redis", "drain", "drain redis"}
    assert parts["drain"] > 0  # the split raises when the loop drained fewer scopes than events


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        (
            "callgrind_drain",
            ["--small", "5", "--large", "5"],
            "--small must be at least 1 and less than --large",
        ),
        ("callgrind_drain", ["--scopes", "0"], "--scopes must be at least 1"),
        ("profile_drain", ["--events", "0"], "--events and --scopes must be at least 1"),
        ("profile_drain", ["--scopes", "0"], "--events and --scopes must be at least 1"),
        ("lone_phases", ["--events", "0"], "--events must be at least 1"),
    ],
)
def test_sizes_that_measure_nothing_are_refused(
    module: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main = __import__(f"bench.profiling.{module}", fromlist=["main"]).main
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_a_lone_events_phases_are_its_pop_its_python_and_its_commit(redis_url: str) -> None:
    """lone_phases times each lone event's two scripts (the pop that takes its lease, the commit) and the Python
    around them; a drain that called anything else, or in another order, is refused rather than misread."""
    medians = lone_phases.lone_phases(redis_url, 3)
    assert list(medians) == list(lone_phases.PHASES) and all(seconds > 0 for seconds in medians.values())
    with pytest.raises(RuntimeError, match="not POP_ACQUIRE then COMMIT"):
        lone_phases.phases([("acquire", 0.0, 1.0), ("commit", 2.0, 3.0)], 4.0)
    assert lone_phases.phases([("pop_acquire", 0.0, 1.0), ("commit", 3.0, 6.0)], 10.0) == dict(
        zip(lone_phases.PHASES, (1.0, 2.0, 3.0, 4.0), strict=True)
    )
