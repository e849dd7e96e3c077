"""What a scope's drain knows beyond its head: the fresh events queued behind it, and the walks already run for
its next run while the run before it was committing (``drain_ahead``).

A run's COMMIT takes the next head in the same script; the worker would wait for that reply before running the
next run's chains. With ``drain_ahead`` it runs them meanwhile (``commit_run``'s ``meanwhile``): the chains of
fresh events write nothing before their own commit (their lanes wait for it), exactly as the events of one run
already run before the first of them commits. What keeps this safe is the COMMIT script, not this list: every
event of a run must be the head the script itself took, under our fence, or the run ends there. The list only
decides what is worth running ahead: the walks are kept when the run before committed whole and the script
took, as the next head, the event they start with; else they are dropped (their handler runs counted) and the
events run again in the drain's next run (or its next drain's).

Each COMMIT lists the fresh events behind its new head for the next runs, after the ``peek_skip`` this drain
already knows, so each event is read once: the window is two runs long with ``drain_ahead`` (the next run's and
the one after it), one run without, and never past what the drain may still take (``max_events_per_drain``).

What it costs: a run's after-commit steps (its follow-ups' drains published, its metrics) wait for the run
ahead's chains, one run's Python; a worker killed meanwhile leaves those follow-up scopes to the reconcile
sweep, as a worker killed right after any commit does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.drain.commit import RunCommitted
from worker.drain.event import EventWork
from worker.store.records import Begun

__all__ = ["Lookahead"]


@dataclass(slots=True)
class Lookahead:
    """The fresh events known behind the head (``known``, in inbox order), the walks run ahead for the next run
    (``carried``), and whether runs go ahead at all (``enabled``)."""

    enabled: bool
    known: list[Begun] = field(default_factory=list)
    carried: list[EventWork] = field(default_factory=list)

    def take_carried(self) -> list[EventWork]:
        carried, self.carried = self.carried, []
        return carried

    def after(self, run_length: int) -> tuple[Begun | None, list[Begun]]:
        """The next head if a run of ``run_length`` events commits whole (None: not known), and the fresh events
        known behind it."""
        nxt = self.known[run_length - 1] if len(self.known) >= run_length else None
        return nxt, self.known[run_length:]

    def settle(
        self, done: RunCommitted, nxt: Begun | None, behind: list[Begun], next_run: list[EventWork]
    ) -> list[EventWork]:
        """After a commit that was told ``nxt`` and ``behind`` (its list starts after them) and ran ``next_run``
        ahead: what is known now, what is carried into the next run; returns the walks dropped."""
        head = done.head
        taken = head.begun.event_id if head is not None and head.begun is not None else None
        expected = nxt is not None and taken == nxt.event_id
        if expected and done.peek_skip == len(behind):
            self.known = behind + done.followers
        else:  # the inbox moved under us, or a refused event's own commit listed them: what it listed, from the head
            self.known = done.followers if done.peek_skip == 0 else []
        if next_run and expected and done.whole and not done.slow and not done.lost:
            # [nxt, *behind...]: the new head and the events known behind it, in order
            self.carried = next_run
            return []
        return next_run
