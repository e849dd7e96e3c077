"""``events cancel``: a queued event never runs; a running one stops before its next action
(``POST /v1/events/{eventId}/cancel``)."""

from __future__ import annotations

import argparse

from producers.cli.console.api import add_http_options, open_api, quote_id
from producers.cli.console.table import Column, print_json, print_table
from producers.cli.inputs import an_id

__all__ = ["add_events_command"]

COLUMNS = (
    Column("EVENT ID", lambda r: r.get("eventId"), 40),
    Column("STATUS", lambda r: r.get("status"), 10),
    Column("STOPS BEFORE NEXT ACTION", lambda r: r.get("cancelRequested"), 24),
)


def cmd_events_cancel(args: argparse.Namespace) -> int:
    with open_api(args) as api:
        answer = api.call("POST", f"/v1/events/{quote_id(args.id)}/cancel")
    if args.json:
        print_json(answer)
    else:
        print_table([answer], COLUMNS, empty="")
    return 0


def add_events_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``events cancel ID``."""
    p = sub.add_parser("events", help="act on one event")
    esub = p.add_subparsers(dest="events_command", required=True, metavar="SUBCOMMAND")
    e = esub.add_parser("cancel", help="cancel a queued or running event (its status becomes cancelled)")
    e.add_argument("id", type=an_id, metavar="ID", help="evt_… or a source id that names one event")
    add_http_options(e)
    e.set_defaults(func=cmd_events_cancel)
