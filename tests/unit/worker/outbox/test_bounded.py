"""A plugin's deliverer, bounded (worker/outbox/bounded.py): its answer passes through, and a call that does not
return in time is a failed attempt whose late answer is dropped."""

from __future__ import annotations

import logging
import threading

import pytest

import worker.outbox.bounded as bounded_module
from tests.conftest import wait_for
from worker.chain.outbox_records import OutboxRecord
from worker.outbox.bounded import DeliveryTimedOut, bounded


def _record() -> OutboxRecord:
    return OutboxRecord(
        id="r1", kind="hook", key="k1", payload={}, scope_key="topic:t", event_id="e1", created_at=1
    )


def test_a_call_that_returns_is_delivered_on_its_own_thread() -> None:
    seen: list[tuple[str, str]] = []
    bounded(lambda record: seen.append((record.id, threading.current_thread().name)), 30)(_record())
    assert seen == [("r1", "outbox-call-hook")]


@pytest.mark.parametrize("error", [ValueError("refused"), SystemExit(3)])
def test_what_the_deliverer_raises_is_raised_to_the_relay(error: BaseException) -> None:
    def deliver(record: OutboxRecord) -> None:
        raise error

    with pytest.raises(type(error)) as raised:
        bounded(deliver, 30)(_record())
    assert raised.value is error


def test_a_call_past_the_timeout_fails_and_its_late_answer_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release, returned = threading.Event(), threading.Event()

    def deliver(record: OutboxRecord) -> None:
        release.wait()
        returned.set()

    with pytest.raises(DeliveryTimedOut, match=r"the 'hook' deliverer did not return within 0.05 s"):
        bounded(deliver, 0.05)(_record())
    assert not returned.is_set()  # the relay went on while the call still ran
    with caplog.at_level(logging.WARNING, logger="worker.outbox.bounded"):
        release.set()
        wait_for(lambda: "its answer is dropped" in caplog.text, what="the late answer's warning")
    assert caplog.records[-1].__dict__["outboxRecord"] == "r1"


def test_a_kind_holds_at_most_its_late_calls_then_fails_without_calling(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each late call keeps its thread and connection until it ends: past MAX_LATE_CALLS of one kind, an attempt
    fails at once and starts none (a receiver that never answers cost one of each per attempt for good)."""
    monkeypatch.setattr(bounded_module, "MAX_LATE_CALLS", 2)
    release, calls = threading.Event(), []

    def deliver(record: OutboxRecord) -> None:
        calls.append(record.id)
        release.wait()

    hung = bounded(deliver, 0.05)
    for _ in range(2):
        with pytest.raises(DeliveryTimedOut, match="did not return"):
            hung(_record())
    with pytest.raises(DeliveryTimedOut, match="2 calls still running past their timeout"):
        hung(_record())
    assert len(calls) == 2  # the third attempt called nothing
    with caplog.at_level(logging.WARNING, logger="worker.outbox.bounded"):
        release.set()
        wait_for(lambda: caplog.text.count("its answer is dropped") == 2, what="both late calls to end")
    hung(_record())  # room again: called, and it returns at once now
    assert len(calls) == 3
