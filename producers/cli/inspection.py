"""``inspect``, ``status`` and ``dlq``: looking at what the pipeline did.

Over the HTTP API (``--url``, ``AGENT_SIGNAL_URL`` or the ``make run`` stack of this checkout), else straight to
``REDIS_URL`` for one tenant (``--tenant``); see producers/cli/reach/target.py for the order.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from producers.cli.console import add_discard_command, dead_letters
from producers.cli.console.api import Page, act_on_pages
from producers.cli.console.dead_letters import act_on_every_dead
from producers.cli.reach.direct import direct_producer
from producers.cli.reach.target import Api, Target, add_target_options, quote_id, resolve_target

__all__ = ["add_inspection_commands"]

# The bounds of GET /v1/dlq's offset and limit (producers/http/routes/ops.py: a 422 over HTTP), kept here too so
# that straight to Redis the flags mean the same (the store would read --limit 0 as "all", -1 as "all but one").
MAX_DLQ_OFFSET = 1_000_000
MAX_DLQ_LIMIT = 500


def _producer(tenant: str | None) -> Any:
    return direct_producer(tenant or "default")


def _chain_ids(chain_id: str) -> list[str]:
    """The id as given, then as ``chain:ID`` (``msg_u1`` is read as ``chain:msg_u1``)."""
    return [chain_id] if chain_id.startswith("chain:") else [chain_id, f"chain:{chain_id}"]


def _find_chain(
    target: Target, chain_id: str, tenant: str | None, user: str | None = None
) -> dict[str, Any] | None:
    if target.http:
        with Api(target) as api:
            params = {"userId": user} if user else None
            for candidate in _chain_ids(chain_id):
                chain = api.call("GET", f"/v1/chains/{quote_id(candidate)}", params=params, missing_ok=True)
                if chain is not None:
                    return dict(chain)
        return None
    producer = _producer(tenant)
    try:
        for candidate in _chain_ids(chain_id):
            found: dict[str, Any] | None = producer.store.get_chain(producer.keys, candidate, user_id=user)
            if found is not None:
                return found
        return None
    finally:
        producer.close()


def cmd_inspect(args: argparse.Namespace) -> int:
    from producers.cli.chain_view import render_chain

    chain = _find_chain(resolve_target(args), args.chain_id, args.tenant, args.user)
    if chain is None:
        print(
            f"agent-signal inspect: no chain {args.chain_id!r} (not run yet, or past retention)",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(chain, indent=2) if args.json else render_chain(chain))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """An event's status by its event id (``evt_…``) or, over HTTP, by its source id."""
    target = resolve_target(args)
    record: dict[str, Any] | None
    if target.http:
        with Api(target) as api:
            record = api.call("GET", f"/v1/events/{quote_id(args.event_id)}", missing_ok=True)
    else:
        producer = _producer(args.tenant)
        try:
            record = producer.status(args.event_id)
        finally:
            producer.close()
    if record is None:
        how = (
            ""
            if target.http or args.event_id.startswith("evt_")
            else " (straight to Redis it takes an evt_… id)"
        )
        print(f"agent-signal status: no event {args.event_id!r}{how}", file=sys.stderr)
        return 1
    print(json.dumps(record, indent=2))
    return 0


def _print_dlq(page: dict[str, Any], as_json: bool) -> None:
    """A page of ``GET /v1/dlq`` (or ``dlq_page``'s): JSON as it is, or a row per event and, while more follow,
    the ``--cursor`` of the next page on stderr."""
    events, cursor = list(page.get("events") or []), page.get("cursor")
    if cursor:
        print(f"more follow: --cursor {cursor}", file=sys.stderr)
    if as_json:
        print(json.dumps(page, indent=2))
    elif not events and not page.get("total"):
        print("The dead-letter list is empty.")
    elif not events:
        print(f"No dead events on this page ({page.get('total')} in the list).")
    else:
        for ev in events:
            body = ev.get("event") or {}
            print(
                f"{ev['eventId']}  {body.get('sourceType')}  {body.get('sourceId')}  scope={ev.get('scopeKey')}  "
                f"attempts={ev.get('attempts')}\n    error: {ev.get('error', '-')}"
            )


def _dlq_http(args: argparse.Namespace, target: Target) -> int:
    with Api(target) as api:
        if args.dlq_command == "list":
            params: dict[str, Any] = {"offset": args.offset, "limit": args.limit}
            if args.cursor:
                params["cursor"] = args.cursor
            _print_dlq(api.call("GET", "/v1/dlq", params=params), args.json)
            return 0
        if args.all:  # a page of the list per request, the count on stderr (act_on_every_dead)
            result = act_on_every_dead(api, "/v1/dlq/redrive", "redriven")
        else:
            result = api.call("POST", "/v1/dlq/redrive", body={"eventIds": list(args.ids)})
    print(json.dumps(result))
    return 1 if result.get("notDead") else 0


def _dlq_direct(args: argparse.Namespace) -> int:
    from producers.sdk.dead_letters import redrive_events

    producer = _producer(args.tenant)
    try:
        if args.dlq_command == "list":
            from worker.ops.runs import dlq_page

            page = dlq_page(
                producer.store, producer.keys, offset=args.offset, limit=args.limit, cursor=args.cursor
            )
            _print_dlq(page.to_json_dict(), args.json)
            return 0
        if args.all:  # as over HTTP: a page at a time, the count on stderr (act_on_pages)
            result = act_on_pages(
                _dead_pages(producer), lambda ids: dict(redrive_events(producer, ids)), "redriven"
            )
        else:
            result = redrive_events(producer, args.ids)
    finally:
        producer.close()
    print(json.dumps(result))
    return 1 if result["notDead"] else 0


def _dead_pages(producer: Any) -> Iterator[Page]:
    """The ids dead now (straight to Redis), in pages of ``DEAD_PAGE_MAX``: those that die meanwhile wait."""
    store = producer.store
    ids = list(store.dlq_ids(store.keys.for_tenant(producer.tenant)))
    size = dead_letters.DEAD_PAGE_MAX
    for start in range(0, len(ids), size):
        yield ids[start : start + size], len(ids), start + size < len(ids)


def cmd_dlq(args: argparse.Namespace) -> int:
    if args.dlq_command == "redrive" and bool(args.ids) == bool(args.all):
        print("agent-signal dlq redrive: give event ids or --all (not both)", file=sys.stderr)
        return 2
    if args.dlq_command == "list" and args.cursor and args.offset:
        print("agent-signal dlq list: give --cursor or --offset, not both", file=sys.stderr)
        return 2
    target = resolve_target(args)
    return _dlq_http(args, target) if target.http else _dlq_direct(args)


def _bounded(low: int, high: int) -> Callable[[str], int]:
    """argparse's type for a whole number from ``low`` to ``high`` (else a usage error naming the flag, exit 2)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    return whole_number


def add_inspection_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inspect``, ``status``, ``dlq list``, ``dlq redrive`` and ``dlq discard``: looking at what the pipeline did."""
    p = sub.add_parser("inspect", help="a chain in five steps: source, signals, actions, results, edges")
    p.add_argument("chain_id")
    p.add_argument("--json", action="store_true", help="the stored chain document as JSON")
    p.add_argument(
        "--user", metavar="U", help="of a chain id several users' events share, the run of this user's event"
    )
    add_target_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("status", help="an event's status record (event id, or source id over HTTP)")
    p.add_argument("event_id", metavar="ID", help="evt_… or, over HTTP, the event's sourceId")
    add_target_options(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("dlq", help="the dead-letter list")
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    d = dsub.add_parser("list", help="dead events with payload, attempts and last error")
    d.add_argument("--json", action="store_true")
    d.add_argument(
        "--offset", type=_bounded(0, MAX_DLQ_OFFSET), default=0, help=f"0..{MAX_DLQ_OFFSET:,} (default 0)"
    )
    d.add_argument(
        "--limit", type=_bounded(1, MAX_DLQ_LIMIT), default=100, help=f"1..{MAX_DLQ_LIMIT} (default 100)"
    )
    d.add_argument(
        "--cursor",
        help="continue after the page whose cursor this is (printed while more follow; not with --offset)",
    )
    add_target_options(d)
    d = dsub.add_parser("redrive", help="requeue dead events: IDs, or --all")
    d.add_argument("ids", nargs="*")
    d.add_argument(
        "--all",
        action="store_true",
        help="every event dead now, 500 at a time (the count so far on stderr when more than one page)",
    )
    add_target_options(d)
    p.set_defaults(func=cmd_dlq)
    add_discard_command(dsub)  # with its own func: over HTTP only
