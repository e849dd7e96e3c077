"""Debian's Chromium driven by Playwright, one way for every browser test (never `playwright install`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["ARGS", "CHROMIUM", "EXPECT_TIMEOUT_MS", "chromium"]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
# Playwright's ``expect`` waits 5 s by default, and ``page.set_default_timeout`` does not reach it: a row that
# shows what a worker did, read on the page's 2 s refresh, had two or three refreshes to appear, little on a loaded
# 2-core runner. It waits as long as the pages' actions do (tests/browser/pages.py ``new_page``); a check that
# holds returns at once, and one that never holds still fails.
EXPECT_TIMEOUT_MS = 30_000


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium; the test fails (not skips) when the browser is missing."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it with apt (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield instance
        finally:
            instance.close()
