"""``outbox dead`` and ``outbox redrive``: outbound calls (webhooks, agent runs) that failed every attempt
(``GET /v1/outbox/dead``, followed up to ``--limit``), and sending them again (``POST /v1/outbox/redrive``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from producers.cli.console.api import (
    act_on_every_page,
    add_http_options,
    collect_pages,
    open_api,
    positive_int,
    say_more_follow,
)
from producers.cli.console.table import Column, print_json, print_table, utc_ms
from producers.cli.inputs import an_id
from producers.cli.reach.target import Api

__all__ = ["add_outbox_command"]

PAGE_MAX = 500  # GET /v1/outbox/dead's largest page

DEAD_COLUMNS = (
    Column("DIED (UTC)", lambda r: utc_ms(r.get("deadAt")), 19),
    Column("SCOPE", lambda r: r.get("scopeKey"), 28),
    Column("RECORD ID", lambda r: r.get("recordId"), 44),
    Column("TRIES", lambda r: r.get("attempts"), 5),
    Column("LAST ERROR", lambda r: r.get("lastError"), 60),
)
REDRIVE_COLUMNS = (
    Column("SCOPE", lambda r: r["scopeKey"], 28),
    Column("RECORD ID", lambda r: r["recordId"], 44),
    Column("RESULT", lambda r: r["result"], 24),
)


def cmd_outbox_dead(args: argparse.Namespace) -> int:
    with open_api(args) as api:
        page = collect_pages(api, "/v1/outbox/dead", {}, key="records", total=args.limit, page_max=PAGE_MAX)
    if args.json:
        print_json(page)
    else:
        print_table(page["records"], DEAD_COLUMNS, empty="no dead outbox records")
    say_more_follow(page, "records", "records", "latest first", args.limit)
    return 0


def cmd_outbox_redrive(args: argparse.Namespace) -> int:
    if args.all == bool(args.scope) or (args.scope and not args.record_id):
        if args.all and args.scope:
            problem = "both --all and SCOPE"
        elif args.scope:
            problem = "SCOPE without its RECORD_ID"
        else:
            problem = "no record"
        print(
            f"agent-signal outbox redrive: {problem}: give --all, or SCOPE and RECORD_ID (not both)",
            file=sys.stderr,
        )
        return 2
    with open_api(args) as api:
        if args.all:
            result = _redrive_every_dead(api)
        else:
            body = {"records": [{"scopeKey": args.scope, "recordId": args.record_id}]}
            result = api.call("POST", "/v1/outbox/redrive", body=body)
    not_dead = list(result.get("notDead") or [])
    if args.json:
        print_json(result)
    else:
        rows = [{**r, "result": "redriven"} for r in result.get("redriven") or []]
        rows += [{**r, "result": "not dead: left as it is"} for r in not_dead]
        print_table(rows, REDRIVE_COLUMNS, empty="nothing to redrive: no dead outbox records")
    return 1 if not_dead else 0


def _redrive_every_dead(api: Api) -> dict[str, Any]:
    """Every record dead when it starts, a page of ``GET /v1/outbox/dead`` per redrive request
    (:func:`~producers.cli.console.api.act_on_every_page`)."""
    return act_on_every_page(
        api,
        ("/v1/outbox/dead", "records", PAGE_MAX),
        lambda r: {"scopeKey": r["scopeKey"], "recordId": r["recordId"]},
        lambda records: dict(api.call("POST", "/v1/outbox/redrive", body={"records": records})),
        "redriven",
    )


def add_outbox_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``outbox dead [--limit N]`` and ``outbox redrive (--all | SCOPE RECORD_ID)``."""
    p = sub.add_parser("outbox", help="outbound calls (webhooks, agent runs) that failed every attempt")
    osub = p.add_subparsers(dest="outbox_command", required=True, metavar="SUBCOMMAND")
    d = osub.add_parser("dead", help="dead outbox records, latest first")
    d.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="records in all (default 100)"
    )
    add_http_options(d)
    d.set_defaults(func=cmd_outbox_dead)
    r = osub.add_parser("redrive", help="send dead outbox records again: SCOPE RECORD_ID, or --all")
    r.add_argument(
        "scope",
        nargs="?",
        type=an_id,
        metavar="SCOPE",
        help="the record's scope key (as `outbox dead` lists it)",
    )
    r.add_argument(
        "record_id",
        nargs="?",
        type=an_id,
        metavar="RECORD_ID",
        help="the record's id (as `outbox dead` lists it)",
    )
    r.add_argument(
        "--all",
        action="store_true",
        help="every dead outbox record of the tenant (500 a request, the count on stderr)",
    )
    add_http_options(r)
    r.set_defaults(func=cmd_outbox_redrive)
