"""What an operator reads from a real ``agent-signal web`` process besides the API.

* The API docs pages work without a CDN: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) reference only
  same-origin files, every file they reference is served with its content type, and in Debian's Chromium, with
  every request that is not to the app aborted, Swagger UI lists the API's operations and ReDoc renders it.
* The access log: one structured line per request, with no bearer and no query string in it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from producers.http.access_log import ACCESS_LOGGER
from producers.http.docs_pages import ASSETS, ASSETS_DIR
from tests.conftest import wait_for
from tests.support.browser import chromium
from worker.ops.credentials import BOOTSTRAP_ID

pytestmark = pytest.mark.integration

CDNS = ("cdn.jsdelivr.net", "unpkg", "cdnjs", "fonts.googleapis", "fonts.gstatic", "cdn.redoc.ly")
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


class _References(HTMLParser):
    """Every URL a page makes the browser load: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        self.urls += [value for name, value in attrs if name == wanted and value]


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def web_url(make_settings: Any, start_web: Any) -> str:
    _, url = start_web(make_settings())
    return str(url)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_pages_load_only_packaged_files(web_url: str, page: str) -> None:
    """The page references only same-origin paths under /docs-assets/, names no CDN, and each referenced
    file answers 200 with its content type and the bytes of the vendored file."""
    response = httpx.get(web_url + page, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert not [cdn for cdn in CDNS if cdn in html], html
    references = _references(html)
    assert len(references) >= 2, references  # the script and the icon (and Swagger's stylesheet)
    for reference in references:
        parts = urlsplit(reference)
        assert not parts.scheme and not parts.netloc, f"{page} loads {reference} from elsewhere"
        assert reference.startswith("/docs-assets/"), reference
        asset = httpx.get(web_url + reference, timeout=10)
        assert asset.status_code == 200, reference
        name = reference.rsplit("/", 1)[1]
        assert asset.headers["content-type"].split(";")[0] == CONTENT_TYPES[Path(name).suffix], reference
        assert asset.content == (ASSETS_DIR / name).read_bytes(), reference
    csp = response.headers["content-security-policy"]
    script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
    assert "'self'" in script_src, csp


def test_only_the_listed_assets_are_served(web_url: str) -> None:
    """Every listed asset exists in the package; other names in (or outside) the directory are 404."""
    assert all((ASSETS_DIR / name).is_file() for name in ASSETS)
    for name in ("swagger-ui.LICENSE", "README.md", "..%2Fdocs_pages.py", "nope.js"):
        assert httpx.get(f"{web_url}/docs-assets/{name}", timeout=10).status_code == 404, name


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as instance:
        yield instance


def _offline_page(browser: Any, web_url: str) -> tuple[Any, list[str], list[str]]:
    """A page whose requests to anything but the app are aborted (and recorded), with its script errors."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    origin = urlsplit(web_url).netloc
    foreign: list[str] = []
    errors: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if urlsplit(url).scheme in ("data", "blob") or urlsplit(url).netloc == origin:
            request_route.continue_()
        else:
            foreign.append(url)
            request_route.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, foreign, errors


def test_swagger_ui_renders_offline(browser: Any, web_url: str, tmp_path: Path) -> None:
    """With the network limited to the app, Swagger UI shows the API's operations (POST /v1/events among
    them), asks for nothing elsewhere and raises no script error."""
    page, foreign, errors = _offline_page(browser, web_url)
    page.goto(web_url + "/docs")
    page.wait_for_selector(".opblock", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/v1/events" in path for path in paths), paths
    page.screenshot(path=str(tmp_path / "swagger-ui.png"))
    assert foreign == [] and errors == [], (foreign, errors)


def test_redoc_renders_offline(browser: Any, web_url: str, tmp_path: Path) -> None:
    """With the network limited to the app, ReDoc renders the API (its title and the operations menu)."""
    page, foreign, errors = _offline_page(browser, web_url)
    page.goto(web_url + "/redoc")
    page.wait_for_selector("h1", timeout=30_000)
    assert "Agent Signal" in page.locator("h1").first.inner_text()
    wait_for(lambda: page.locator("[role=menuitem]").count() > 0, timeout_s=30, what="ReDoc's menu")
    page.screenshot(path=str(tmp_path / "redoc.png"))
    assert foreign == [] and errors == [], (foreign, errors)


def _access_lines(log: str) -> list[dict[str, Any]]:
    lines = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("logger") == ACCESS_LOGGER:
            lines.append(record)
    return lines


def test_access_log_has_one_line_per_request_without_secrets(make_settings: Any, start_web: Any) -> None:
    """The web process's JSON log gets one access line per request with method, path, status, duration_ms
    and the credential id; neither the bearer (good or bad) nor the query string (``?token=…``) appears in
    the log at all."""
    key, wrong, secret = "bk-" + uuid.uuid4().hex, "as_" + uuid.uuid4().hex, "qs-" + uuid.uuid4().hex
    proc, url = start_web(make_settings(bootstrap_key=key))
    ok = httpx.get(f"{url}/v1/conversations?token={secret}", headers={"authorization": f"Bearer {key}"})
    assert ok.status_code == 200, ok.text
    refused = httpx.get(f"{url}/v1/dlq?token={secret}", headers={"authorization": f"Bearer {wrong}"})
    assert refused.status_code == 401

    def lines() -> list[dict[str, Any]]:
        found = [r for r in _access_lines(proc.log()) if r["path"] in ("/v1/conversations", "/v1/dlq")]
        return found if len(found) == 2 else []

    good, bad = wait_for(lines, timeout_s=30, what="two access lines")
    assert good["method"] == "GET" and good["path"] == "/v1/conversations" and good["status"] == 200
    assert good["credential"] == BOOTSTRAP_ID and good["tenant"] == "default"
    assert isinstance(good["duration_ms"], float) and good["duration_ms"] >= 0
    assert bad["path"] == "/v1/dlq" and bad["status"] == 401 and bad["credential"] is None
    log = proc.log()
    assert secret not in log and key not in log and wrong not in log
    assert "token=" not in log and "authorization" not in log.lower()


def test_favicon_answers_without_a_credential(make_settings: Any, start_web: Any) -> None:
    """Issue 28: every browser visit logged a 404 for /favicon.ico. It is the packaged icon now (PNG), public
    even with credentials configured, and its access line says 200; the console's page links it."""
    proc, url = start_web(make_settings(bootstrap_key="bk-" + uuid.uuid4().hex))
    icon = httpx.get(f"{url}/favicon.ico", timeout=10)
    assert icon.status_code == 200, icon.text
    assert icon.headers["content-type"] == "image/png"
    assert icon.content == (ASSETS_DIR / "favicon.png").read_bytes()
    assert "/favicon.ico" in _references(httpx.get(f"{url}/", timeout=10).text)

    def line() -> list[dict[str, Any]]:
        return [r for r in _access_lines(proc.log()) if r["path"] == "/favicon.ico"]

    (logged,) = wait_for(line, timeout_s=30, what="the favicon's access line")
    assert logged["status"] == 200
