"""``runs list`` and ``runs show``: the console's Runs page from the command line (``GET /v1/events``,
``GET /v1/events/{eventId}``)."""

from __future__ import annotations

import argparse

from producers.cli.console.api import (
    add_http_options,
    collect_pages,
    open_api,
    positive_int,
    quote_id,
    say_more_follow,
)
from producers.cli.console.table import Column, print_json, print_record, print_table, utc_ms
from producers.cli.inputs import an_id

__all__ = ["add_runs_command"]

PAGE_MAX = 200  # GET /v1/events's largest page

RUN_COLUMNS = (
    Column("EVENT ID", lambda r: r.get("eventId"), 30),
    Column("STATUS", lambda r: r.get("status"), 10),
    Column("SOURCE TYPE", lambda r: r.get("sourceType"), 26),
    Column("SOURCE ID", lambda r: r.get("sourceId"), 20),
    Column("SCOPE", lambda r: r.get("scopeKey"), 24),
    Column("TRIES", lambda r: r.get("attempts"), 5),
    Column("ENQUEUED (UTC)", lambda r: utc_ms(r.get("enqueuedAt")), 19),
    Column("ERROR", lambda r: r.get("error"), 40),
)
ATTEMPT_COLUMNS = (
    Column("RUN", lambda a: a.get("run"), 3),
    Column("ATTEMPT", lambda a: a.get("attempt"), 7),
    Column("STATUS", lambda a: a.get("status"), 9),
    Column("STARTED (UTC)", lambda a: utc_ms(a.get("startedAt")), 19),
    Column("FINISHED (UTC)", lambda a: utc_ms(a.get("finishedAt")), 19),
    Column("ERROR", lambda a: a.get("error"), 60),
)
DETAIL_FIELDS = (
    "eventId",
    "status",
    "sourceType",
    "sourceId",
    "scopeKey",
    "userId",
    "chainId",
    "attempts",
    "duplicates",
    "error",
)
DETAIL_TIMES = ("enqueuedAt", "finishedAt")


def cmd_runs_list(args: argparse.Namespace) -> int:
    params = {
        "status": args.status,
        "sourceType": args.source_type,
        "scopeKey": args.scope,
        "userId": args.user,
    }
    with open_api(args) as api:
        page = collect_pages(api, "/v1/events", params, key="events", total=args.limit, page_max=PAGE_MAX)
    if args.json:
        print_json(page)
    else:
        print_table(page["events"], RUN_COLUMNS, empty="no runs")
    say_more_follow(page, "events", "runs", "newest first", args.limit)
    return 0


def cmd_runs_show(args: argparse.Namespace) -> int:
    with open_api(args) as api:
        run = api.call("GET", f"/v1/events/{quote_id(args.id)}")
    if args.json:
        print_json(run)
        return 0
    pairs = [(name, run.get(name)) for name in DETAIL_FIELDS]
    pairs += [(name, f"{utc_ms(run[name])} UTC" if utc_ms(run.get(name)) else None) for name in DETAIL_TIMES]
    pairs.append(("receipts", len(run.get("receipts") or []) or None))
    pairs.append(("outbound calls", len(run.get("outbox") or []) or None))
    print_record(pairs)
    print()
    print_table(list(run.get("attemptsHistory") or []), ATTEMPT_COLUMNS, empty="no attempts yet")
    return 0


def add_runs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``runs list`` and ``runs show``."""
    p = sub.add_parser("runs", help="events and their runs, like the console's Runs page")
    rsub = p.add_subparsers(dest="runs_command", required=True, metavar="SUBCOMMAND")
    r = rsub.add_parser("list", help="events newest first, filtered; follows the pages up to --limit")
    r.add_argument(
        "--status", help="queued, processing, done, dead, cancelled, discarded or erased (the API checks it)"
    )
    r.add_argument("--source-type", metavar="T", help="only this source type")
    r.add_argument("--scope", type=an_id, metavar="K", help="only this scope key")
    r.add_argument("--user", type=an_id, metavar="U", help="only this user's events")
    r.add_argument("--limit", type=positive_int, default=50, metavar="N", help="events in all (default 50)")
    add_http_options(r)
    r.set_defaults(func=cmd_runs_list)
    r = rsub.add_parser("show", help="one event: its status, its attempts (with errors), its receipts")
    r.add_argument("id", type=an_id, metavar="ID", help="evt_… or a source id that names one event")
    add_http_options(r)
    r.set_defaults(func=cmd_runs_show)
