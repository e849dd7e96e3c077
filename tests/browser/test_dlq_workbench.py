"""The dead-letter workbench in a real browser: a dead event's payload and attempts, edited and redriven to done;
discard with a reason, and bulk redrive by filter. Waits on page content or the API, never a fixed sleep."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.pages import (
    after_a_refresh,
    event_record,
    flaky,
    new_page,
    pause_clock,
    post,
    settled,
    shot,
    status_in,
)
from worker.keys.layout import Keys

pytestmark = pytest.mark.integration


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
    dead = post(stack, flaky("flaky-edit", {"note": "as sent"}))
    settled(stack, dead, "dead")
    page = new_page(browser, page_errors)

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
    shot(page, tmp_path, "run-dead")

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
    # Escape closes the editor (walk finding 13), focus back on its button; reopened, the edit is still there
    editor.press("Escape")
    expect(detail).to_be_hidden()
    expect(row.get_by_role("button", name=f"Payload of {dead}")).to_be_focused()
    page.keyboard.press("Enter")
    expect(editor).to_have_value('{"note": ')
    editor.fill('{"note": "edited in the workbench"}')
    shot(page, tmp_path, "dlq")
    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    detail.get_by_role("button", name="Redrive with this payload").click()

    # Then the row follows it to done, and the run used the edited payload
    status_in(page, f'tr[data-event-id="{dead}"]', "done", "dlq-status")
    expect(row).to_contain_text("redriven with edited payload")
    shot(page, tmp_path, "dlq-redriven")
    chain = httpx.get(f"{stack}/v1/chains/chain:flaky-edit", timeout=10).json()
    assert chain["envelope"]["source"]["payload"] == {"note": "edited in the workbench"}
    page.goto(f"{stack}/#/runs/{dead}")
    status_in(page, "main", "done")
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
    ids = [post(stack, flaky(f"flaky-bulk-{i}", {"n": i})) for i in range(3)]
    for event_id in ids:
        settled(stack, event_id, "dead")
    dropped, kept = ids[0], ids[1:]
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    for event_id in ids:
        page.wait_for_selector(f'tr[data-event-id="{event_id}"]')

    # When one is discarded with a reason
    page.locator(f'tr[data-event-id="{dropped}"]').get_by_role("button", name=f"Payload of {dropped}").click()
    detail = page.locator(f'tr[data-detail-for="{dropped}"]')
    detail.get_by_test_id("discard-reason").fill("superseded by order 43")
    detail.get_by_role("button", name="Discard", exact=True).click()

    # Then its row says so
    status_in(page, f'tr[data-event-id="{dropped}"]', "discarded", "dlq-status")
    expect(page.locator(f'tr[data-event-id="{dropped}"]')).to_contain_text("superseded by order 43")

    # When the others are picked by filter and redriven in bulk
    page.get_by_label("Error contains").fill("broken")
    page.get_by_label("Select every row shown").check()
    bulk = page.get_by_role("button", name="Redrive selected (2)")
    expect(bulk).to_be_enabled()
    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    bulk.click()

    # Then each row reaches done, and the discarded one is listed with its reason
    for event_id in kept:
        status_in(page, f'tr[data-event-id="{event_id}"]', "done", "dlq-status")
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Redriven: 2")
    page.get_by_role("link", name="Discarded").click()
    row = page.locator(f'tr[data-event-id="{dropped}"]')
    expect(row.get_by_test_id("discard-reason")).to_have_text("superseded by order 43")
    shot(page, tmp_path, "dlq-discarded")
    listed = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded"}, timeout=10).json()["events"]
    assert [(e["eventId"], e["reason"]) for e in listed] == [(dropped, "superseded by order 43")]
    assert event_record(stack, dropped)["status"] == "discarded"
    assert page_errors == []


def _first_dlq_page(url: str) -> bool:
    return "/v1/dlq?" in url and "cursor=" not in url


def _bury(redis_client: Any, tenant_keys: Keys, count: int) -> list[str]:
    """``count`` dead events in the DLQ, as the store keeps them (a record and its DLQ entry): one dies each
    millisecond, and every tenth died of a timeout. Their ids, latest death first."""
    b = tenant_keys.for_scope("topic:buried")
    died = 1_700_000_000_000
    pipe = redis_client.pipeline(transaction=False)
    ids = []
    for n in range(count):
        event_id = f"evt_{n:024x}"
        error = "timeout calling the model" if n % 10 == 0 else "flaky handler is broken"
        record = {
            "state": "dead",
            "scopeKey": "topic:buried",
            "sourceType": "test.flaky",
            "sourceId": f"dead-{n}",
        }
        record |= {"attempts": 1, "error": error, "enqueuedAt": died + n, "deadAt": died + n}
        pipe.hset(b.event(event_id), mapping=record)
        pipe.zadd(b.dlq, {event_id: died + n})
        ids.append(event_id)
    pipe.execute()
    return ids[::-1]


def test_the_workbench_pages_through_every_dead_event(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """3,010 dead events: the workbench shows 500 and says "500 of 3010 dead shown"; a filter's count says it
    covers the rows shown; "Load more" reads the next 500 (they stay through the 2 s refresh), up to every one."""
    from playwright.sync_api import expect

    # Given 3,010 dead events
    buried = _bury(redis_client, tenant_keys, 3010)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    rows = page.locator("table.dlq tbody tr[data-event-id]")
    count = page.get_by_test_id("dlq-count")

    # Then the first page is shown, and the count says it is one
    expect(rows).to_have_count(500)
    expect(count).to_contain_text("500 of 3010 dead shown")
    assert rows.first.get_attribute("data-event-id") == buried[0]

    # When the rows are filtered, the count says what it covers, and "Select every row shown" takes those
    page.get_by_label("Error contains").fill("timeout")
    expect(rows).to_have_count(50)
    expect(count).to_contain_text("50 of the 500 shown match")
    page.get_by_label("Select every row shown").check()
    expect(page.get_by_role("button", name="Redrive selected (50)")).to_be_enabled()
    page.get_by_label("Select every row shown").uncheck()
    page.get_by_label("Error contains").fill("")

    # When the next page is loaded (after the last row shown: by its cursor, which an event redriven or dead
    # meanwhile does not shift, as an offset did) and the page refreshes, both pages stay
    died_ms = 1_700_000_000_000 + 3010 - 500  # the 500th latest of _bury's, one death a millisecond
    with page.expect_request(lambda r: "/v1/dlq?" in r.url and "cursor=" in r.url, timeout=30_000) as more:
        page.get_by_role("button", name="Load more").click()
    assert f"cursor={died_ms}%3A{buried[499]}" in more.value.url, more.value.url
    expect(rows).to_have_count(1000)
    expect(count).to_contain_text("1000 of 3010 dead shown")
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/v1/dlq?" in r.url else None)
    after_a_refresh(page, _first_dlq_page)
    with page.expect_request(lambda r: _first_dlq_page(r.url), timeout=30_000):
        pass
    assert rows.count() == 1000
    # from one refresh's first read to the third's, two refreshes ended: they read the second page at most once
    # (each fifth refresh reads every page shown; each did before)
    firsts = [i for i, u in enumerate(reads) if _first_dlq_page(u)]
    assert sum("cursor=" in u for u in reads[firsts[0] : firsts[2]]) <= 1, reads

    # Then "Load more" reaches the last one, and the count says the list is whole
    # (a page waits for the refresh in progress, which re-reads every row shown: slow on a busy machine)
    for shown in (1500, 2000, 2500, 3000, 3010):
        page.get_by_role("button", name="Load more").click()
        expect(rows).to_have_count(shown, timeout=30_000)
    expect(count).to_contain_text("3010 dead ·")
    expect(count).not_to_contain_text("shown")
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()
    assert rows.last.get_attribute("data-event-id") == buried[-1]
    assert page_errors == []


def test_a_dead_outbound_call_is_listed_and_sent_again(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    keys: Any,
    tmp_path: Path,
    page_errors: list[str],
) -> None:
    """The Outbox tab lists the outbound calls that failed every attempt (GET /v1/outbox/dead) with their last
    error; "Send again" makes one pending again (POST /v1/outbox/redrive) and it leaves the list."""
    from playwright.sync_api import expect

    from worker.chain.context import EffectBuffer, HandlerContext
    from worker.outbox.relay import OutboxRecord, OutboxRelay
    from worker.store.events import EventStore

    # Given a webhook that failed its one attempt
    settings = make_settings(outbox_max_attempts=1)
    _, url = serve_web(settings)
    buffer = EffectBuffer(keys=keys)
    HandlerContext(scope_key="topic:hooks", node_timestamp=1, keys=keys, effects=buffer).outbox(
        "hook", {}, key="k1"
    )
    pipe = redis_client.pipeline(transaction=True)
    for command in buffer.to_json_list():
        pipe.execute_command(*command)
    pipe.execute()

    def down(record: OutboxRecord) -> None:
        raise ConnectionError("the receiver is down")

    OutboxRelay(EventStore(redis_client, settings), {"hook": down}, max_attempts=1).run_once()
    page = new_page(browser, page_errors)

    # When the dead letters' Outbox tab is opened
    page.goto(f"{url}/#/dlq?state=outbox")

    # Then the call is listed with its error, and sending it again takes it off the list
    row = page.locator('tr[data-record-id="hook:k1"]')
    expect(row).to_contain_text("the receiver is down")
    shot(page, tmp_path, "outbox-dead")
    row.get_by_role("button", name="Send again").click()
    expect(page.get_by_test_id("outbox-outcome")).to_contain_text("Sent again: 1")
    expect(row).to_have_count(0)
    stored = OutboxRecord.from_json(redis_client.get(keys.outbox_record("topic:hooks", "hook:k1")))
    assert (stored.state, stored.attempts) == ("pending", 0)


def test_discard_all_goes_on_until_the_list_is_empty(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """One request discards at most AGENT_SIGNAL_DLQ_BATCH_MAX dead events and answers "more": "Discard all"
    sends it again until none remain (it stopped after the first batch, the rest left dead)."""
    from playwright.sync_api import expect

    buried = _bury(redis_client, tenant_keys, 5)
    _, stack = serve_web(make_settings(dlq_batch_max=2))
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    expect(page.locator("table.dlq tbody tr[data-event-id]")).to_have_count(5)
    page.on("dialog", lambda dialog: dialog.accept())  # "Discard all 5 dead events …?"
    with page.expect_response(lambda r: r.url.endswith("/v1/dlq/discard")) as first:
        page.get_by_role("button", name="Discard all").click()
    assert first.value.json()["more"] is True
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Discarded: 5")
    listed = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded", "limit": 10}, timeout=10).json()
    assert sorted(e["eventId"] for e in listed["events"]) == sorted(buried)
    assert httpx.get(f"{stack}/v1/dlq", timeout=10).json()["total"] == 0
    assert page_errors == []


def test_redrive_all_and_discard_all_ask_first_naming_the_whole_list(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """ "Redrive all" and "Discard all" act on the tenant's whole dead-letter list, whatever the filter shows: each
    asks first, naming the count and saying the filter does not narrow it; cancelling sends nothing (a filter
    showing "4 dead · 0 match" then Discard all discarded all 4 at once)."""
    from playwright.sync_api import expect

    # Given 4 dead events, and a filter that shows none of them
    buried = _bury(redis_client, tenant_keys, 4)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    writes: list[str] = []
    page.on("request", lambda r: writes.append(r.url) if r.method == "POST" else None)
    asked: list[str] = []
    answer = {"accept": False}

    def on_dialog(dialog: Any) -> None:
        asked.append(dialog.message)
        if answer["accept"]:
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(f"{stack}/#/dlq")
    expect(page.locator("table.dlq tbody tr[data-event-id]")).to_have_count(4)
    page.get_by_label("Error contains").fill("no such error")
    expect(page.get_by_test_id("dlq-count")).to_contain_text("4 dead · 0 match")

    # When Redrive all and Discard all are pressed and their questions cancelled
    page.get_by_role("button", name="Redrive all").click()
    page.get_by_role("button", name="Discard all").click()

    # Then each asked, naming the count and the filter, and nothing was sent (the page read the list twice since)
    assert len(asked) == 2, asked
    assert all("all 4 dead events" in text and "filter" in text for text in asked), asked
    after_a_refresh(page, _first_dlq_page)
    assert writes == []
    assert httpx.get(f"{stack}/v1/dlq", timeout=10).json()["total"] == 4
    expect(page.get_by_test_id("dlq-outcome")).to_be_empty()

    # When Discard all is asked again and accepted, every dead event is discarded
    answer["accept"] = True
    page.get_by_role("button", name="Discard all").click()
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Discarded: 4")
    assert len(asked) == 3
    assert httpx.get(f"{stack}/v1/dlq", timeout=10).json()["total"] == 0
    listed = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded"}, timeout=10).json()["events"]
    assert sorted(e["eventId"] for e in listed) == sorted(buried)
    assert page_errors == []


def test_the_bulk_reason_is_cleared_after_a_discard(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """The Reason of "Discard selected" is emptied once the discard is done: the next discard does not reuse it
    without a word (it did: the second event was filed under the first one's reason)."""
    from playwright.sync_api import expect

    first, second, _ = _bury(redis_client, tenant_keys, 3)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    expect(page.locator("table.dlq tbody tr[data-event-id]")).to_have_count(3)
    reason = page.get_by_label("Reason for bulk discard")

    # When one is discarded with a reason
    page.get_by_label(f"Select {first}").check()
    reason.fill("duplicate of order 41")
    page.get_by_role("button", name="Discard selected (1)").click()
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Discarded: 1")

    # Then the reason is gone, and the next one is discarded without it
    expect(reason).to_have_value("")
    page.get_by_label(f"Select {second}").check()
    page.get_by_role("button", name="Discard selected (1)").click()
    status_in(page, f'tr[data-event-id="{second}"]', "discarded", "dlq-status")
    listed = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded"}, timeout=10).json()["events"]
    reasons = {e["eventId"]: e.get("reason") for e in listed}
    assert reasons[first] == "duplicate of order 41"
    assert not reasons[second], reasons
    assert page_errors == []


def _lookups_per_refresh(page: Any, requests: list[str], refreshes: int) -> list[int]:
    """How many GET /v1/events/{id} each of the next ``refreshes`` refreshes sent (a refresh runs from one read
    of the list's first page to the next; the page runs one refresh at a time)."""
    start = len(requests)
    for _ in range(refreshes + 1):
        with page.expect_request(lambda request: _first_dlq_page(request.url), timeout=30_000):
            pass
    marks = [i for i in range(start, len(requests)) if _first_dlq_page(requests[i])][: refreshes + 1]
    return [sum("/v1/events/" in url for url in requests[a:b]) for a, b in itertools.pairwise(marks)]


def test_rows_acted_on_are_followed_a_few_at_a_time(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """60 rows redriven and queued (no worker runs them): a refresh looks up at most 20 of them (it looked up
    every one every 2 s, and a few hundred pushed the key over its rate limit), the count says so, and a 429
    stops the lookups instead of hammering on."""
    from playwright.sync_api import expect

    _bury(redis_client, tenant_keys, 60)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if r.method == "GET" else None)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{stack}/#/dlq")
    expect(page.locator("table.dlq tbody tr[data-event-id]")).to_have_count(60)

    # When all of them are redriven (they stay queued: no worker)
    page.get_by_role("button", name="Redrive all").click()
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Redriven: 60")

    # Then each refresh looks up 20 of them, and the count says it follows 20 of 60
    assert _lookups_per_refresh(page, requests, 2) == [20, 20]
    expect(page.get_by_test_id("dlq-count")).to_contain_text("following 20 of 60")
    expect(page.locator('[data-testid="dlq-status"]:text-is("queued")')).to_have_count(60)

    # When the API answers a lookup 429 (Retry-After: 60), the count says the lookups wait, and the refreshes
    # that follow send none: only the one lookup that was refused was sent
    refused: list[str] = []

    def too_many(route: Any) -> None:
        refused.append(route.request.url)
        message = "over this credential's rate; retry in 60s"
        route.fulfill(
            status=429,
            headers={"retry-after": "60"},
            json={"error": {"code": "rate_limited", "message": message}},
        )

    page.route("**/v1/events/evt_*", too_many)
    expect(page.get_by_test_id("dlq-count")).to_contain_text("lookups paused (rate limited)")
    assert _lookups_per_refresh(page, requests, 2) == [0, 0]
    assert len(refused) == 1, refused
    assert page_errors == []


def test_an_action_reads_every_page_shown_at_once(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """With two pages shown, a refresh reads the second only each fifth time; the refresh an action runs reads it
    at once (rows acted on below the first page stayed counted for up to 10 s). The page's timers run on
    Playwright's clock, paused: no refresh runs but the first and the action's."""

    from playwright.sync_api import expect

    # Given 600 dead events, both pages shown
    buried = _bury(redis_client, tenant_keys, 600)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    pause_clock(page)
    page.goto(f"{stack}/#/dlq")
    rows = page.locator("table.dlq tbody tr[data-event-id]")
    expect(rows).to_have_count(500)
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(600)

    # When a row of the second page is discarded, then its refresh reads the second page
    page.get_by_label(f"Select {buried[-1]}").check()
    with page.expect_request(lambda r: "/v1/dlq?" in r.url and "cursor=" in r.url, timeout=30_000):
        page.get_by_role("button", name="Discard selected (1)").click()
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Discarded: 1")
    assert page_errors == []


def test_a_long_error_is_named_briefly_and_a_bulk_discard_keeps_focus(
    browser: Any,
    make_settings: Any,
    serve_web: Any,
    redis_client: Any,
    tenant_keys: Keys,
    page_errors: list[str],
) -> None:
    """Walk findings 9 and 13: a 10,000-character error's cell is named by its first 200 characters (all of it
    shows when expanded), and "Discard selected" pressed from the keyboard leaves focus on the outcome line."""
    from playwright.sync_api import expect

    first, _ = _bury(redis_client, tenant_keys, 2)
    error = "RuntimeError: " + "A" * 10_000
    redis_client.hset(tenant_keys.for_scope("topic:buried").event(first), "error", error)
    _, stack = serve_web(make_settings())
    page = new_page(browser, page_errors)
    page.goto(f"{stack}/#/dlq")
    cell = page.locator(f'tr[data-event-id="{first}"] .clamp')
    expect(cell).to_have_accessible_name(error[:200] + "…")
    cell.press("Enter")
    expect(cell).to_have_accessible_name(error)
    expect(cell.locator("span").last).to_have_text(error)

    page.get_by_label(f"Select {first}").check()
    page.get_by_role("button", name="Discard selected (1)").press("Enter")
    expect(page.get_by_test_id("dlq-outcome")).to_contain_text("Discarded: 1")
    expect(page.get_by_test_id("dlq-outcome")).to_be_focused()
    assert page_errors == []
