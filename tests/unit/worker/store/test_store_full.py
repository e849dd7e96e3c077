"""worker/store/server/full.py: which errors mean a full store, and how the wait backs off and ends."""

from __future__ import annotations

import threading

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError

from worker.store.server import full as store_full
from worker.store.server.full import FullStoreWait, is_store_full


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(store_full.time, "sleep", slept.append)
    return slept


def test_oom_replies_are_a_full_store_and_other_errors_are_not() -> None:
    """OutOfMemoryError and an OOM text in a script's error reply are; a connection error or WRONGTYPE is not."""
    assert is_store_full(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
    assert is_store_full(ResponseError("OOM command not allowed when used memory > 'maxmemory'. script: x"))
    assert not is_store_full(
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    )
    assert not is_store_full(RedisConnectionError("gone"))


def test_call_runs_again_after_each_full_store_and_backs_off(_no_sleep: list[float]) -> None:
    """Two refusals, then the operation's answer; the pauses double from the initial one."""
    answers: list[object] = [OutOfMemoryError("full"), OutOfMemoryError("full"), "done"]

    def operation() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert FullStoreWait("commit", budget_s=60).call(operation) == "done"
    assert _no_sleep == [store_full.BACKOFF_INITIAL_S, store_full.BACKOFF_INITIAL_S * 2]


def test_other_errors_and_a_spent_budget_or_lost_lease_are_raised() -> None:
    """A non-OOM error is raised at once; past the budget, or with the lease lost, the OOM error is raised."""

    def wrong_type() -> None:
        raise ResponseError("WRONGTYPE")

    def full() -> None:
        raise OutOfMemoryError("full")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        FullStoreWait("commit", budget_s=60).call(wrong_type)
    with pytest.raises(OutOfMemoryError):
        FullStoreWait("commit", budget_s=0).call(full)
    lost = threading.Event()
    lost.set()
    with pytest.raises(OutOfMemoryError):
        FullStoreWait("commit", budget_s=60, lost=lost).call(full)


def test_the_budget_counts_the_first_try(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try runs bare (no retry state built), but its time counts against the budget as when tenacity
    ran it: a first try that used the whole budget and found the store full ends there, with no pause and no
    second try; a quick one is tried again after a pause."""
    clock = [1000.0]
    monkeypatch.setattr(store_full.time, "monotonic", lambda: clock[0])
    calls: list[int] = []

    def slow_and_full() -> str:
        calls.append(1)
        clock[0] += 0.3  # this try takes longer than the budget
        raise OutOfMemoryError("OOM command not allowed")

    with pytest.raises(OutOfMemoryError):
        FullStoreWait("test", budget_s=0.2).call(slow_and_full)
    assert len(calls) == 1

    def full_once() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OutOfMemoryError("OOM command not allowed")
        return "stored"

    assert FullStoreWait("test", budget_s=0.2).call(full_once) == "stored"
    assert len(calls) == 3
