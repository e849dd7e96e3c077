"""The Conversation page keeps at most 2,000 receipts (``RECEIPTS_KEPT``, producers/ui/conversation.js), in a real
browser against real web and worker processes: a live stream brings receipts for ever, so once more than 2,000
are held the oldest go, and a receipt older than the oldest kept (the ``floor``) that arrives later is not taken,
while a newer one is.

The page's first read follows the cursor for at most 2,000 receipts (``RECEIPT_MAX_PAGES``), so the cap is only
reached by what comes after it: here the live stream. The 2,000 receipts the page reads first are written
straight into Redis with the store's own commands (worker/store/receipts.py ``receipt_effects``, without their
announcement: nothing listens yet), not run through the pipeline; only the message they sit under is. Those
that come later are appended with ``ReceiptStore.append``, which announces each on the user's channel, so the
page's stream brings them one by one, in the order written. The stream is also the way a receipt older than the
floor reaches a page (one committed late: a retry, a redrive); a catch-up cannot bring one, since it reads the
newest 2,000 of its window, which are those kept.

The page shows receipts only next to the message they belong to, so "kept" is what it renders: one
``[data-receipt-id]`` card per receipt. A receipt the page drops is also gone from its cards, so the cap is
asserted on them. The floor changes no card (a receipt older than every kept one would be dropped again at
once by the cap): what it saves is taking that receipt at all, i.e. a redraw of the whole list for nothing, so
the floor is asserted by counting the list's redraws with a MutationObserver. Every wait is on page content,
never a fixed sleep: a receipt the page must not take is written before one it must show, and the stream
delivers them in that order."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from tests.browser.pages import new_page, post, settled
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore, receipt_effects

pytestmark = pytest.mark.integration

KEPT = 2000  # RECEIPTS_KEPT in producers/ui/conversation.js
NEW = 3  # receipts the stream brings past the cap (each one redraws 2,000 cards)
STEP_MS = 10  # between two receipts' createdAt, so a late one can fall between two dropped ones
OWNER = {"userId": "u1", "agentId": "agt_cap", "topicId": "tpc_cap"}
ANCHOR = "msg_cap1"
CARDS = "[data-receipt-id]"

# Counts the redraws of the conversation's list: renderConversation replaces the list's children once per
# redraw (one childList record); receipts arriving or changing redraw it, nothing else does while the
# conversation's messages stay the same.
WATCH_REDRAWS = """() => {
  const list = document.querySelector(".messages");
  window.capTest = { redraws: 0 };
  window.capTest.observer = new MutationObserver((records) => { window.capTest.redraws += records.length; });
  window.capTest.observer.observe(list, { childList: true });
}"""
REDRAWS = "() => (window.capTest.redraws += window.capTest.observer.takeRecords().length)"


def _receipt(name: str, at_ms: int) -> dict[str, Any]:
    """A review receipt of the conversation under message ``ANCHOR``, dated ``at_ms``."""
    return {
        "id": f"{ANCHOR}:cap:{name}",
        **OWNER,
        "kind": "review",  # no Open button: the smallest card
        "status": "applied",
        "title": f"Review {name}",
        "createdAt": at_ms,
        "triggerMessageId": ANCHOR,
        "metadata": {},
    }


def _ids(receipts: list[dict[str, Any]]) -> set[str]:
    return {str(r["id"]) for r in receipts}


def _write_quietly(client: Redis, keys: BucketKeys, receipts: list[dict[str, Any]], ttl_s: int) -> None:
    """The store's commands for ``receipts`` (stored, indexed, counted), in one pipeline and unannounced."""
    pipe = client.pipeline(transaction=False)
    for receipt in receipts:
        for command in receipt_effects(keys, receipt, ttl_s):
            if command[0] != "PUBLISH":
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
    pipe.execute()


def _message() -> dict[str, Any]:
    """The conversation's one message, which every receipt of the test sits under."""
    return {
        "sourceType": "agent.user.message",
        "sourceId": ANCHOR,
        "userId": OWNER["userId"],
        "agentId": OWNER["agentId"],
        "payload": {
            "agentId": OWNER["agentId"],
            "topicId": OWNER["topicId"],
            "messageId": ANCHOR,
            "message": "Review everything, please.",
        },
    }


def _shown(page: Any) -> set[str]:
    return set(page.eval_on_selector_all(CARDS, "els => els.map(e => e.dataset.receiptId)"))


def test_the_page_keeps_the_newest_receipts_and_takes_none_older_than_those_kept(
    browser: Any,
    start_stack: Callable[..., str],
    make_settings: Callable[..., Any],
    redis_client: Redis,
    keys: BucketKeys,
    page_errors: list[str],
) -> None:
    """2,000 receipts show; three more from the live stream push out the three oldest (2,000 cards, the newest);
    then one dated between two dropped ones is not taken (no card, no redraw) and a newer one is."""
    from playwright.sync_api import expect

    # Given a conversation with one message and exactly as many receipts as the page keeps, 10 ms apart
    url = start_stack()
    settled(url, post(url, _message()), "done")
    ttl_s = int(make_settings().receipt_retention_s)
    base = int(time.time() * 1000) - 120_000  # every createdAt is in the past: none is clamped to the clock
    old = [_receipt(f"old{i:04d}", base + i * STEP_MS) for i in range(KEPT)]
    _write_quietly(redis_client, keys, old, ttl_s)

    # When the page has read them all and its live stream is open
    page = new_page(browser, page_errors)
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/v1/receipts/stream" in r.url else None)
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_cap&topicId=tpc_cap")
    cards = page.locator(CARDS)
    expect(cards).to_have_count(KEPT, timeout=60_000)
    expect(page.get_by_test_id("live-status")).to_have_text("Live", timeout=30_000)
    assert _shown(page) == _ids(old)

    # and the stream brings three newer receipts, one by one
    store = ReceiptStore(redis_client, keys, ttl_s=ttl_s)
    newer = [_receipt(f"new{i:02d}", base + (KEPT + i) * STEP_MS) for i in range(NEW)]
    for receipt in newer:
        assert store.append(receipt)
    page.locator(f'[data-receipt-id="{newer[-1]["id"]}"]').wait_for()  # the last one: the others came before

    # Then the page holds 2,000: the newest ones, the three oldest gone (without the cap: 2,003 cards)
    kept = old[NEW:] + newer
    assert cards.count() == KEPT
    assert _shown(page) == _ids(kept)

    # When a receipt dated between two of the dropped ones (committed late: a retry, a redrive) comes on the
    # stream, and then a receipt newer than all
    page.evaluate(WATCH_REDRAWS)
    opened = len(streams)
    late = _receipt("late", base + STEP_MS // 2)  # between old[0] and old[1]: below the floor, old[NEW]
    fresh = _receipt("fresh", base + (KEPT + NEW) * STEP_MS)
    assert store.append(late)
    assert store.append(fresh)
    page.locator(f'[data-receipt-id="{fresh["id"]}"]').wait_for()  # the stream brought `late` before it

    # Then the newer one shows and pushes out the oldest kept; the late one was not taken: no card, and the
    # list was redrawn once, for the newer one (without the floor: taken, redrawn, then dropped by the cap)
    assert len(streams) == opened  # both came on the same stream, in the order written
    assert cards.count() == KEPT
    assert _shown(page) == _ids([*kept[1:], fresh])
    assert page.evaluate(REDRAWS) == 1
    assert page_errors == []
