"""state.installed puts a factory in for a block and the previous one (and what it built) back after."""

from __future__ import annotations

from typing import Any

from worker.runtime import state


def _process() -> state.WorkerProcess:
    none: Any = None
    return state.WorkerProcess(none, none, none)


def test_the_previous_factory_and_its_process_come_back() -> None:
    outer, inner = _process(), _process()
    state.set_factory(lambda: outer)
    try:
        assert state.get() is outer
        with state.installed(lambda: inner):
            assert state.get() is inner
        assert state.get() is outer  # the one it had built, not a rebuild
    finally:
        state.set_factory(None)


def test_the_previous_factory_comes_back_after_an_error() -> None:
    outer = _process()
    state.set_factory(lambda: outer)
    try:
        try:
            with state.installed(lambda: _process()):
                raise KeyError("the block failed")
        except KeyError:
            pass
        assert state.get() is outer
    finally:
        state.set_factory(None)
