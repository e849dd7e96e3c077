"""``scopes list``, ``scopes pause`` and ``scopes resume``: the console's Scopes page (``GET /v1/scopes``, its
pages followed up to ``--limit``; ``POST /v1/scopes/{scopeKey}/pause`` / ``resume``)."""

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
from producers.cli.console.table import Column, duration_ms, print_json, print_table, utc_ms
from producers.cli.inputs import an_id

__all__ = ["add_scopes_command"]

PAGE_MAX = 1000  # GET /v1/scopes's largest page

SCOPE_COLUMNS = (
    Column("SCOPE", lambda s: s.get("scopeKey"), 40),
    Column("STATE", lambda s: s.get("state"), 7),
    Column("INBOX", lambda s: s.get("inboxDepth"), 5),
    Column("PAUSED", lambda s: s.get("paused"), 6),
    Column("WAITING FOR", lambda s: duration_ms(s.get("headAgeMs")), 11),
    Column("PAUSED AT (UTC)", lambda s: utc_ms(s.get("pausedAt")), 19),
    Column("LEASE HOLDER", lambda s: s.get("leaseHolder"), 30),
)
CONTROL_COLUMNS = (
    Column("SCOPE", lambda s: s.get("scopeKey"), 60),
    Column("PAUSED", lambda s: s.get("paused"), 6),
    Column("CHANGED", lambda s: s.get("changed"), 7),
)


def cmd_scopes_list(args: argparse.Namespace) -> int:
    """Up to ``--limit`` scopes by scope key; when more are left, stderr says so (``--json``: the ``cursor``)."""
    with open_api(args) as api:
        page = collect_pages(
            api, "/v1/scopes", {"state": args.state}, key="scopes", total=args.limit, page_max=PAGE_MAX
        )
    if args.json:
        print_json(page)
    else:
        print_table(page["scopes"], SCOPE_COLUMNS, empty="no scope with queued events or paused")
    say_more_follow(page, "scopes", "scopes", "by scope key", args.limit)
    return 0


def cmd_scopes_control(args: argparse.Namespace) -> int:
    """``pause`` or ``resume`` (``args.scopes_command``) one scope."""
    with open_api(args) as api:
        answer = api.call("POST", f"/v1/scopes/{quote_id(args.scope)}/{args.scopes_command}")
    if args.json:
        print_json(answer)
    else:
        print_table([answer], CONTROL_COLUMNS, empty="")
    return 0


def add_scopes_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``scopes list``, ``scopes pause`` and ``scopes resume``."""
    p = sub.add_parser("scopes", help="scopes with queued events or paused; pause and resume one")
    ssub = p.add_subparsers(dest="scopes_command", required=True, metavar="SUBCOMMAND")
    s = ssub.add_parser(
        "list", help="scopes by state: busy, waiting, stuck, paused; follows the pages up to --limit"
    )
    s.add_argument("--state", metavar="S", help="busy, waiting, stuck or paused (the API checks it)")
    s.add_argument(
        "--limit",
        type=positive_int,
        default=200,
        metavar="N",
        help="scopes in all, by scope key (default 200)",
    )
    add_http_options(s)
    s.set_defaults(func=cmd_scopes_list)
    for verb, text in (
        ("pause", "hold a scope's events in its inbox (the one running finishes) until it is resumed"),
        ("resume", "run a paused scope's queued events again, in order"),
    ):
        s = ssub.add_parser(verb, help=text)
        s.add_argument("scope", type=an_id, metavar="SCOPE", help="the scope key, e.g. topic:t1")
        add_http_options(s)
        s.set_defaults(func=cmd_scopes_control)
