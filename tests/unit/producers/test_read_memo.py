"""GET /v1/overview's costly read is kept in proportion to its cost and read once at a time per tenant
(producers/http/read_memo.py): a read key asking a hundred times a second cannot keep Redis busy with one
tenant's half-million runs, and a small tenant's counts stay current."""

from __future__ import annotations

import threading
from collections.abc import Callable

from producers.http.read_memo import DUTY, MAX_KEEP_S, ReadMemo


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class Reads:
    """Reads that take ``took_s`` on the clock; a held one tells when it started and waits to be let go."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.done: list[int] = []
        self.started = threading.Event()
        self.go = threading.Event()

    def read(self, took_s: float, *, held: bool = False) -> Callable[[], int]:
        def run() -> int:
            if held:
                self.started.set()
                assert self.go.wait(30)
            self.clock.now_s += took_s
            self.done.append(len(self.done) + 1)
            return len(self.done)

        return run


def test_a_result_is_kept_duty_times_as_long_as_its_read_took() -> None:
    clock = Clock()
    reads, memo = Reads(clock), ReadMemo[int](clock)
    assert memo.get("t1", reads.read(0.5)) == 1
    clock.now_s += 0.5 * DUTY - 0.01
    assert memo.get("t1", reads.read(0.5)) == 1  # still fresh: no second read
    clock.now_s += 0.02
    assert memo.get("t1", reads.read(0.5)) == 2


def test_a_cheap_read_is_read_again_at_once_and_a_slow_one_kept_at_most_max_keep() -> None:
    clock = Clock()
    reads, memo = Reads(clock), ReadMemo[int](clock)
    memo.get("t1", reads.read(0.0))
    assert memo.get("t1", reads.read(0.0)) == 2  # took nothing: kept for nothing
    memo.get("t1", reads.read(MAX_KEEP_S))  # 20x that would be far longer
    clock.now_s += MAX_KEEP_S + 0.01
    assert memo.get("t1", reads.read(0.0)) == 4


def _callers(
    memo: ReadMemo[int], read: Callable[[], int], answers: list[int], n: int
) -> list[threading.Thread]:
    threads = [threading.Thread(target=lambda: answers.append(memo.get("t1", read))) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads


def test_a_tenants_first_read_is_shared_and_another_tenant_does_not_wait_for_it() -> None:
    clock = Clock()
    reads, other, memo = Reads(clock), Reads(clock), ReadMemo[int](clock)
    answers: list[int] = []
    threads = _callers(memo, reads.read(1.0, held=True), answers, 3)
    assert reads.started.wait(30)  # one caller holds t1's read now
    # t2's read runs and returns meanwhile (it would hang on a lock shared by the tenants)
    assert memo.get("t2", other.read(0.0)) == 1
    reads.go.set()
    for thread in threads:
        thread.join(30)
    assert answers == [1, 1, 1] and reads.done == [1]  # the others waited for that read and took it


def test_while_a_tenant_is_read_again_its_callers_get_the_last_result_at_once() -> None:
    clock = Clock()
    reads, memo = Reads(clock), ReadMemo[int](clock)
    assert memo.get("t1", reads.read(1.0)) == 1
    clock.now_s += DUTY + 1  # stale
    answers: list[int] = []
    [refresher] = _callers(memo, reads.read(1.0, held=True), answers, 1)
    assert reads.started.wait(30)
    # the refresh is held: these return the last result without waiting (they would hang, blocking on it)
    assert [memo.get("t1", reads.read(0.0)) for _ in range(3)] == [1, 1, 1]
    reads.go.set()
    refresher.join(30)
    assert answers == [2] and reads.done == [1, 2]


def test_a_failed_read_is_not_read_again_by_the_callers_that_waited_for_it() -> None:
    """A tenant's first read failing after 1 s: the callers that waited for it get its error, and so does anyone
    within DUTY times that, without a read each (ten callers made ten reads in a row, one after the other)."""
    clock = Clock()
    memo, tries = ReadMemo[int](clock), []
    started, go = threading.Event(), threading.Event()

    def failing() -> int:
        tries.append(1)
        started.set()
        assert go.wait(30)
        clock.now_s += 1.0
        raise ConnectionError("Redis went away")

    errors: list[str] = []

    def call() -> None:
        try:
            memo.get("t1", failing)
        except ConnectionError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=call) for _ in range(4)]
    threads[0].start()
    assert started.wait(30)
    for thread in threads[1:]:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(30)
    assert errors == ["Redis went away"] * 4 and tries == [1]
    clock.now_s += DUTY * 1.0 + 0.01  # past its window: read again
    assert memo.get("t1", lambda: 7) == 7
