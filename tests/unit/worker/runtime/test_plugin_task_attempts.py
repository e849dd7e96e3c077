"""A plugin task's attempts (worker/runtime/tasks.py), its Celery task run in this process with ``retry`` in the
test's hands: what the retry and the dead hook are given. The whole path, with a real worker and broker, is
tests/integration/outbox/test_task_dead.py; these are the cases a worker cannot be made to meet on demand: a
retry whose message cannot be sent (Celery then rejects the message, and it was gone with no dead hook), the soft
time limit (it was re-raised, acked, and the work lost), and a PermanentFailure's code in the stored error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from billiard.exceptions import SoftTimeLimitExceeded
from celery import Celery
from celery.exceptions import Reject, Retry
from redis import Redis

from worker.core.errors import PermanentFailure
from worker.keys.layout import EngineKeys
from worker.runtime import state
from worker.runtime.plugin_model import Plugin, PluginRuntime, PluginTask
from worker.runtime.tasks import TaskFailed, register_tasks
from worker.settings import Settings

NAME = "tests.attempts"
TRIES = 3


class _NoFullStore:
    def call(self, run: Callable[[], object]) -> object:
        return run()


@pytest.fixture(autouse=True)
def worker_process(redis_client: Redis, prefix: str) -> Iterator[None]:
    """The process a task's wrapper reads: a pipeline whose full-store wait just runs, whose store counts runs in
    the test's Redis, and the settings' attempts."""
    settings = Settings(max_attempts=TRIES, retry_base_ms=1, retry_cap_ms=2)
    pipeline: Any = SimpleNamespace(
        ctx=SimpleNamespace(full_wait=lambda _what: _NoFullStore()),
        keys=EngineKeys(prefix),
        store=SimpleNamespace(client=redis_client),
    )
    runtime: Any = SimpleNamespace(settings=settings)
    with state.installed(lambda: state.WorkerProcess(pipeline, None, runtime)):  # type: ignore[arg-type]
        yield


def _task(body: Callable[[], None], buried: list[str]) -> Any:
    """The Celery task of a PluginTask running ``body``, whose dead hook appends its error to ``buried``."""

    def run(_runtime: PluginRuntime, _payload: dict[str, Any]) -> None:
        body()

    def dead(_runtime: PluginRuntime, _payload: dict[str, Any], error: str) -> None:
        buried.append(error)

    app = Celery("attempts", set_as_current=False)
    register_tasks(app, "q", [Plugin("tests", tasks=[PluginTask(NAME, run, dead=dead)])])
    return app.tasks[NAME]


def _attempt(task: Any, attempt: int, task_id: str | None = None) -> None:
    """Run ``task`` as its ``attempt``-th delivery by Celery's count (``task_id``: its message's id)."""
    task.push_request(retries=attempt - 1, id=task_id)
    try:
        task.run({"text": "x"})
    finally:
        task.pop_request()


def _fails() -> None:
    raise RuntimeError("cannot handle x")


def test_a_failed_attempt_before_the_last_is_retried_after_a_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    buried: list[str] = []
    task = _task(_fails, buried)
    asked: list[dict[str, Any]] = []

    def retry(**options: Any) -> Retry:
        asked.append(options)
        return Retry()

    monkeypatch.setattr(task, "retry", retry)
    with pytest.raises(Retry):
        _attempt(task, 1)
    (options,) = asked
    assert (
        0 <= options["countdown"] <= 0.001 and options["argsrepr"] == "(hidden)" and options["throw"] is False
    )
    assert buried == []


def test_a_retry_that_cannot_be_sent_buries_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery raises Reject(requeue=False) when the retry's message is refused (a broker at maxmemory): the message
    is deleted, so the dead hook is called now."""
    buried: list[str] = []
    task = _task(_fails, buried)

    def retry(**_options: Any) -> Retry:
        raise Reject(OSError("OOM command not allowed"), requeue=False)

    monkeypatch.setattr(task, "retry", retry)
    with pytest.raises(TaskFailed):
        _attempt(task, 1)
    assert buried == [f"{NAME} failed: RuntimeError; its retry could not be sent (after 1 attempt)"]


def test_the_soft_time_limit_is_a_failed_attempt() -> None:
    buried: list[str] = []

    def slow() -> None:
        raise SoftTimeLimitExceeded()

    with pytest.raises(TaskFailed):
        _attempt(_task(slow, buried), TRIES)
    assert buried == [f"{NAME} failed: SoftTimeLimitExceeded (after {TRIES} attempts)"]


def test_a_permanent_failure_is_not_tried_again_and_keeps_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    buried: list[str] = []

    def refused() -> None:
        raise PermanentFailure("no attempt changes this", code="NO_EMITTER")

    task = _task(refused, buried)
    monkeypatch.setattr(task, "retry", lambda **_options: pytest.fail("a permanent failure was retried"))
    with pytest.raises(TaskFailed):
        _attempt(task, 1)
    assert buried == [f"{NAME} failed: PermanentFailure NO_EMITTER (after 1 attempt)"]


def test_a_run_that_succeeds_is_not_buried() -> None:
    buried: list[str] = []
    _attempt(_task(lambda: None, buried), TRIES)
    assert buried == []


def test_runs_are_counted_by_the_message_whatever_celery_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A redelivery after the child was killed mid-run (the hard time limit, the OOM killer) comes with Celery's
    retry count unchanged: the runs are counted by the message's id, so the third delivery of a message Celery counts
    as a first attempt is the last one, and is buried instead of retried."""
    buried: list[str] = []
    task = _task(_fails, buried)
    monkeypatch.setattr(task, "retry", lambda **_options: Retry())
    for _ in range(TRIES - 1):
        with pytest.raises(Retry):
            _attempt(task, 1, task_id="msg-1")
    with pytest.raises(TaskFailed):
        _attempt(task, 1, task_id="msg-1")
    assert buried == [f"{NAME} failed: RuntimeError (after {TRIES} attempts)"]


def test_a_delivery_past_the_last_attempt_buries_the_work_without_running_it(
    redis_client: Redis, prefix: str
) -> None:
    """The last attempt's child was killed mid-run, and its message comes again: the work is buried, not run (it
    was delivered again for ever, never counted)."""
    buried: list[str] = []
    ran: list[int] = []
    redis_client.set(
        EngineKeys(prefix).task_attempts("msg-2"), TRIES
    )  # TRIES runs began; the last was killed
    _attempt(_task(lambda: ran.append(1), buried), 1, task_id="msg-2")
    assert ran == []
    assert buried == [f"{NAME} failed: its worker was lost mid-run (after {TRIES} attempts)"]


def test_the_run_count_goes_when_the_work_ends(redis_client: Redis, prefix: str) -> None:
    """A review: every message left its count for 7 days in a store that evicts nothing, and a message whose last,
    successful run lost its ack came back past the last attempt and was buried as failed. The count is deleted
    once the work is done or buried: a redelivery after success runs again (at least once), from 1."""
    count = EngineKeys(prefix).task_attempts
    redis_client.set(count("msg-3"), 1)
    _attempt(_task(lambda: None, []), 2, task_id="msg-3")
    assert redis_client.exists(count("msg-3")) == 0
    buried: list[str] = []
    with pytest.raises(TaskFailed):
        _attempt(_task(_fails, buried), TRIES, task_id="msg-4")
    assert len(buried) == 1 and redis_client.exists(count("msg-4")) == 0
