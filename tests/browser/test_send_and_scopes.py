"""Sending and controlling runs in a real browser: the send form's examples are the example file; send a test
event, replay it as a new run and see the Overview count it; pause a scope, see its events wait while another
scope's run finishes, cancel one, resume. Waits on page content or the API, never a fixed sleep."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.pages import (
    after_a_refresh,
    event_record,
    message,
    new_page,
    post,
    post_batch,
    settled,
    shot,
    status_in,
)
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.integration


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


def test_send_from_the_form_then_replay_as_a_new_run(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """The Send form fills in each source type's example, refuses a payload that is not JSON, sends, and
    follows the run to done; its page replays it as a new run of the same payload; the Overview counts both
    in its by-type table and draws a chart with labelled axes."""
    from playwright.sync_api import expect

    stack = start_stack()
    page = new_page(browser, page_errors)
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
    status_in(page, '[data-testid="send-result"]', "done", "sent-status")
    shot(page, tmp_path, "send")
    sent = page.get_by_test_id("send-result").locator("a").inner_text()
    original = event_record(stack, sent)
    assert original["sourceType"] == "agent.user.message" and original["userId"] == "u1"

    # When it is replayed from its page, a new run with a new sourceId and the same payload reaches done
    page.get_by_test_id("send-result").locator("a").click()
    status_in(page, "main", "done")
    page.get_by_role("button", name="Replay as new run").click()
    page.wait_for_url(re.compile(r"#/runs/(?!" + re.escape(sent) + r"$)"))
    status_in(page, "main", "done")
    replay = page.url.rsplit("/", 1)[1]
    record = event_record(stack, replay)
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
    shot(page, tmp_path, "overview")
    assert page_errors == []


def test_pause_a_scope_its_events_wait_then_resume(
    browser: Any, start_stack: Callable[..., str], tmp_path: Path, page_errors: list[str]
) -> None:
    """A paused scope keeps its events queued while another scope's run finishes; a queued event cancelled
    there never runs; after Resume the other one reaches done. Workers show their heartbeat."""
    from playwright.sync_api import expect

    stack = start_stack()
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/scopes")
    expect(page.get_by_test_id("workers").locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("workers")).to_contain_text("alive")

    # Given a paused scope with two events in it, and an event in another scope
    page.get_by_label("Scope key").fill("topic:held")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.get_by_test_id("scopes-outcome")).to_contain_text("Paused topic:held")
    held = post(stack, message("msg_held", "u_scope", "Held back", scope="topic:held"))
    doomed = post(stack, message("msg_doomed", "u_scope", "Never runs", scope="topic:held"))
    free = post(stack, message("msg_free", "u_scope", "Runs at once", scope="topic:free"))

    # Then the other scope's event is done while the paused scope's wait
    settled(stack, free, "done")
    assert event_record(stack, held)["status"] == "queued"
    scope_row = page.locator('tr[data-scope-key="topic:held"]')
    expect(scope_row.get_by_test_id("scope-state").filter(has_text="paused")).to_have_count(1)
    expect(scope_row).to_contain_text("2")  # inbox depth
    status_in(page, f'[data-testid="inflight"] tr[data-event-id="{held}"]', "queued")

    # When a queued event of the paused scope is cancelled
    page.get_by_role("button", name=f"Cancel {doomed}").click()
    expect(page.locator(f'[data-testid="inflight"] tr[data-event-id="{doomed}"]')).to_have_count(0)
    assert event_record(stack, doomed)["status"] == "cancelled"
    shot(page, tmp_path, "scopes")

    # When the scope is resumed, its waiting event runs to done and the cancelled one never runs
    scope_row.get_by_role("button", name="Resume").click()
    page.goto(f"{stack}/#/runs/{held}")
    status_in(page, "main", "done")
    wait_for(
        lambda: all(
            s["scopeKey"] != "topic:held"
            for s in httpx.get(f"{stack}/v1/scopes", timeout=10).json()["scopes"]
        ),
        timeout_s=30,
        what="topic:held to drain",
    )
    assert event_record(stack, doomed)["status"] == "cancelled"
    assert httpx.get(f"{stack}/v1/chains/chain:msg_doomed", timeout=10).status_code == 404
    assert page_errors == []


def test_ages_are_on_the_servers_clock_when_the_browsers_is_ahead(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    tenant_keys: Any,
    redis_client: Any,
    page_errors: list[str],
) -> None:
    """A laptop ten minutes ahead showed every live worker "silent" (its heartbeat ten minutes old by the browser's
    clock). Ages start from the service's now (its answers' x-server-time-ms); one a moment under 0 reads 0 ms."""
    import time

    from playwright.sync_api import expect

    from worker.core.clock import now_ms

    redis_client.hset(tenant_keys.workers, "fresh@node", now_ms())  # a heartbeat just written, once
    # alive while at most four reconcile intervals old: the suite's 0.5 s interval gave 2 s, less than a loaded
    # machine took to load the page (a worker beats every interval; this one beat once)
    _, stack = serve_web(make_settings(reconcile_interval_s=15.0))
    page = new_page(browser, page_errors)
    page.clock.install(time=time.time() + 600)  # Unix seconds (Playwright's Python); runs on from there
    page.goto(f"{stack}/#/scopes")
    workers = page.get_by_test_id("workers")
    expect(workers.locator("tbody tr")).to_have_count(1)
    expect(workers).to_contain_text("alive")
    assert re.search(r"alive (\d+ ms|\d+(\.\d)? s) ago", workers.inner_text()), workers.inner_text()
    assert page_errors == []


def test_the_overview_says_no_worker_runs_when_every_heartbeat_is_old(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    tenant_keys: Any,
    redis_client: Any,
    page_errors: list[str],
) -> None:
    """A worker killed (SIGKILL, a lost node) stays listed until a live worker's sweep forgets it an hour later:
    the Overview listed it with its heartbeat's age and never said no worker ran (a review of a walk that stopped
    every worker). It is marked silent, and the page says no worker is running."""
    import time

    from playwright.sync_api import expect

    ten_minutes_ago_ms = int(time.time() * 1000) - 600_000
    redis_client.hset(tenant_keys.workers, "killed@node", ten_minutes_ago_ms)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/overview")
    expect(page.get_by_test_id("no-worker")).to_contain_text("No worker is running")
    expect(page.locator("main")).to_contain_text("killed@node · silent · heartbeat 10 min")
    assert page_errors == []


# Where the graph and its box are against the viewport; what sticks out, to say why when it does.


def _first_scopes_page(url: str) -> bool:
    return "/v1/scopes?" in url and "cursor=" not in url


def test_scopes_past_the_first_page_are_reached_with_load_more(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """258 scopes with queued events: the page shows the first 200 and says so ("200 of 258"); "Load more"
    brings the other 58, the last scope of the alphabet among them, and they stay through the 2 s refresh."""
    from playwright.sync_api import expect

    # Given 258 scopes with a queued event each (the web app alone: nothing runs them)
    _, stack = serve_web(make_settings())
    scopes = [f"topic:many-{n:03d}" for n in range(258)]
    post_batch(stack, [message(f"msg_many{n}", "u_many", "Queued", scope=s) for n, s in enumerate(scopes)])
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/scopes")
    rows = page.locator('[data-testid="scopes"] tbody tr')

    # Then the first page says it is one
    expect(rows).to_have_count(200)
    expect(page.get_by_test_id("scopes-count")).to_have_text("200 of 258 scopes shown (by scope key)")
    expect(page.locator(f'tr[data-scope-key="{scopes[-1]}"]')).to_have_count(0)

    # When the next page is loaded and the page refreshes
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(258)
    after_a_refresh(page, _first_scopes_page)
    # (a refresh reads what is shown in one request, not one per page: each lists every scope on the server)
    with page.expect_request(lambda request: _first_scopes_page(request.url), timeout=30_000) as refresh:
        pass
    assert "limit=258" in refresh.value.url, refresh.value.url

    # Then every scope is listed, and the list says it is whole
    assert rows.count() == 258
    assert sorted(rows.nth(i).get_attribute("data-scope-key") or "" for i in range(258)) == scopes
    expect(page.get_by_test_id("scopes-count")).to_have_text("258 scopes")
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()
    assert page_errors == []


def test_scope_actions_say_what_changed_and_the_banner_clears(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """Resume on a scope that was never paused says so (it said "Resumed"), and Pause on a paused one; a row's
    buttons are named after their scope under an "Actions" header. The error banner goes once the user acts
    again (a refused Pause, then one that works), and once a failing refresh succeeds again."""
    from playwright.sync_api import expect

    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/scopes")
    outcome = page.get_by_test_id("scopes-outcome")
    banner = page.locator("#error")
    key = page.get_by_label("Scope key")

    # A Resume that changed nothing, then a refused Pause: the banner says why
    key.fill("topic:never-paused")
    page.get_by_role("button", name="Resume", exact=True).click()
    expect(outcome).to_have_text("topic:never-paused was not paused.")
    key.fill("topic:bad key")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(outcome).to_contain_text("Could not pause topic:bad key")
    expect(banner).to_be_visible()

    # When the next Pause works, the banner is gone; a second Pause says the scope already was paused
    key.fill("topic:calm")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(outcome).to_contain_text("Paused topic:calm.")
    expect(banner).to_be_hidden()
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(outcome).to_have_text("topic:calm was already paused.")

    # The paused scope's row: its button names the scope, and the column has a (visually hidden) header
    row = page.locator('tr[data-scope-key="topic:calm"]')
    expect(row.get_by_role("button", name="Resume topic:calm", exact=True)).to_be_visible()
    expect(page.get_by_test_id("scopes").get_by_role("columnheader", name="Actions")).to_have_count(1)
    row.get_by_role("button", name="Resume topic:calm").click()
    expect(outcome).to_have_text("Resumed topic:calm.")

    # When a refresh fails, the banner says so; when the same read succeeds again, it goes
    def unavailable(route: Any) -> None:
        route.fulfill(
            status=503, json={"error": {"code": "store_unavailable", "message": "the store is down"}}
        )

    page.route("**/v1/scopes?*", unavailable, times=1)
    expect(banner).to_contain_text("the store is down")
    expect(banner).to_be_hidden()
    assert page_errors == []
