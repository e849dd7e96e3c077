"""The console with a user token (a JWT a key minted for one user): the operator pages are refused (403) and
say once that they need an API key, instead of half-built pages, a chain lookup stuck on "Loading…" and a Send
result that asked for its run every 500 ms for ever; the Conversation page and sending still work."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.browser.pages import new_page

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-console-0123456789"
NOTICE = "need an API key"


def _user_token(url: str, user: str) -> str:
    """A user token for ``user``, minted by an operate key of the default tenant."""
    boot = {"Authorization": f"Bearer {BOOT}"}
    made = httpx.post(
        f"{url}/v1/keys", json={"tenant": "default", "role": "operate"}, headers=boot, timeout=10
    )
    assert made.status_code in (200, 201), made.text
    operate = {"Authorization": f"Bearer {made.json()['key']}"}
    minted = httpx.post(f"{url}/v1/tokens", json={"userId": user}, headers=operate, timeout=10)
    assert minted.status_code == 200, minted.text
    return str(minted.json()["token"])


def test_a_user_token_is_told_the_operator_pages_need_a_key(
    browser: Any, make_settings: Any, serve_web: Any, page_errors: list[str]
) -> None:
    from playwright.sync_api import expect

    _, url = serve_web(make_settings(bootstrap_key=BOOT, auth_cache_s=0))
    token = _user_token(url, "u1")
    page = new_page(browser, page_errors)
    banner = page.locator("#error")
    lookups: list[str] = []
    page.on("request", lambda r: lookups.append(r.url) if re.search(r"/v1/events/evt_", r.url) else None)

    # An operator page says once that it needs an API key (not the API's 403 for each read)
    page.goto(f"{url}/#/runs?token={token}")
    expect(banner).to_contain_text(NOTICE)
    expect(banner).not_to_contain_text("GET /v1/")
    page.goto(f"{url}/#/dlq")
    expect(banner).to_contain_text(NOTICE)

    # The chain inspector answers in place instead of staying on "Loading…"
    page.goto(f"{url}/#/chains?q=msg_anything")
    expect(page.get_by_test_id("lookup-error")).to_contain_text(NOTICE)
    expect(page.locator("main")).not_to_contain_text("Loading")

    # Send works (a user token may send its own user's events); its run is not followed once refused
    page.goto(f"{url}/#/send")
    page.get_by_role("button", name="Send", exact=True).click()
    result = page.get_by_test_id("send-result")
    expect(result.get_by_test_id("sent-status")).to_contain_text("not followed")
    sent = result.locator("a").inner_text()
    assert [u for u in lookups if sent in u] and len(lookups) == 1, lookups
    expect(banner).to_contain_text(NOTICE)

    # The Conversation page works with it, with no banner
    with page.expect_response(lambda r: "/v1/conversations/messages" in r.url) as read:
        page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_1")
    assert read.value.status == 200
    expect(page.locator(".messages")).to_contain_text("Going forward, I prefer concise answers.")
    expect(banner).to_be_hidden()
    assert page_errors == []
