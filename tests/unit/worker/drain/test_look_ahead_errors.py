"""worker/drain/commit.py ``with_earlier``: when settling a commit raises after its look-ahead raised, neither
error is lost, and an interrupt (a worker's shutdown) is never demoted to an ordinary error."""

from __future__ import annotations

from worker.drain.commit import with_earlier


def test_the_later_error_goes_on_with_the_look_ahead_s_as_its_cause() -> None:
    earlier, later = RuntimeError("look-ahead"), ValueError("settle")
    raised = with_earlier(later, earlier)
    assert raised is later and later.__cause__ is earlier


def test_a_later_error_with_a_cause_of_its_own_keeps_it_and_names_the_earlier_in_a_note() -> None:
    own, earlier = OSError("socket"), RuntimeError("look-ahead")
    later = ConnectionError("settle")
    later.__cause__ = own
    raised = with_earlier(later, earlier)
    assert raised is later and later.__cause__ is own
    assert later.__notes__ == ["the look-ahead had raised RuntimeError('look-ahead')"]


def test_an_interrupt_in_the_look_ahead_wins_over_an_ordinary_error() -> None:
    earlier, later = KeyboardInterrupt(), ValueError("settle")
    raised = with_earlier(later, earlier)
    assert raised is earlier and earlier.__context__ is later
