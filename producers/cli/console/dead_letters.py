"""``dlq discard``: dead events leave the dead-letter list and stay as audit records (``POST /v1/dlq/discard``;
``GET /v1/dlq?state=discarded`` lists them with their reason); and what ``--all`` means for it and for ``dlq redrive``
over HTTP: every event dead when the command started, a page of at most 500 per request (:func:`act_on_every_dead`),
so a list of a hundred thousand is not one request that outlasts the CLI's timeout, and the count goes to stderr.

How the ``dlq`` verbs print, over HTTP and straight to Redis alike (the console's rule, table.py): ``dlq list`` a
row per dead event (:func:`print_dead_page`), ``dlq redrive`` and ``dlq discard`` a row per id with what became of it
(:func:`print_dead_results`); ``--json`` the JSON as it came."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from producers.cli.console.api import act_on_every_page, add_http_options, open_api
from producers.cli.console.table import Column, print_json, print_table, utc_ms
from producers.cli.inputs import an_id
from producers.cli.reach.target import Api

__all__ = ["act_on_every_dead", "add_discard_command", "print_dead_page", "print_dead_results"]

DEAD_PAGE_MAX = 500  # GET /v1/dlq's largest page, and so the most event ids one --all request sends

COLUMNS = (
    Column("EVENT ID", lambda r: r["eventId"], 40),
    Column("RESULT", lambda r: r["result"], 30),
)
DEAD_COLUMNS = (
    Column("EVENT ID", lambda r: r.get("eventId"), 30),
    Column("DIED (UTC)", lambda r: utc_ms(r.get("deadAt")), 19),
    Column("SOURCE TYPE", lambda r: r.get("sourceType") or _stored(r).get("sourceType"), 26),
    Column("SOURCE ID", lambda r: r.get("sourceId") or _stored(r).get("sourceId"), 20),
    Column("SCOPE", lambda r: r.get("scopeKey"), 24),
    Column("TRIES", lambda r: r.get("attempts"), 5),
    Column("ERROR", lambda r: r.get("error"), 60),
)


def _stored(record: dict[str, Any]) -> dict[str, Any]:
    """The stored source event of a dead event's record (an empty one when it is gone)."""
    event = record.get("event")
    return event if isinstance(event, dict) else {}


def print_dead_page(page: dict[str, Any], as_json: bool) -> None:
    """A page of ``GET /v1/dlq`` (or ``dlq_page``'s): ``--json`` as it is, else a row per dead event; while more
    follow, the ``--cursor`` of the next page on stderr either way."""
    if page.get("cursor"):
        print(f"more follow: --cursor {page['cursor']}", file=sys.stderr)
    if as_json:
        print_json(page)
        return
    total = page.get("total")
    empty = f"no dead events on this page ({total} in the list)" if total else "the dead-letter list is empty"
    print_table(list(page.get("events") or []), DEAD_COLUMNS, empty=empty)


def print_dead_results(result: dict[str, Any], done_key: str, as_json: bool, *, empty: str) -> int:
    """What ``dlq redrive`` or ``dlq discard`` did (``{done_key: [ids], "notDead": [ids]}``): ``--json`` as it is,
    else one row per id, ``done_key`` (``redriven``, ``discarded``) or not dead; exit 1 when one was not dead."""
    not_dead = list(result.get("notDead") or [])
    if as_json:
        print_json(result)
    else:
        rows = [{"eventId": i, "result": done_key} for i in result.get(done_key) or []]
        rows += [{"eventId": i, "result": "not dead: left as it is"} for i in not_dead]
        print_table(rows, COLUMNS, empty=empty)
    return 1 if not_dead else 0


def act_on_every_dead(
    api: Api, path: str, done_key: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """POST ``path`` (``/v1/dlq/redrive`` or ``/v1/dlq/discard``) for every dead event, a page of ``GET /v1/dlq``
    at a time (:func:`~producers.cli.console.api.act_on_every_page`); ``done_key``: ``redriven`` or
    ``discarded``."""
    return act_on_every_page(
        api,
        ("/v1/dlq", "events", DEAD_PAGE_MAX),
        lambda event: str(event["eventId"]),
        lambda ids: dict(api.call("POST", path, body={**(body or {}), "eventIds": ids})),
        done_key,
    )


def cmd_dlq_discard(args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all):
        print("agent-signal dlq discard: give event ids or --all (not both)", file=sys.stderr)
        return 2
    extra: dict[str, Any] = {} if args.reason is None else {"reason": args.reason}
    with open_api(args) as api:
        if args.all:
            result = act_on_every_dead(api, "/v1/dlq/discard", "discarded", extra)
        else:
            result = api.call("POST", "/v1/dlq/discard", body={"eventIds": list(args.ids), **extra})
    return print_dead_results(
        result, "discarded", args.json, empty="nothing to discard: the dead-letter list is empty"
    )


def add_discard_command(dsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dlq discard ID…|--all [--reason R]`` under ``dlq``."""
    d = dsub.add_parser("discard", help="drop dead events for good (kept as audit records): IDs, or --all")
    d.add_argument(
        "ids",
        nargs="*",
        type=an_id,
        metavar="ID",
        help="the dead events' ids (evt_…), as `dlq list` shows them",
    )
    d.add_argument(
        "--all",
        action="store_true",
        help="every dead event of the tenant (500 per request, the count on stderr)",
    )
    d.add_argument("--reason", metavar="R", help="why, kept with each audit record (at most 1000 characters)")
    add_http_options(d)
    d.set_defaults(func=cmd_dlq_discard)
