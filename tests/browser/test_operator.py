"""The operator's console in a real browser (Debian's Chromium driven by Playwright), against real web and
worker processes: find a run by filter and open it; a dead event's payload and attempts, edited in the
dead-letter workbench and redriven to done; discard with a reason and bulk redrive by filter; send a test event
from the form, replay it as a new run, and see the Overview count it; pause a scope, see its events wait while
another scope's run finishes, cancel one, resume; the run graph fully visible at 390 px and 1280 px.

Every wait is on page content or on the API (polling), never a fixed sleep. Screenshots go to the test's temp dir
and, under `make screenshots`, to docs/screenshots/ (the README's operator's tour shows them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.test_ui import ARGS, CHROMIUM
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.integration

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs it with apt")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def page_errors() -> list[str]:
    """Uncaught page errors and Content-Security-Policy refusals seen by any page of the test."""
    return []


def _page(browser: Any, errors: list[str], width: int = 1280, height: int = 900) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(30_000)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return page


@pytest.fixture
def start_stack(make_settings: Any, start_worker: Any, start_web: Any) -> Callable[..., str]:
    """Factory: a real worker and web app on settings ``overrides``; returns the web app's URL."""

    def start(**overrides: Any) -> str:
        settings = make_settings(**overrides)
        start_worker(settings)
        _, url = start_web(settings)
        return str(url)

    return start


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    """A full-page screenshot in the test's temp dir; the README's ones also go to docs/screenshots/."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if name in README_SHOTS and os.environ.get(UPDATE_SHOTS):  # `make screenshots`: never a plain test run
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SHOTS / f"{name}.png")


def _post(url: str, event: dict[str, Any]) -> str:
    response = httpx.post(f"{url}/v1/events", json=event, timeout=10)
    assert response.status_code == 202, response.text
    return str(response.json()["results"][0]["eventId"])


def _event(url: str, event_id: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/events/{event_id}", timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _settled(url: str, event_id: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
    """Waits until the event is terminal, and checks it is ``status``."""
    record: dict[str, Any] = wait_for(
        lambda: (r := _event(url, event_id))["status"] in TERMINAL and r,
        timeout_s=timeout_s,
        interval_s=0.1,
        what=f"{event_id} to finish",
    )
    assert record["status"] == status, record
    return record


def _message(source_id: str, user: str, text: str, *, scope: str | None = None) -> dict[str, Any]:
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


def _flaky(source_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "sourceType": "test.flaky",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": payload,
    }


def _status_in(page: Any, row: str, status: str, testid: str = "run-status") -> None:
    page.wait_for_selector(f'{row} [data-testid="{testid}"]:text-is("{status}")')


def test_the_send_form_examples_are_the_example_file() -> None:
    """examples.js holds the first event of each source type in examples/events.jsonl, unchanged."""
    first: dict[str, Any] = {}
    for line in (ROOT / "examples" / "events.jsonl").read_text().splitlines():
        if line.strip():
            event = json.loads(line)
            first.setdefault(event["sourceType"], event)
    text = (ROOT / "producers" / "ui" / "examples.js").read_text()
    embedded = re.search(r"const SOURCE_EXAMPLES = (\{.*?\n\});", text, re.S)
    assert embedded, "examples.js must define SOURCE_EXAMPLES as one JSON object"
    assert json.loads(embedded.group(1)) == first


def test_find_a_run_by_filter_and_open_it(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """The Runs page lists runs newest first; the filters (type, user, status, time) narrow it, "Load more"
    follows the cursor, and a row opens the run: payload, attempts and the chain's dominant path."""
    # Given three runs of one user (each finished before the next is sent) and one of another user
    stack = start_stack()
    mine = []
    for i in range(3):
        mine.append(_post(stack, _message(f"msg_find{i}", "u_find", f"Question number {i}")))
        _settled(stack, mine[-1], "done")
    other = _post(stack, _message("msg_other", "u_other", "Something else"))
    _settled(stack, other, "done")
    page = _page(browser, page_errors)
    page.goto(f"{stack}/#/runs")
    page.wait_for_selector(f'tr[data-event-id="{other}"]')

    # When the filters are set in the form
    form = page.locator('form[aria-label="Filter runs"]')
    form.locator('[name="sourceType"]').fill("agent.user.message")
    form.locator('[name="userId"]').fill("u_find")
    form.locator('[name="status"]').select_option("done")
    form.get_by_role("button", name="Apply").click()

    # Then only that user's runs are listed, newest first, and the filters are in the address
    from playwright.sync_api import expect

    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-event-id") for i in range(3)] == mine[::-1]
    assert "userId=u_find" in page.url and "status=done" in page.url
    _shot(page, tmp_path, "runs")

    # "Load more" follows the cursor; a time range in the future matches nothing
    page.goto(f"{stack}/#/runs?userId=u_find&limit=2")
    expect(rows).to_have_count(2)
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(3)
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()
    page.goto(f"{stack}/#/runs?userId=u_find&since={int(time.time() * 1000) + 3_600_000}")
    page.wait_for_selector("text=No run matches these filters.")

    # When a row is opened
    page.goto(f"{stack}/#/runs?userId=u_find")
    page.locator(f'tr[data-event-id="{mine[1]}"] a').click()

    # Then its page shows the payload, its attempt and its chain
    page.wait_for_url(re.compile(f"#/runs/{mine[1]}$"))
    _status_in(page, "main", "done")
    expect(page.get_by_test_id("payload")).to_contain_text("Question number 1")
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_have_count(1)
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_contain_text("succeeded")
    expect(page.get_by_test_id("dominant-path")).to_contain_text("agent.user.message")
    _shot(page, tmp_path, "run-detail")
    assert page_errors == []


def test_a_dead_event_is_edited_and_redriven_to_done(
    browser: Any,
    start_stack: Callable[..., str],
    tmp_path: Path,
    redis_client: Any,
    keys: Any,
    page_errors: list[str],
) -> None:
    """A dead event's page shows its payload and both failed attempts (no dead end without a chain); in the
    workbench its payload is edited (JSON checked before sending) and redriven, and the row reaches done."""
    from playwright.sync_api import expect

    # Given an event that died after two attempts
    stack = start_stack(max_attempts=2)
    dead = _post(stack, _flaky("flaky-edit", {"note": "as sent"}))
    _settled(stack, dead, "dead")
    page = _page(browser, page_errors)

    # When it is found among the dead runs and opened
    page.goto(f"{stack}/#/runs?status=dead")
    page.locator(f'tr[data-event-id="{dead}"] a').click()

    # Then its payload, its two attempts with their error, and why there is no chain are shown
    attempts = page.locator('[data-testid="attempts"] tbody tr')
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_contain_text("flaky handler is broken")
    expect(page.get_by_test_id("payload-editor")).to_have_value(re.compile("as sent"))
    expect(page.get_by_test_id("no-chain")).to_be_visible()
    assert page.locator("text=No chain found").count() == 0
    _shot(page, tmp_path, "run-dead")

    # When its payload is edited in the dead-letter workbench (invalid JSON is refused first) and redriven
    page.goto(f"{stack}/#/dlq")
    row = page.locator(f'tr[data-event-id="{dead}"]')
    expect(row).to_contain_text("flaky handler is broken")
    row.get_by_role("button", name=f"Payload of {dead}").click()
    detail = page.locator(f'tr[data-detail-for="{dead}"]')
    editor = detail.get_by_role("textbox", name=f"Payload of {dead}")
    editor.fill('{"note": ')
    expect(detail.locator(".check")).to_contain_text("Not valid")
    expect(detail.get_by_role("button", name="Redrive with this payload")).to_be_disabled()
    editor.fill('{"note": "edited in the workbench"}')
    _shot(page, tmp_path, "dlq")
    redis_client.set(f"{keys.own}test:fixed", "1")
    detail.get_by_role("button", name="Redrive with this payload").click()

    # Then the row follows it to done, and the run used the edited payload
    _status_in(page, f'tr[data-event-id="{dead}"]', "done", "dlq-status")
    expect(row).to_contain_text("redriven with edited payload")
    _shot(page, tmp_path, "dlq-redriven")
    chain = httpx.get(f"{stack}/v1/chains/chain:flaky-edit", timeout=10).json()
    assert chain["envelope"]["source"]["payload"] == {"note": "edited in the workbench"}
    page.goto(f"{stack}/#/runs/{dead}")
    _status_in(page, "main", "done")
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_have_count(3)
    expect(page.get_by_test_id("payload")).to_contain_text("edited in the workbench")
    assert page_errors == []


def test_discard_with_a_reason_and_bulk_redrive_by_filter(
    browser: Any,
    start_stack: Callable[..., str],
    tmp_path: Path,
    redis_client: Any,
    keys: Any,
    page_errors: list[str],
) -> None:
    """One dead event is discarded with a reason (its row says so, and it is listed under Discarded with the
    reason); the others are picked by an error filter and redriven together, and each row reaches done."""
    from playwright.sync_api import expect

    stack = start_stack(max_attempts=1)
    ids = [_post(stack, _flaky(f"flaky-bulk-{i}", {"n": i})) for i in range(3)]
    for event_id in ids:
        _settled(stack, event_id, "dead")
    dropped, kept = ids[0], ids[1:]
    page = _page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    for event_id in ids:
        page.wait_for_selector(f'tr[data-event-id="{event_id}"]')

    # When one is discarded with a reason
    page.locator(f'tr[data-event-id="{dropped}"]').get_by_role("button", name=f"Payload of {dropped}").click()
    detail = page.locator(f'tr[data-detail-for="{dropped}"]')
    detail.get_by_test_id("discard-reason").fill("superseded by order 43")
    detail.get_by_role("button", name="Discard", exact=True).click()

    # Then its row says so
    _status_in(page, f'tr[data-event-id="{dropped}"]', "discarded", "dlq-status")
    expect(page.locator(f'tr[data-event-id="{dropped}"]')).to_contain_text("superseded by order 43")

    # When the others are picked by filter and redriven in bulk
    page.get_by_label("Error contains").fill("broken")
    page.get_by_label("Select every row shown").check()
    bulk = page.get_by_role("button", name="Redrive selected (2)")
    expect(bulk).to_be_enabled()
    redis_client.set(f"{keys.own}test:fixed", "1")
    bulk.click()

    # Then each row reaches done, and the discarded one is listed with its reason
    for event_id in kept:
        _status_in(page, f'tr[data-event-id="{event_id}"]', "done", "dlq-status")
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Redriven: 2")
    page.get_by_role("link", name="Discarded").click()
    row = page.locator(f'tr[data-event-id="{dropped}"]')
    expect(row.get_by_test_id("discard-reason")).to_have_text("superseded by order 43")
    _shot(page, tmp_path, "dlq-discarded")
    listed = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded"}, timeout=10).json()["events"]
    assert [(e["eventId"], e["reason"]) for e in listed] == [(dropped, "superseded by order 43")]
    assert _event(stack, dropped)["status"] == "discarded"
    assert page_errors == []


def test_send_from_the_form_then_replay_as_a_new_run(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """The Send form fills in each source type's example, refuses a payload that is not JSON, sends, and
    follows the run to done; its page replays it as a new run of the same payload; the Overview counts both
    in its by-type table and draws a chart with labelled axes."""
    from playwright.sync_api import expect

    stack = start_stack()
    page = _page(browser, page_errors)
    page.goto(f"{stack}/#/send")
    payload = page.locator('textarea[name="payload"]')
    expect(payload).to_have_value(re.compile("Going forward, I prefer concise answers."))

    # Picking another source type fills in its example; invalid JSON is refused before sending
    source_type = page.locator('input[name="sourceType"]')
    source_type.fill("bot.message.merged")
    source_type.dispatch_event("change")
    expect(payload).to_have_value(re.compile("Can someone look at build 42"))
    source_type.fill("agent.user.message")
    source_type.dispatch_event("change")
    expect(payload).to_have_value(re.compile("Going forward"))
    payload.fill("{not json")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.get_by_test_id("payload-check")).to_contain_text("not valid")
    expect(page.get_by_test_id("send-result")).to_be_empty()
    page.get_by_role("button", name="Reset to the example").click()

    # When it is sent, the run is followed to done
    page.get_by_role("button", name="Send", exact=True).click()
    _status_in(page, '[data-testid="send-result"]', "done", "sent-status")
    _shot(page, tmp_path, "send")
    sent = page.get_by_test_id("send-result").locator("a").inner_text()
    original = _event(stack, sent)
    assert original["sourceType"] == "agent.user.message" and original["userId"] == "u1"

    # When it is replayed from its page, a new run with a new sourceId and the same payload reaches done
    page.get_by_test_id("send-result").locator("a").click()
    _status_in(page, "main", "done")
    page.get_by_role("button", name="Replay as new run").click()
    page.wait_for_url(re.compile(r"#/runs/(?!" + re.escape(sent) + r"$)"))
    _status_in(page, "main", "done")
    replay = page.url.rsplit("/", 1)[1]
    record = _event(stack, replay)
    assert record["sourceId"].startswith(f"{original['sourceId']}.replay-")
    chains = [
        httpx.get(f"{stack}/v1/chains/chain:{sid}", timeout=10).json()["envelope"]["source"]
        for sid in (original["sourceId"], record["sourceId"])
    ]
    assert chains[0]["payload"] == chains[1]["payload"]

    # The Overview's by-type table counts both runs as done; its chart names its axes
    page.goto(f"{stack}/#/overview")
    row = page.locator('tr[data-source-type="agent.user.message"]')
    expect(row).to_contain_text("2")
    chart = page.locator(".chart svg")
    for label in ("events done / min", "avg latency (ms)", "time (minutes ago"):
        expect(chart).to_contain_text(label)
    _shot(page, tmp_path, "overview")
    assert page_errors == []


def test_pause_a_scope_its_events_wait_then_resume(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """A paused scope keeps its events queued while another scope's run finishes; a queued event cancelled
    there never runs; after Resume the other one reaches done. Workers show their heartbeat."""
    from playwright.sync_api import expect

    stack = start_stack()
    page = _page(browser, page_errors)
    page.goto(f"{stack}/#/scopes")
    expect(page.get_by_test_id("workers").locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("workers")).to_contain_text("alive")

    # Given a paused scope with two events in it, and an event in another scope
    page.get_by_label("Scope key").fill("topic:held")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.get_by_test_id("scopes-outcome")).to_contain_text("Paused topic:held")
    held = _post(stack, _message("msg_held", "u_scope", "Held back", scope="topic:held"))
    doomed = _post(stack, _message("msg_doomed", "u_scope", "Never runs", scope="topic:held"))
    free = _post(stack, _message("msg_free", "u_scope", "Runs at once", scope="topic:free"))

    # Then the other scope's event is done while the paused scope's wait
    _settled(stack, free, "done")
    assert _event(stack, held)["status"] == "queued"
    scope_row = page.locator('tr[data-scope-key="topic:held"]')
    expect(scope_row.get_by_test_id("scope-state").filter(has_text="paused")).to_have_count(1)
    expect(scope_row).to_contain_text("2")  # inbox depth
    _status_in(page, f'[data-testid="inflight"] tr[data-event-id="{held}"]', "queued")

    # When a queued event of the paused scope is cancelled
    page.get_by_role("button", name=f"Cancel {doomed}").click()
    expect(page.locator(f'[data-testid="inflight"] tr[data-event-id="{doomed}"]')).to_have_count(0)
    assert _event(stack, doomed)["status"] == "cancelled"
    _shot(page, tmp_path, "scopes")

    # When the scope is resumed, its waiting event runs to done and the cancelled one never runs
    scope_row.get_by_role("button", name="Resume").click()
    page.goto(f"{stack}/#/runs/{held}")
    _status_in(page, "main", "done")
    wait_for(
        lambda: all(
            s["scopeKey"] != "topic:held"
            for s in httpx.get(f"{stack}/v1/scopes", timeout=10).json()["scopes"]
        ),
        timeout_s=30,
        what="topic:held to drain",
    )
    assert _event(stack, doomed)["status"] == "cancelled"
    assert httpx.get(f"{stack}/v1/chains/chain:msg_doomed", timeout=10).status_code == 404
    assert page_errors == []


# Where the graph and its box are against the viewport; what sticks out, to say why when it does.
GEOMETRY = """() => {
  const box = document.querySelector('[data-testid="chain-graph"]');
  const svg = box.querySelector('svg');
  const inner = window.innerWidth;
  const b = box.getBoundingClientRect(), s = svg.getBoundingClientRect();
  const nodes = [...svg.querySelectorAll('.node rect')].map((r) => r.getBoundingClientRect());
  const name = (e) => `${e.tagName.toLowerCase()}.${e.getAttribute('class') || ''}#${e.id}`;
  return {
    inner, boxLeft: b.left, boxRight: b.right, svgLeft: s.left, svgRight: s.right,
    scrolls: box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX === 'auto',
    pageScrolls: document.documentElement.scrollWidth > inner + 1,
    nodes: nodes.length,
    nodesInside: nodes.every((n) => n.left >= b.left - 1 && n.right <= b.right + 1),
    dominant: svg.querySelectorAll('.node.dominant').length,
    tooWide: [...document.querySelectorAll('body *')]
      .filter((e) => e.getBoundingClientRect().right > inner + 1 ||
        (e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0 && getComputedStyle(e).overflowX === 'visible'))
      .slice(0, 5).map(name),
  };
}"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_run_graph_is_fully_visible(
    browser: Any,
    start_stack: Callable[..., str],
    tmp_path: Path,
    page_errors: list[str],
    width: int,
) -> None:
    """At phone and desktop width the chain graph fits its page (or its own box scrolls): every node can be
    seen, and the page itself never scrolls sideways."""
    stack = start_stack()
    event_id = _post(stack, _message("msg_graph", "u_graph", "Going forward, I prefer concise answers."))
    _settled(stack, event_id, "done")
    page = _page(browser, page_errors, width=width, height=900)
    page.goto(f"{stack}/#/runs/{event_id}")
    page.wait_for_selector('[data-testid="chain-graph"] svg .node')
    geometry = page.evaluate(GEOMETRY)
    shown = json.dumps(geometry)
    assert not geometry["pageScrolls"], shown
    assert geometry["boxLeft"] >= 0 and geometry["boxRight"] <= geometry["inner"], shown
    fits = geometry["svgLeft"] >= 0 and geometry["svgRight"] <= geometry["inner"] and geometry["nodesInside"]
    assert fits or geometry["scrolls"], shown
    assert geometry["nodes"] >= 5 and geometry["dominant"] >= 4, shown
    _shot(page, tmp_path, f"graph-{width}")
    assert page_errors == []
