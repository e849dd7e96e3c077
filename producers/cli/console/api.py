"""The console verbs' one way to the HTTP API: the target (``--url``/``--token``, ``AGENT_SIGNAL_URL``, or the
``make run`` stack of this checkout; producers/cli/reach/target.py) and the calls, pages followed by their cursor.

These verbs exist over HTTP only (the routes hold the rules: roles, tenants, validation), so a target that is
Redis itself (``REDIS_URL``) is not one: without a URL or a stack, the error says how to give one. Every failure is a
:class:`~producers.cli.reach.target.CliError`: an API error answer is one line with its status, code, message and field
(exit 1); a server that cannot be reached, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from producers.cli.reach.target import Api, given_value, not_the_api, objects_in, quote_id, resolve_target
from producers.cli.stopped import STOPS, say_stopped, why_stopped

__all__ = [
    "Page",
    "act_on_every_page",
    "act_on_pages",
    "add_http_options",
    "collect_pages",
    "open_api",
    "positive_int",
    "quote_id",
    "say_more_follow",
]


def add_http_options(p: argparse.ArgumentParser) -> None:
    """``--url``, ``--token`` and ``--json`` on a console verb's parser."""
    p.add_argument(
        "--url",
        default=None,
        type=given_value("--url"),
        help="the HTTP API (default: AGENT_SIGNAL_URL, else the stack `make run` started in this checkout)",
    )
    p.add_argument(
        "--token",
        default=None,
        type=given_value("--token"),
        help="bearer API key or token (default: AGENT_SIGNAL_TOKEN, else the deprecated AGENT_SIGNAL_API_TOKEN); never printed",
    )
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")


def positive_int(text: str) -> int:
    """argparse's type for ``--limit``: a whole number from 1 (else a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def open_api(args: argparse.Namespace) -> Api:
    """The API this invocation talks to (close it: ``with open_api(args) as api``)."""
    return Api(resolve_target(args, tenant_is_direct=False, http_only=True))


def collect_pages(
    api: Api, path: str, params: dict[str, Any], *, key: str, total: int, page_max: int
) -> dict[str, Any]:
    """Up to ``total`` items of a cursor-paged listing (``{key: [...], "cursor"?}``), following the cursor; the
    answer is the API's first page (its other fields, such as ``total``, as they came) with every page's items
    under ``key`` and the cursor of the next item when more are left."""
    items: list[Any] = []
    cursor: str | None = None
    first: dict[str, Any] | None = None
    while True:
        query = {**params, "limit": min(page_max, total - len(items))}
        if cursor is not None:
            query["cursor"] = cursor
        page = api.call("GET", path, params={k: v for k, v in query.items() if v is not None})
        batch = api.objects(page, key, "GET", path)
        first = page if first is None else first
        taken = batch[: total - len(items)]
        items.extend(taken)
        # a page longer than asked for was cut: its cursor would skip what was cut, so none is given
        previous, cursor = cursor, page.get("cursor") if len(taken) == len(batch) else None
        if not cursor or cursor == previous or len(items) >= total:  # the end, or a cursor that stands still
            break
    body: dict[str, Any] = {name: value for name, value in (first or {}).items() if name != "cursor"}
    body[key] = items
    if cursor:
        body["cursor"] = cursor
    return body


def _count(total: Any) -> int:
    """A page's ``total``, 0 when it has none (or none that is a count)."""
    return total if isinstance(total, int) and not isinstance(total, bool) else 0


def say_more_follow(page: dict[str, Any], key: str, noun: str, order: str, limit: int) -> None:
    """On stderr, when a listing stopped at ``--limit`` with more left (its ``cursor``), how many were shown and
    how to see the rest: ``50 runs shown (newest first); more follow: raise --limit (now 50) to list them``."""
    if page.get("cursor"):
        shown = len(page[key])
        noun = noun.removesuffix("s") if shown == 1 else noun  # the nouns given are plurals: runs, receipts…
        print(
            f"{shown:,} {noun} shown ({order}); more follow: raise --limit (now {limit:,}) to list them",
            file=sys.stderr,
        )


Page = tuple[
    list[Any], int, bool
]  # (the page's items, the list's size when the first page was read, more follow)


def act_on_every_page(
    api: Api,
    listing: tuple[str, str, int],
    target: Callable[[dict[str, Any]], Any],
    act: Callable[[list[Any]], dict[str, Any]],
    done_key: str,
) -> dict[str, Any]:
    """``act`` on every item of a cursor-paged list as it stands when this starts, a page at a time (``listing``:
    its path, its items' key and its largest page), each item turned into what ``act`` takes by ``target``; the
    answers (``{done_key: [...], "notDead": [...]}``) merged into one of the same shape. Items that join the list
    meanwhile are newer than its first page: not taken. One request for all of them would outlast the CLI's
    timeout with enough of them. The count goes to stderr as :func:`act_on_pages` says."""
    path, key, page_max = listing

    def pages() -> Iterator[Page]:
        cursor: str | None = None
        while True:
            page = api.call("GET", path, params={"limit": page_max, **({"cursor": cursor} if cursor else {})})
            cursor = page.get("cursor")
            try:
                items = [target(item) for item in objects_in(page, key)]
            except ValueError as exc:
                raise not_the_api(api.url, "GET", path, f"with {exc}") from None
            except KeyError as exc:  # an item without its id
                raise not_the_api(api.url, "GET", path, f"with an item of {key!r} without {exc}") from None
            yield items, _count(page.get("total")), bool(cursor)
            if not cursor:
                return

    return act_on_pages(pages(), act, done_key)


def act_on_pages(
    pages: Iterator[Page], act: Callable[[list[Any]], dict[str, Any]], done_key: str
) -> dict[str, Any]:
    """``act`` on each page's items, the answers (``{done_key: [...], "notDead": [...]}``) merged into one of the
    same shape. When more than one page is needed, ``<done_key> N of M`` goes to stderr after each, ``M`` the
    size of the list when its first page was read (later pages' totals count items redriven meanwhile, dead
    again, or new). Stopped partway (Ctrl-C, stdout's reader gone: :mod:`producers.cli.stopped`), the count so
    far goes to stderr, and the stop on to main.py's exit code."""
    done: list[Any] = []
    not_done: list[Any] = []
    of: int | None = None
    try:
        for number, (items, total, more) in enumerate(pages):
            of = total if of is None else of
            if items:
                result = act(items)
                done += result.get(done_key) or []
                not_done += result.get("notDead") or []
            if more or number:  # more than one page: say how far it got
                print(f"{done_key} {len(done):,} of {of:,}", file=sys.stderr, flush=True)
    except STOPS as exc:
        counted = f"{done_key} {len(done):,} of {of or 0:,}" + (
            f" ({len(not_done):,} not dead)" if not_done else ""
        )
        say_stopped(f"{counted}, then {why_stopped(exc)}; run it again for the rest")
        raise
    return {done_key: done, "notDead": not_done}
