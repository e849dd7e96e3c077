"""What the operator's-console browser tests share: a page that records errors, screenshots, and the API calls
the tests make around the UI (send an event, read it, wait until it settles)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT, wait_for

__all__ = [
    "TERMINAL",
    "after_a_refresh",
    "event_record",
    "flaky",
    "message",
    "new_page",
    "pause_clock",
    "post",
    "post_batch",
    "set_hidden",
    "settled",
    "shot",
    "status_in",
]

SHOTS = ROOT / "docs" / "screenshots"
UPDATE_SHOTS = "UPDATE_README_SCREENSHOTS"  # set it to refresh the README's screenshots (make screenshots)
README_SHOTS = {
    "runs",
    "run-detail",
    "dlq-redriven",
    "dlq-discarded",
    "send",
    "scopes",
    "overview",
    "graph-390",
}
TERMINAL = {"done", "dead", "cancelled", "discarded"}


def new_page(browser: Any, errors: list[str], width: int = 1280, height: int = 900) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(30_000)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return page


def pause_clock(page: Any) -> None:
    """The page's timers (and Date) on Playwright's clock, paused: before ``goto``, so a live page's refreshes run
    only by ``page.clock.run_for`` (its first, at load, runs at once)."""
    # Playwright's Python reads a number as Unix seconds (ms put the page in the year 57,000)
    start_s = time.time()
    page.clock.install(time=start_s)
    page.clock.pause_at(start_s + 1)


def set_hidden(page: Any, hidden: bool) -> None:
    """The page's tab hidden or shown, as the browser says it: ``document.hidden`` and a visibilitychange."""
    page.evaluate(
        "h => { Object.defineProperty(document, 'hidden', {value: h, configurable: true}); "
        "document.dispatchEvent(new Event('visibilitychange')); }",
        hidden,
    )


def shot(page: Any, tmp_path: Path, name: str) -> None:
    """A full-page screenshot in the test's temp dir; the README's ones also go to docs/screenshots/."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if name in README_SHOTS and os.environ.get(UPDATE_SHOTS):  # `make screenshots`: never a plain test run
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SHOTS / f"{name}.png")


def post(url: str, event: dict[str, Any]) -> str:
    response = httpx.post(f"{url}/v1/events", json=event, timeout=10)
    assert response.status_code == 202, response.text
    return str(response.json()["results"][0]["eventId"])


def event_record(url: str, event_id: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/events/{event_id}", timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def settled(url: str, event_id: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
    """Waits until the event is terminal, and checks it is ``status``."""
    record: dict[str, Any] = wait_for(
        lambda: (r := event_record(url, event_id))["status"] in TERMINAL and r,
        timeout_s=timeout_s,
        interval_s=0.1,
        what=f"{event_id} to finish",
    )
    assert record["status"] == status, record
    return record


def message(source_id: str, user: str, text: str, *, scope: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": user,
        "agentId": "agt_ops",
        "payload": {"agentId": "agt_ops", "topicId": "tpc_ops", "messageId": source_id, "message": text},
    }
    if scope:
        event["scopeKey"] = scope
    return event


def flaky(source_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "sourceType": "test.flaky",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": payload,
    }


def status_in(page: Any, row: str, status: str, testid: str = "run-status") -> None:
    page.wait_for_selector(f'{row} [data-testid="{testid}"]:text-is("{status}")')


def post_batch(url: str, events: list[dict[str, Any]]) -> list[str]:
    """Sends ``events`` in one request (one enqueue time for the events of one scope); their event ids."""
    response = httpx.post(f"{url}/v1/events", json={"events": events}, timeout=30)
    assert response.status_code == 202, response.text
    return [str(r["eventId"]) for r in response.json()["results"]]


def after_a_refresh(page: Any, first_page: Callable[[str], bool]) -> None:
    """Returns once a live page has re-read and redrawn its list after this call: it waits for two more reads of
    the list's first page (``first_page(url)``). The page re-reads one refresh at a time (app.js livePoll), so
    the refresh of the first read has redrawn before the second read is sent."""
    for _ in range(2):
        with page.expect_request(lambda request: first_page(request.url), timeout=30_000):
            pass
