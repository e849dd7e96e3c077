"""``inspect``, ``status`` and ``dlq``: looking at what the pipeline did.

Over the HTTP API (``--url``, ``AGENT_SIGNAL_URL`` or the ``make run`` stack of this checkout), else straight to
``REDIS_URL`` for one tenant (``--tenant``); see producers/cli/reach/target.py for the order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from producers.cli.console import add_discard_command, dead_letters
from producers.cli.console.api import Page, act_on_pages
from producers.cli.console.dead_letters import act_on_every_dead, print_dead_page, print_dead_results
from producers.cli.console.table import print_json
from producers.cli.inputs import an_id
from producers.cli.reach.direct import direct_producer
from producers.cli.reach.target import (
    Api,
    CliError,
    Target,
    add_target_options,
    not_the_api,
    quote_id,
    resolve_target,
)

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
) -> tuple[dict[str, Any], str] | None:
    """The chain (by its id as given, then as ``chain:ID``) and the path of the request that found it (empty
    straight to Redis); None when there is none. Over HTTP an answer without the ``envelope`` and ``record``
    objects of a stored chain is CliError (exit 2): not the API's."""
    if target.url is not None:
        with Api(target) as api:
            params = {"userId": user} if user else None
            for candidate in _chain_ids(chain_id):
                path = f"/v1/chains/{quote_id(candidate)}"
                chain = api.call("GET", path, params=params, missing_ok=True)
                if chain is None:
                    continue
                missing = [
                    repr(part) for part in ("envelope", "record") if not isinstance(chain.get(part), dict)
                ]
                if missing:
                    raise not_the_api(target.url, "GET", path, f"with no {' or '.join(missing)} object")
                return chain, path
        return None
    producer = _producer(tenant)
    try:
        for candidate in _chain_ids(chain_id):
            found: dict[str, Any] | None = producer.store.get_chain(producer.keys, candidate, user_id=user)
            if found is not None:
                return found, ""
        return None
    finally:
        producer.close()


def cmd_inspect(args: argparse.Namespace) -> int:
    from producers.cli.chain_view import NotAChain, render_chain

    target = resolve_target(args)
    found = _find_chain(target, args.chain_id, args.tenant, args.user)
    if found is None:
        of_user = f" of user {args.user!r}" if args.user else ""  # the chain may be another user's
        print(
            f"agent-signal inspect: no chain {args.chain_id!r}{of_user} (not run yet, past retention, or its run "
            "failed: a failed run keeps no chain, and `agent-signal runs show EVENT_ID` has its error)",
            file=sys.stderr,
        )
        return 1
    chain, path = found
    if args.json:
        print_json(chain)
        return 0
    try:
        text = render_chain(chain)
    except NotAChain as exc:
        if target.url is None:
            raise CliError(f"the stored chain {args.chain_id!r} does not read as a chain: {exc}") from None
        raise not_the_api(target.url, "GET", path, f"with a chain {exc}") from None
    print(text)
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
    print_json(record)
    return 0


REDRIVE_EMPTY = "nothing to redrive: the dead-letter list is empty"


def _dlq_http(args: argparse.Namespace, target: Target) -> int:
    with Api(target) as api:
        if args.dlq_command == "list":
            params: dict[str, Any] = {"offset": args.offset, "limit": args.limit}
            if args.cursor:
                params["cursor"] = args.cursor
            page = api.call("GET", "/v1/dlq", params=params)
            api.objects(page, "events", "GET", "/v1/dlq")  # a page of dead events, or not the API
            print_dead_page(page, args.json)
            return 0
        if args.all:  # a page of the list per request, the count on stderr (act_on_every_dead)
            result = act_on_every_dead(api, "/v1/dlq/redrive", "redriven")
        else:
            result = api.call("POST", "/v1/dlq/redrive", body={"eventIds": list(args.ids)})
    return print_dead_results(result, "redriven", args.json, empty=REDRIVE_EMPTY)


def _dlq_direct(args: argparse.Namespace) -> int:
    from producers.sdk.dead_letters import redrive_events

    producer = _producer(args.tenant)
    try:
        if args.dlq_command == "list":
            from worker.ops.runs import BadDlqCursor, dlq_page

            try:
                page = dlq_page(
                    producer.store, producer.keys, offset=args.offset, limit=args.limit, cursor=args.cursor
                )
            except BadDlqCursor:  # as over HTTP, where the 422 names the field
                raise CliError("--cursor must be a cursor a page printed (<ms>:<eventId>)") from None
            print_dead_page(page.to_json_dict(), args.json)
            return 0
        if args.all:  # as over HTTP: a page at a time, the count on stderr (act_on_pages)
            result = act_on_pages(
                _dead_pages(producer), lambda ids: dict(redrive_events(producer, ids)), "redriven"
            )
        else:
            result = dict(redrive_events(producer, args.ids))
    finally:
        producer.close()
    return print_dead_results(result, "redriven", args.json, empty=REDRIVE_EMPTY)


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
    p.add_argument(
        "chain_id",
        type=an_id,
        metavar="CHAIN_ID",
        help="the chain's id: chain:SOURCE_ID, or the source id alone (msg_u1 is read as chain:msg_u1)",
    )
    p.add_argument("--json", action="store_true", help="the stored chain document as JSON")
    p.add_argument(
        "--user",
        type=an_id,
        metavar="U",
        help="of a chain id several users' events share, the run of this user's event",
    )
    add_target_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("status", help="an event's status record (event id, or source id over HTTP)")
    p.add_argument("event_id", type=an_id, metavar="ID", help="evt_… or, over HTTP, the event's sourceId")
    add_target_options(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("dlq", help="the dead-letter list")
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    d = dsub.add_parser(
        "list",
        help="dead events: a row each (id, when it died, source, scope, tries, last error); --json adds the payloads",
    )
    d.add_argument(
        "--json",
        action="store_true",
        help='print the page as JSON ({"events":[…],"total","cursor"?}) instead of a table',
    )
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
        help="every event dead now, 500 at a time (the count so far on stderr when more than one page)",
    )
    d.add_argument(
        "--json",
        action="store_true",
        help='print {"redriven":[…],"notDead":[…]} instead of a table',
    )
    add_target_options(d)
    p.set_defaults(func=cmd_dlq)
    add_discard_command(dsub)  # with its own func: over HTTP only
