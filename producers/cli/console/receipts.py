"""``receipts list``: one user's receipts, newest first, across agents and topics or narrowed to one
(``GET /v1/receipts``; the pages are followed up to ``--limit``)."""

from __future__ import annotations

import argparse

from producers.cli.console.api import (
    add_http_options,
    collect_pages,
    open_api,
    positive_int,
    say_more_follow,
)
from producers.cli.console.table import Column, print_json, print_table, utc_ms
from producers.cli.inputs import an_id

__all__ = ["add_receipts_command"]

PAGE_MAX = 50  # GET /v1/receipts's largest page

COLUMNS = (
    Column("CREATED (UTC)", lambda r: utc_ms(r.get("createdAt")), 19),
    Column("KIND", lambda r: r.get("kind"), 8),
    Column("STATUS", lambda r: r.get("status"), 9),
    Column("AGENT", lambda r: r.get("agentId"), 16),
    Column("TOPIC", lambda r: r.get("topicId"), 16),
    Column("SOURCE ID", lambda r: r.get("sourceId"), 20),
    Column("TITLE", lambda r: r.get("title"), 50),
)


def cmd_receipts_list(args: argparse.Namespace) -> int:
    params = {"userId": args.user, "agentId": args.agent, "topicId": args.topic}
    with open_api(args) as api:
        page = collect_pages(api, "/v1/receipts", params, key="receipts", total=args.limit, page_max=PAGE_MAX)
    if args.json:
        print_json(page)
    else:
        print_table(page["receipts"], COLUMNS, empty=f"no receipts for user {args.user}")
    say_more_follow(page, "receipts", "receipts", "newest first", args.limit)
    return 0


def add_receipts_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``receipts list --user U [--agent A] [--topic T] [--limit N]``."""
    p = sub.add_parser("receipts", help="what the pipeline did for a user (memories, skills, reviews)")
    rsub = p.add_subparsers(dest="receipts_command", required=True, metavar="SUBCOMMAND")
    r = rsub.add_parser("list", help="one user's receipts, newest first")
    r.add_argument("--user", required=True, type=an_id, metavar="U", help="the user (required)")
    r.add_argument("--agent", type=an_id, metavar="A", help="only this agent's")
    r.add_argument("--topic", type=an_id, metavar="T", help="only this topic's")
    r.add_argument("--limit", type=positive_int, default=20, metavar="N", help="receipts in all (default 20)")
    add_http_options(r)
    r.set_defaults(func=cmd_receipts_list)
