"""The Runs page and a run's detail in a real browser (Debian's Chromium, Playwright), against real web and worker
processes: find a run by filter and open it; the run graph fully visible at 390 px and 1280 px. Every wait is on
page content or the API, never a fixed sleep; screenshots go to the test's temp dir (and to docs/screenshots/
under `make screenshots`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.pages import (
    after_a_refresh,
    flaky,
    message,
    new_page,
    pause_clock,
    post,
    post_batch,
    set_hidden,
    settled,
    shot,
    status_in,
)

pytestmark = pytest.mark.integration

LIVE_MS = 2_000  # producers/ui/app.js: how often a live page refreshes


def test_find_a_run_by_filter_and_open_it(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """The Runs page lists runs newest first; the filters (type, user, status, time) narrow it, "Load more"
    follows the cursor, and a row opens the run: payload, attempts and the chain's dominant path."""
    # Given three runs of one user (each finished before the next is sent) and one of another user
    stack = start_stack()
    mine = []
    for i in range(3):
        mine.append(post(stack, message(f"msg_find{i}", "u_find", f"Question number {i}")))
        settled(stack, mine[-1], "done")
    other = post(stack, message("msg_other", "u_other", "Something else"))
    settled(stack, other, "done")
    page = new_page(browser, page_errors)
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
    shot(page, tmp_path, "runs")

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
    status_in(page, "main", "done")
    expect(page.get_by_test_id("payload")).to_contain_text("Question number 1")
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_have_count(1)
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_contain_text("succeeded")
    expect(page.get_by_test_id("dominant-path")).to_contain_text("agent.user.message")
    shot(page, tmp_path, "run-detail")
    assert page_errors == []


def test_a_runs_page_lists_the_receipts_its_run_produced(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """A feedback message's run plans a memory run; the receipt that run reports shows on the message's run
    page under "Receipts it produced" (it lands after the run itself is done, and the page picks it up)."""
    stack = start_stack()
    event_id = post(stack, message("msg_rcpt", "u_rcpt", "Going forward, I prefer concise answers."))
    settled(stack, event_id, "done")
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/runs/{event_id}")
    receipts = page.locator("section.panel", has=page.locator("h3", has_text="Receipts it produced"))
    from playwright.sync_api import expect

    expect(receipts.locator('.receipt[data-kind="memory"]')).to_have_count(1, timeout=30_000)
    expect(receipts).to_contain_text("I prefer concise answers.")
    assert page_errors == []


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
    event_id = post(stack, message("msg_graph", "u_graph", "Going forward, I prefer concise answers."))
    settled(stack, event_id, "done")
    page = new_page(browser, page_errors, width=width, height=900)
    page.goto(f"{stack}/#/runs/{event_id}")
    page.wait_for_selector('[data-testid="chain-graph"] svg .node')
    geometry = page.evaluate(GEOMETRY)
    shown = json.dumps(geometry)
    assert not geometry["pageScrolls"], shown
    assert geometry["boxLeft"] >= 0 and geometry["boxRight"] <= geometry["inner"], shown
    fits = geometry["svgLeft"] >= 0 and geometry["svgRight"] <= geometry["inner"] and geometry["nodesInside"]
    assert fits or geometry["scrolls"], shown
    assert geometry["nodes"] >= 5 and geometry["dominant"] >= 4, shown
    shot(page, tmp_path, f"graph-{width}")
    assert page_errors == []


def test_a_run_page_asks_for_a_chain_only_when_its_run_has_one(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Issue 28: a chainless dead run's page asked for its chain and the server logged a 404 on every look. Its
    record says ``hasChain: false`` and the page makes no request that fails; a done run's chain is still
    asked for and drawn."""
    from playwright.sync_api import expect

    # Given a run that died before any step was recorded, and one that finished with a chain
    stack = start_stack(max_attempts=1)
    dead = post(stack, flaky("chainless", {}))
    assert settled(stack, dead, "dead")["hasChain"] is False
    done = post(stack, message("chained-1", "u-chain", "Thanks."))
    assert settled(stack, done, "done")["hasChain"] is True
    failed: list[str] = []
    chains: list[str] = []
    page = new_page(browser, page_errors)
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("request", lambda r: chains.append(r.url) if "/v1/chains/" in r.url else None)

    # When the dead run's page has drawn (its attempts, and why there is no chain)
    page.goto(f"{stack}/#/runs/{dead}")
    expect(page.get_by_test_id("no-chain")).to_be_visible()
    expect(page.locator('[data-testid="attempts"] tbody tr')).to_have_count(1)
    # Then no request failed and none asked for its chain
    assert failed == [] and chains == [], (failed, chains)

    # When the done run's page has drawn, its chain was asked for and is shown
    page.goto(f"{stack}/#/runs/{done}")
    page.wait_for_selector('[data-testid="chain-graph"] svg .node')
    assert failed == [] and [u for u in chains if done in u], (failed, chains)
    assert page_errors == []


def _first_runs_page(url: str) -> bool:
    return "/v1/events?" in url and "cursor=" not in url


def test_pages_loaded_with_load_more_stay_through_a_refresh(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """150 queued runs of one scope share one enqueue time (one request). With 50 a page, "Load more" shows 100
    rows, and they are still 100 after the page's 2 s refresh; the next "Load more" brings the third page: every
    run once, in the API's order (enqueue time, then event id, newest first)."""
    from playwright.sync_api import expect

    # Given 150 queued runs of one scope with one enqueue time (the web app alone: nothing runs them)
    _, stack = serve_web(make_settings())
    sent = post_batch(
        stack, [message(f"msg_tie{i}", "u_tie", f"Tie {i}", scope="topic:tie") for i in range(150)]
    )
    listed = httpx.get(
        f"{stack}/v1/events", params={"scopeKey": "topic:tie", "limit": 200}, timeout=10
    ).json()
    assert len({e["enqueuedAt"] for e in listed["events"]}) == 1 and len(listed["events"]) == 150
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/runs?scopeKey=topic:tie&limit=50")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(50)

    # When a second page is loaded and the page refreshes
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(100)
    after_a_refresh(page, _first_runs_page)

    # Then the 100 rows are still there, and the next "Load more" brings the third page
    assert rows.count() == 100
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(150)
    page.get_by_role("button", name="Load more").click()  # a full page's cursor: the next page is empty
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()
    after_a_refresh(page, _first_runs_page)
    shown = [rows.nth(i).get_attribute("data-event-id") for i in range(rows.count())]
    assert shown == sorted(sent, reverse=True)
    assert page_errors == []


def test_a_refresh_reads_the_pages_below_the_first_each_fifth_time_and_nothing_while_hidden(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """With two pages loaded, a refresh reads the first page, and the second only each fifth refresh (it read every
    loaded page each 2 s); a hidden tab reads nothing, and reads at once when shown again. The page's timers run
    on Playwright's clock, paused: each refresh is one ``run_for`` of the 2 s, and each is waited for by the count
    the page keeps of its ended refreshes, so what did not happen is read from the requests sent before the next
    refresh that did."""
    from playwright.sync_api import expect

    # Given 120 queued runs of one scope, shown 50 a page, with the second page loaded
    _, stack = serve_web(make_settings())
    post_batch(
        stack, [message(f"msg_deep{i}", "u_deep", f"Deep {i}", scope="topic:deep") for i in range(120)]
    )
    page = new_page(browser, page_errors)
    pause_clock(page)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url))
    page.goto(f"{stack}/#/runs?scopeKey=topic:deep&limit=50")
    rows, live = page.locator("table.runs tbody tr"), page.get_by_test_id("runs-live")
    expect(live).to_have_attribute("data-refreshes", "1")
    expect(rows).to_have_count(50)
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(100)

    # When the page refreshes five times
    since = len(reads)
    for ended in range(2, 7):
        page.clock.run_for(LIVE_MS)
        expect(live).to_have_attribute("data-refreshes", str(ended))

    # Then it read the first page five times and the second once, and both pages are still shown
    window = [u for u in reads[since:] if "/v1/events?" in u]
    assert sum(_first_runs_page(u) for u in window) == 5 and sum("cursor=" in u for u in window) == 1, window
    expect(rows).to_have_count(100)

    # When a run arrives, a refresh that reads the first page only shows it on top, and keeps the rows below
    newest = post(stack, message("msg_deep_new", "u_deep", "Deep, newest", scope="topic:deep"))
    since = len(reads)
    page.clock.run_for(LIVE_MS)
    expect(live).to_have_attribute("data-refreshes", "7")
    assert not any("cursor=" in u for u in reads[since:]), reads[since:]
    expect(rows).to_have_count(101)
    assert rows.first.get_attribute("data-event-id") == newest

    # When the tab is hidden for three refreshes' time, then shown
    since = len(reads)
    set_hidden(page, True)
    page.clock.run_for(
        3 * LIVE_MS
    )  # a tick would have sent its read before this returns, so before this one:
    page.evaluate("() => fetch('/healthz')")
    hidden = reads[since:]
    set_hidden(page, False)
    expect(live).to_have_attribute("data-refreshes", "8")

    # Then nothing was read while it was hidden, and the page read its list when shown
    assert [u for u in hidden if "/healthz" not in u] == [], hidden
    assert any(_first_runs_page(u) for u in reads[since + len(hidden) :]), reads[since:]
    assert page_errors == []


def test_a_tab_shown_during_a_429s_wait_waits_it_out(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """A refresh answered 429 with Retry-After waits that long; a tab hidden and shown meanwhile read at once,
    ignoring it. On Playwright's paused clock: the 429's wait is 30 s of the page's time, which passes only by
    ``run_for``; nothing read between the showing and a marker request sent after it is what did not happen."""
    from playwright.sync_api import expect

    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    pause_clock(page)
    refuse = {"on": False}

    def answer(route: Any) -> None:
        if refuse["on"]:
            route.fulfill(status=429, headers={"Retry-After": "30"}, json={"error": {"code": "rate_limited",
                          "message": "slow down, says the test"}})  # fmt: skip
        else:
            route.continue_()

    page.route("**/v1/events?*", answer)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url))
    page.goto(f"{stack}/#/runs")
    live = page.get_by_test_id("runs-live")
    expect(live).to_have_attribute("data-refreshes", "1")

    # Given a refresh refused 429 with Retry-After: 30
    refuse["on"] = True
    page.clock.run_for(LIVE_MS)
    expect(page.locator("#error")).to_contain_text("slow down, says the test")

    # When the tab is hidden, then shown within those 30 s
    since = len(reads)
    set_hidden(page, True)
    set_hidden(page, False)
    page.evaluate("() => fetch('/healthz')")
    shown = reads[since:]

    # Then it read nothing at the showing, and reads once the wait is over
    assert [u for u in shown if "/healthz" not in u] == [], shown
    refuse["on"] = False
    page.clock.run_for(30_000)
    expect(live).to_have_attribute(
        "data-refreshes", "3"
    )  # counted as each begins: the refused one was the second
    assert page_errors == []


def test_the_status_filter_keeps_erased(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """#/runs?status=erased (the Overview links there) shows "erased" in the Status filter, and Apply keeps it (the
    list had no such option: Apply dropped the filter without a word)."""
    from playwright.sync_api import expect

    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/runs?status=erased")
    status = page.locator('form[aria-label="Filter runs"] [name="status"]')
    expect(status).to_have_value("erased")
    with page.expect_request(lambda r: "/v1/events?" in r.url) as read:
        page.get_by_role("button", name="Apply").click()
    assert "status=erased" in read.value.url, read.value.url
    assert "status=erased" in page.url
    assert page_errors == []


def test_find_by_id_shows_a_failed_lookup_in_place(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """The chain inspector never stays on "Loading…": a chain id naming two runs (409) lists them as links to
    their pages, and an id the API refuses (422) is answered in place."""
    from playwright.sync_api import expect

    # Given one source id sent in two scopes, both run
    stack = start_stack()
    runs = [post(stack, message("msg_twice", "u_twice", "Hello", scope=f"topic:twice-{n}")) for n in (1, 2)]
    for event_id in runs:
        settled(stack, event_id, "done")
    page = new_page(browser, page_errors)

    # When its chain id is looked up, both runs are offered, each a link to its page
    page.goto(f"{stack}/#/chains?q=chain:msg_twice")
    main = page.locator("main")
    for event_id in runs:
        expect(main.get_by_role("link", name=event_id)).to_have_attribute("href", f"#/runs/{event_id}")
    expect(main).to_contain_text("names 2")
    expect(main).not_to_contain_text("Loading")

    # When an id the API refuses is looked up, the refusal is shown where the answer goes
    page.get_by_label("Event id, source id or chain id").fill("not an id!")
    page.get_by_role("button", name="Inspect").click()
    refused = page.get_by_test_id("lookup-error")
    expect(refused).to_contain_text("“not an id!”")
    expect(refused).to_contain_text("id")  # the API's reason
    expect(main).not_to_contain_text("Loading")
    assert page_errors == []


def test_a_run_id_the_api_refuses_is_answered_once_and_not_asked_again(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """A run page for an id the API refuses (422) said so in the banner and asked again every 2 s for as long as
    it stayed open. It says so in place and stops. On Playwright's paused clock: a refresh would have sent its
    read before the marker request that follows three refreshes' time."""
    from playwright.sync_api import expect

    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    pause_clock(page)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url))
    page.goto(f"{stack}/#/runs/not%20an%20id!")
    refused = page.get_by_test_id("lookup-error")
    expect(refused).to_contain_text("“not an id!” is not a run id")
    since = len(reads)
    page.clock.run_for(3 * LIVE_MS)
    page.evaluate("() => fetch('/healthz')")
    expect(page.locator("main")).not_to_contain_text("Loading")
    assert [u for u in reads[since:] if "/healthz" not in u] == [], reads[since:]
    assert page_errors == []


def test_an_attempt_lost_with_its_worker_is_not_shown_running(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Any,
    page_errors: list[str],
) -> None:
    """An attempt whose worker died has no end; its row said Finished "running" beside the status "lost" (an
    upgrade walk, after a killed worker's event was taken over). It reads "—" now; a finished one its time."""
    from playwright.sync_api import expect

    # Given a dead event whose first attempt was lost with its worker and whose second failed
    started_ms = 1_700_000_000_000
    history = [
        {"attempt": 1, "run": 0, "startedAt": started_ms, "status": "lost"},
        {"attempt": 2, "run": 0, "startedAt": started_ms + 70_000, "status": "failed", "error": "broken"}
        | {"finishedAt": started_ms + 70_050},
    ]
    record = {"state": "dead", "scopeKey": "topic:lost", "sourceType": "test.flaky", "sourceId": "lost-1"}
    record |= {"attempts": 2, "error": "broken", "enqueuedAt": started_ms, "deadAt": started_ms + 70_050}
    event_id = "evt_" + "1" * 24
    redis_client.hset(
        tenant_keys.for_scope("topic:lost").event(event_id), mapping=record | {"history": json.dumps(history)}
    )
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)

    # When its run page has drawn
    page.goto(f"{stack}/#/runs/{event_id}")
    rows = page.locator('[data-testid="attempts"] tbody tr')
    expect(rows).to_have_count(2)

    # Then the lost attempt has no end, and is not said to be running
    expect(rows.nth(0).locator("td").nth(2)).to_have_text("—")
    expect(rows.nth(0)).to_contain_text("lost")
    expect(rows.nth(1).locator("td").nth(2)).not_to_have_text(re.compile("running|—"))
    assert page_errors == []
