"""The Conversation page keeps its receipts up to date in a real browser, against real web and worker processes:
receipts written while the live stream was away show after it reopens, also those dated before the newest one
shown and more than a page of them; after a long outage the page keeps polling and retrying the stream, and is
Live again once the stream opens; a page left behind puts nothing in the banner; refusals of "Open" and "Load
more" are no unhandled rejections; a malformed address and a long unbroken word break nothing.

The live stream is steered with ``page.route`` (a stream that opens and ends at once, one that ends with a
final comment, a 429, a refused connection), and the page's retry, polling and idle timings are shortened
through ``window.agentSignalTimings`` (producers/ui/conversation.js), so nothing here waits for real backoffs:
streams that end at once are retried with a growing wait, a final ending is not retried, and a stream that
goes quiet (no keep-alive) is reopened."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.browser.pages import new_page, post, post_batch
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

OWNER = {"userId": "u1", "agentId": "agt_1"}
STREAM = "**/v1/receipts/stream*"
FAST = "window.agentSignalTimings = {streamRetryInitialMs: 100, streamRetryMaxMs: 300, pollInitialMs: 100, pollMaxMs: 300};"
# the stream's backoff as the page has it (30 s at most), from 100 ms
BACKOFF = "window.agentSignalTimings = {streamRetryInitialMs: 100, pollInitialMs: 100, pollMaxMs: 300};"
# a stream that brings nothing for 1 s (the real one sends its keep-alive every 15 s) is taken for dead
QUIET = "window.agentSignalTimings = {streamIdleMs: 1000, streamRetryInitialMs: 100, streamRetryMaxMs: 300};"


def _message(topic: str, message_id: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": message_id,
        **OWNER,
        "payload": {"agentId": "agt_1", "topicId": topic, "messageId": message_id, "message": text},
    }


def _memory_written(topic: str, anchor: str, name: str, at_ms: int, summary: str = "") -> dict[str, Any]:
    """An agent run that wrote one memory, dated ``at_ms``: its receipt's createdAt, under message ``anchor``."""
    target = {"id": f"mem_{name}", "memoryId": f"mem_{name}", "memoryLayer": "preference", "type": "memory"}
    target |= {"summary": summary or f"Summary {name}", "title": f"Memory {name}"}
    mutation = {"kind": "mutation", "target": target, "resourceId": f"mem_{name}", "status": "applied"}
    marker = {"kind": "memory", "sourceId": f"{anchor}:memory:{name}", "topicId": topic}
    marker |= {"triggerMessageId": anchor, "agentId": "agt_1"}
    return {
        "sourceType": "agent.execution.completed",
        "sourceId": f"op-{name}:complete:done",
        **OWNER,
        "timestamp": at_ms,
        "payload": {
            "agentId": "agt_1",
            "operationId": f"op-{name}",
            "reason": "done",
            "steps": 1,
            "topicId": topic,
            "triggerMessageId": anchor,
            "selfIteration": {
                "marker": marker,
                "mutations": [
                    {"apiName": "writeMemory", "kind": "mutation", "data": mutation | {"summary": name}}
                ],
                "artifacts": [],
                "userId": "u1",
            },
        },
    }


def _receipt_ids(url: str, topic: str) -> set[str]:
    """Every receipt of the conversation, by the API (every page)."""
    ids: set[str] = set()
    cursor = None
    while True:
        params = {**OWNER, "topicId": topic, "limit": 50, **({"cursor": cursor} if cursor else {})}
        body = httpx.get(f"{url}/v1/receipts", params=params, timeout=10).json()
        ids |= {r["id"] for r in body["receipts"]}
        cursor = body.get("cursor")
        if not cursor:
            return ids


def _shown(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("[data-receipt-id]", "els => els.map(e => e.dataset.receiptId)"))


def _all_shown(page: Any, url: str, topic: str, count: int) -> None:
    """Waits until the API has ``count`` receipts and the page shows exactly those, each once."""
    ids = wait_for(
        lambda: len(found := _receipt_ids(url, topic)) == count and found, timeout_s=60, what="receipts"
    )
    page.wait_for_function("n => document.querySelectorAll('[data-receipt-id]').length >= n", arg=count)
    shown = _shown(page)
    assert sorted(shown) == sorted(ids)


def test_receipts_written_while_the_stream_was_away_all_show(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """More than a page of receipts shows at first; after the stream reopens, the receipts written meanwhile show,
    also one dated two minutes before the newest shown and more than a page of them (no reload)."""
    url = start_stack()
    topic = "tpc_late"
    post(url, _message(topic, "msg_l1", "Let us plan the release."))
    now = int(time.time() * 1000)
    post_batch(url, [_memory_written(topic, "msg_l1", f"first{i}", now - 5000 + i) for i in range(52)])
    # The stream opens and ends at once, for ever: the page catches up at each reopening (and polls between).
    page = new_page(browser, page_errors)
    page.add_init_script(FAST)  # such a stream is retried with a growing wait: shortened here
    page.route(
        STREAM,
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=": connected\n\n"),
    )
    opened: list[str] = []
    page.on(
        "request",
        lambda request: opened.append(request.url) if "/v1/receipts/stream" in request.url else None,
    )
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId={topic}")
    _all_shown(page, url, topic, 52)

    # Written while the stream is away: one dated 2 min before the newest shown, and 51 after it.
    later = int(time.time() * 1000)
    post(url, _memory_written(topic, "msg_l1", "late", later - 120_000))
    post_batch(url, [_memory_written(topic, "msg_l1", f"next{i}", later + i) for i in range(51)])
    _all_shown(page, url, topic, 104)
    assert "msg_l1:memory:late:writeMemory:0:memory" in _shown(page)
    assert len(opened) > 1  # shown after a reopening, not by the page's first read
    # a catch-up reads quietly: only the first, whole read shows its progress (and clears it)
    assert page.get_by_test_id("receipts-progress").inner_text() == ""
    assert page_errors == []


def _until(page: Any, done: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    """Waits for ``done()``, which request and route handlers make true: they run while Playwright waits."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(50)


def _requests(page: Any, part: str, event: str = "request") -> list[str]:
    """The URLs of the page's requests (or of those that failed: ``event="requestfailed"``) with ``part``."""
    urls: list[str] = []
    page.on(event, lambda request: urls.append(request.url) if part in request.url else None)
    return urls


def _short_streams_back_off(browser: Any, url: str, page_errors: list[str]) -> None:
    """A stream that opens and ends at once (a proxy that closes streaming responses) is retried with a growing
    wait, not every 100 ms; one the server ends as final (``: credential no longer valid``) is not retried.
    The page polls on in both cases."""
    from playwright.sync_api import expect

    page = new_page(browser, page_errors)
    page.add_init_script(BACKOFF)
    final = ": credential no longer valid\n\n"
    page.route(
        STREAM,
        lambda route: route.fulfill(
            status=200,
            content_type="text/event-stream",
            body=": connected\n\n" + (final if "tpc_final" in route.request.url else ""),
        ),
    )
    streams = _requests(page, "/v1/receipts/stream")
    lists = _requests(page, "/v1/receipts?")
    status = page.get_by_test_id("live-status")
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_short")
    # the 6th short stream in a row (after at most 4.65 s of waits); the old page reset its backoff when a
    # stream opened, so it retried every 100 ms and never said this
    expect(status).to_contain_text("Live stream unavailable", timeout=20_000)
    opened, polled = len(streams), len(lists)
    _until(page, lambda: len(lists) >= polled + 6, "the page to poll on")  # the next wait is 1.6 s or more
    assert len(streams) <= opened + 1

    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_final")
    expect(status).to_contain_text("Live stream ended (credential no longer valid); polling every")
    polled = len(lists)
    _until(page, lambda: len(lists) >= polled + 6, "the page to poll on")
    assert len([u for u in streams if "tpc_final" in u]) == 1
    page.close()


def _quiet_stream_is_reopened(browser: Any, url: str, topic: str, page_errors: list[str]) -> None:
    """A stream that opened and then brings nothing, not even a keep-alive (here the real one between its
    keep-alives, the page's idle limit shortened to 1 s), is aborted and reopened: a dead connection (a NAT
    timeout, a laptop that slept) does not stay "Live" for ever."""
    from playwright.sync_api import expect

    page = new_page(browser, page_errors)
    page.add_init_script(QUIET)
    streams = _requests(page, "/v1/receipts/stream")
    aborted = _requests(page, "/v1/receipts/stream", "requestfailed")
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId={topic}")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    _until(page, lambda: len(aborted) >= 2 and len(streams) >= 3, "the quiet stream to be reopened")
    page.close()


def _refused(route: Any, status: int = 503, code: str = "store_unavailable") -> None:
    body = {"error": {"code": code, "message": f"refused by the test ({code})", "field": None}}
    route.fulfill(
        status=status, content_type="application/json", headers={"retry-after": "1"}, body=json.dumps(body)
    )


def test_after_a_long_outage_the_page_keeps_polling_and_is_live_again(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """A stream refused (429, then no connection) many times in a row: the status says why, the page polls and
    retries the stream on, and once the stream opens it is Live and shows new receipts. Then (other pages):
    short streams back off, a final ending is not retried, a quiet stream is reopened; and pages left, refused
    calls, odd addresses and long words break nothing."""
    from playwright.sync_api import expect

    url = start_stack()
    topic = "tpc_outage"
    post(url, _message(topic, "msg_o1", "Let us plan the release."))
    page = new_page(browser, page_errors)
    page.add_init_script(FAST)
    attempts: list[str] = []
    up: list[bool] = []

    def stream(route: Any) -> None:
        attempts.append(route.request.url)
        if up:
            route.continue_()
        elif len(attempts) == 1:
            _refused(route, 429, "too_many_streams")
        else:
            route.abort()

    page.route(STREAM, stream)
    lists: list[str] = []
    page.on("request", lambda request: lists.append(request.url) if "/v1/receipts?" in request.url else None)
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId={topic}")
    status = page.get_by_test_id("live-status")
    expect(status).to_contain_text("too many live streams open (too_many_streams)")
    expect(status).to_contain_text("Live stream unavailable")
    _until(
        page, lambda: len(attempts) >= 12, "the stream retried on"
    )  # the old page gave up after 6 attempts
    polled = len(lists)
    _until(page, lambda: len(lists) >= polled + 3, "the page to poll on")
    expect(status).to_contain_text("polling every")

    up.append(True)
    expect(status).to_have_text("Live")
    post(url, _memory_written(topic, "msg_o1", "after", int(time.time() * 1000)))
    page.wait_for_selector('[data-receipt-id="msg_o1:memory:after:writeMemory:0:memory"]')
    _short_streams_back_off(browser, url, page_errors)
    _quiet_stream_is_reopened(browser, url, topic, page_errors)
    assert page_errors == []
    # and on the same stack (one stack less for the suite's budget): pages left, refusals, odd addresses
    _pages_left_refusals_odd_addresses_and_long_words_break_nothing(browser, url, page_errors)


def _load_more_refused(page: Any, url: str, route_name: str, path: str, first_page: dict[str, Any]) -> None:
    """On page ``route_name`` the list's first page (faked) has a cursor and the next is refused: Load more."""
    pattern = f"**{path}?*"
    page.route(
        pattern,
        lambda route: (
            _refused(route)
            if "cursor=" in route.request.url
            else route.fulfill(status=200, content_type="application/json", body=json.dumps(first_page))
        ),
    )
    page.goto(f"{url}/#/{route_name}")
    with page.expect_response(lambda response: path in response.url and "cursor=" in response.url):
        page.get_by_role("button", name="Load more").click()
    page.unroute(pattern)


def _neighbours_not_read(page: Any, url: str, event_id: str) -> None:
    """A run missing from the scope's latest runs (a faked list without it) is not called the scope's only run."""
    from playwright.sync_api import expect

    others = {"events": [{"eventId": "evt_other", "status": "done", "sourceType": "test", "enqueuedAt": 1}]}
    page.route("**/v1/events?*", lambda route: route.fulfill(status=200, json=others))
    page.goto(f"{url}/#/runs/{event_id}")
    neighbours = page.locator("section.panel", has_text="Neighbours")
    expect(neighbours).to_contain_text("Not among the scope's latest 1 runs.")
    expect(neighbours.get_by_role("link", name="The scope's runs up to this one")).to_be_visible()
    page.unroute("**/v1/events?*")


def _next_messages_read(page: Any) -> None:
    """A deterministic later moment: the Conversation page's next read of its messages (every 1.5 s)."""
    with page.expect_request(lambda request: "/v1/conversations/messages" in request.url):
        pass


def _pages_left_refusals_odd_addresses_and_long_words_break_nothing(
    browser: Any, url: str, page_errors: list[str]
) -> None:
    """A long unbroken word keeps the page's width; a refused Open and Load more are no unhandled rejections; a
    malformed address opens a page; a page left behind puts no error in the banner (its calls are aborted); a
    refused credential stops the updates and the status says so."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    topic = "tpc_wide"
    post(url, _message(topic, "msg_w1", f"Look: {'x' * 5000}"))
    wide = post(url, _memory_written(topic, "msg_w1", "wide", int(time.time() * 1000), summary="y" * 3000))
    page = new_page(browser, page_errors)
    page.on("console", lambda msg: page_errors.append(msg.text) if "Uncaught" in msg.text else None)
    banner = page.locator("#error")
    conversation = f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId={topic}"
    page.goto(conversation)
    page.locator('.receipt[data-kind="memory"]').wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")

    page.route("**/v1/memories/**", lambda route: _refused(route))
    page.get_by_role("button", name="Open", exact=False).click()
    expect(banner).to_contain_text("refused by the test")
    _load_more_refused(page, url, "runs", "/v1/events", {"events": [], "cursor": "c1"})
    _load_more_refused(page, url, "scopes", "/v1/scopes", {"scopes": [], "total": 3, "cursor": "c1"})
    _neighbours_not_read(page, url, wide)
    page.goto(f"{url}/#/runs/%E0%A4%A")
    expect(page.get_by_role("heading", name="Run %E0%A4%A")).to_be_visible()

    # A page left while its read is under way: the read is aborted, so its answer puts nothing in the banner.
    held: list[Any] = []
    page.route("**/v1/events?*", lambda route: held.append(route))
    with page.expect_request(lambda request: "/v1/events?" in request.url) as pending:
        page.goto(f"{url}/#/runs")
    with page.expect_event("requestfailed", lambda request: request == pending.value, timeout=10_000):
        page.goto(conversation)
    for route in held:  # answered now, the old page would have put this refusal in the banner
        with contextlib.suppress(PlaywrightError):  # the request was aborted: nothing to answer
            _refused(route)
    _next_messages_read(page)
    expect(banner).to_be_hidden()

    # A credential refused (an expired user token): the status says the updates stopped, not "polling".
    for pattern in ("**/v1/receipts?*", STREAM):
        page.route(pattern, lambda route: _refused(route, 401, "unauthorized"))
    page.goto(conversation.replace(topic, "tpc_refused"))
    expect(page.get_by_test_id("live-status")).to_contain_text("Updates stopped")
    _next_messages_read(page)
    assert page_errors == []
