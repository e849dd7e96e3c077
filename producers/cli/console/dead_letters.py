"""``dlq discard``: dead events leave the dead-letter list and stay as audit records (``POST /v1/dlq/discard``;
``GET /v1/dlq?state=discarded`` lists them with their reason)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from producers.cli.console.api import add_http_options, open_api
from producers.cli.console.table import Column, print_json, print_table

__all__ = ["add_discard_command"]

COLUMNS = (
    Column("EVENT ID", lambda r: r["eventId"], 40),
    Column("RESULT", lambda r: r["result"], 30),
)


def cmd_dlq_discard(args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all):
        print("agent-signal dlq discard: give event ids or --all (not both)", file=sys.stderr)
        return 2
    body: dict[str, Any] = {"all": True} if args.all else {"eventIds": list(args.ids)}
    if args.reason is not None:
        body["reason"] = args.reason
    with open_api(args) as api:
        result: dict[str, Any] = api.call("POST", "/v1/dlq/discard", body=body)
    not_dead = list(result.get("notDead") or [])
    if args.json:
        print_json(result)
    else:
        rows = [{"eventId": i, "result": "discarded"} for i in result.get("discarded") or []]
        rows += [{"eventId": i, "result": "not dead: left as it is"} for i in not_dead]
        print_table(rows, COLUMNS, empty="nothing to discard: the dead-letter list is empty")
    return 1 if not_dead else 0


def add_discard_command(dsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dlq discard ID…|--all [--reason R]`` under ``dlq``."""
    d = dsub.add_parser("discard", help="drop dead events for good (kept as audit records): IDs, or --all")
    d.add_argument("ids", nargs="*", metavar="ID")
    d.add_argument("--all", action="store_true", help="every dead event of the tenant")
    d.add_argument("--reason", metavar="R", help="why, kept with each audit record (at most 1000 characters)")
    add_http_options(d)
    d.set_defaults(func=cmd_dlq_discard)
