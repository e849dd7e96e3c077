"""The outbox relay's deliveries in flight: up to ``size`` at once on daemon threads, one tenant at most half.

It also knows the claim each record in flight is delivered under. A claim is a deadline on Redis's clock (the
record's due time, a lease ahead); a delivery that outlasts it (a receiver that trickles its answer) finds its
record claimed again by the next pass of the same relay. That claim is this process's too: :meth:`claimed_again`
takes it over for the delivery in flight (its settle then holds), and the record is not handed out a second time
while the first delivery runs (an audit saw one run request sent four times at once, taking the tenant's slots).

Written by hand rather than with ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so a worker
asked to stop waited for ever on a receiver that never finished (:meth:`wait_idle` bounds that wait; a delivery
left running is a claim that lapses, and another relay delivers the record again: at least once).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeliveryPool"]

log = logging.getLogger(__name__)


@dataclass
class DeliveryPool:
    size: int
    _lock: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _tenants: Counter[str] = field(default_factory=Counter, init=False, repr=False)  # tenant -> in flight
    _deadlines: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # member -> its claim
    _work: queue.SimpleQueue[Callable[[], None]] = field(default_factory=queue.SimpleQueue, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False, repr=False)
    _lanes: dict[str, deque[Callable[[], None]]] = field(default_factory=dict, init=False, repr=False)

    @property
    def per_tenant(self) -> int:
        """The deliveries one tenant may have in flight at once."""
        return max(1, self.size // 2)

    def room_for(self, tenant: str) -> bool:
        """A free slot, and ``tenant`` below its half."""
        with self._lock:
            return sum(self._tenants.values()) < self.size and self._tenants[tenant] < self.per_tenant

    def claimed_again(self, member: str, deadline: int) -> bool:
        """True when ``member`` is being delivered here: its delivery now settles under this newer claim."""
        with self._lock:
            if member not in self._deadlines:
                return False
            self._deadlines[member] = deadline
            return True

    def deadline_of(self, member: str, claimed: int) -> int:
        """The claim ``member``'s delivery settles under: the newest this process took, else ``claimed``."""
        with self._lock:
            return self._deadlines.get(member, claimed)

    def submit(
        self, tenant: str, member: str, deadline: int, deliver: Callable[[], Any], *, lane: str = ""
    ) -> None:
        """Run ``deliver`` on a pool thread; the tenant's slot and the member's claim are held until it returns.
        Deliveries of one ``lane`` (a scope: its records in the order they were claimed, as a relay delivering one
        at a time kept them, so a skill's update is not handed over before its creation) run one after another."""
        with self._lock:
            self._tenants[tenant] += 1
            self._deadlines[member] = deadline
            if len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._serve, name=f"outbox-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

        def run() -> None:
            try:
                deliver()
            finally:
                with self._lock:
                    self._tenants[tenant] -= 1
                    if self._tenants[tenant] <= 0:
                        del self._tenants[tenant]
                    self._deadlines.pop(member, None)
                    self._lock.notify_all()

        with self._lock:
            waiting = self._lanes.get(lane)
            if waiting is not None:  # a delivery of this lane runs: this one follows it, on the same thread
                waiting.append(run)
                return
            self._lanes[lane] = deque()
        self._work.put(lambda: self._run_lane(lane, run))

    def _run_lane(self, lane: str, first: Callable[[], None]) -> None:
        work: Callable[[], None] | None = first
        while work is not None:
            try:
                work()
            except (
                BaseException
            ):  # a deliverer's SystemExit must not end a pool thread (or its lane) for good
                log.exception("an outbox delivery ended the way a thread does; this thread goes on")
            with self._lock:
                waiting = self._lanes[lane]
                work = waiting.popleft() if waiting else None
                if work is None:
                    del self._lanes[lane]

    def in_flight(self) -> int:
        with self._lock:
            return sum(self._tenants.values())

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no delivery is in flight, at most ``timeout_s``; False when some still are."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._tenants, timeout=timeout_s)

    def _serve(self) -> None:
        while True:
            self._work.get()()  # a lane's deliveries, each guarded (_run_lane)
