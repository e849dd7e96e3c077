"""GET /v1/overview's costly read is kept in proportion to its cost and read once at a time per tenant
(producers/http/read_memo.py): a read key asking a hundred times a second cannot keep Redis busy with one
tenant's half-million runs, and a small tenant's counts stay current."""

from __future__ import annotations

import threading

from producers.http.read_memo import DUTY, MAX_KEEP_S, ReadMemo


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _costly(clock: Clock, took_s: float, reads: list[int], hold: threading.Event | None = None) -> int:
    """A read that takes ``took_s`` on ``clock`` (and waits for ``hold`` first); returns its ordinal."""
    if hold is not None:
        assert hold.wait(30)
    clock.now_s += took_s
    reads.append(len(reads) + 1)
    return len(reads)


def test_a_result_is_kept_duty_times_as_long_as_its_read_took() -> None:
    clock, reads = Clock(), []
    memo: ReadMemo[int] = ReadMemo(clock)
    assert memo.get("t1", lambda: _costly(clock, 0.5, reads)) == 1
    clock.now_s += 0.5 * DUTY - 0.01
    assert memo.get("t1", lambda: _costly(clock, 0.5, reads)) == 1  # still fresh: no second read
    clock.now_s += 0.02
    assert memo.get("t1", lambda: _costly(clock, 0.5, reads)) == 2


def test_a_cheap_read_is_read_again_at_once_and_a_slow_one_kept_at_most_max_keep() -> None:
    clock, reads = Clock(), []
    memo: ReadMemo[int] = ReadMemo(clock)
    memo.get("t1", lambda: _costly(clock, 0.0, reads))
    assert memo.get("t1", lambda: _costly(clock, 0.0, reads)) == 2  # took nothing: kept for nothing
    memo.get("t1", lambda: _costly(clock, 60.0, reads))  # 20 x 60 s would be 20 minutes
    clock.now_s += MAX_KEEP_S + 0.01
    assert memo.get("t1", lambda: _costly(clock, 0.0, reads)) == 4


def test_callers_of_one_tenant_share_one_read_and_another_tenant_does_not_wait() -> None:
    clock, reads, other = Clock(), [], []
    memo: ReadMemo[int] = ReadMemo(clock)
    hold = threading.Event()
    answers: list[int] = []
    callers = [
        threading.Thread(
            target=lambda: answers.append(memo.get("t1", lambda: _costly(clock, 1.0, reads, hold)))
        )
        for _ in range(3)
    ]
    for caller in callers:
        caller.start()
    # while t1's read is held, t2's read runs and returns (it would hang on a lock shared across tenants)
    assert memo.get("t2", lambda: _costly(clock, 0.0, other)) == 1
    hold.set()
    for caller in callers:
        caller.join(30)
    assert answers == [1, 1, 1] and reads == [1]
