"""Fixtures of the browser tests: one Chromium per module (tests/support/browser.py), the page-error log a test
asserts empty, and a real worker plus the web app (served on a thread: tests/conftest.py serve_web)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as instance:
        yield instance


@pytest.fixture
def page_errors() -> list[str]:
    """Uncaught page errors and Content-Security-Policy refusals seen by any page of the test."""
    return []


@pytest.fixture
def start_stack(make_settings: Any, start_worker: Any, serve_web: Any) -> Callable[..., str]:
    """Factory: a real worker and web app on settings ``overrides``; returns the web app's URL."""

    def start(**overrides: Any) -> str:
        settings = make_settings(**overrides)
        start_worker(settings)
        _, url = serve_web(settings)
        return str(url)

    return start
