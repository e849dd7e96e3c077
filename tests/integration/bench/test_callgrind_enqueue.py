"""bench.profiling.callgrind_enqueue counts the door's instructions per enqueued event under a real valgrind."""

from __future__ import annotations

import shutil

import pytest

from bench._env import redis_url
from bench.profiling import callgrind_enqueue

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (apt-get install valgrind)"),
]


def test_the_door_is_counted_per_event() -> None:
    # validating, preparing and packing an event runs tens of thousands of instructions at the least. One valgrind
    # run (per_event's difference of two is arithmetic on this count): each run costs ~20 s of a core, mostly
    # Python's start-up under valgrind, which the count leaves out (instrumentation is on around the batches only)
    with redis_url() as url:
        assert callgrind_enqueue.instructions(4, url) > 4 * 20_000


@pytest.mark.parametrize("sizes", [["--small", "0"], ["--small", "9", "--large", "9"]])
def test_sizes_that_cannot_give_a_difference_are_refused(
    sizes: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        callgrind_enqueue.main(sizes)
    assert "--small must be at least 1 and less than --large" in capsys.readouterr().err
