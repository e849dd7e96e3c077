"""``inspect``, ``status`` and ``dlq``: looking at what the pipeline did (straight to Redis, one tenant)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_inspection_commands", "tenant_option"]


def _producer(tenant: str) -> Any:
    from producers._cli import _producer as producer

    return producer(tenant)


def cmd_inspect(args: argparse.Namespace) -> int:
    from producers._inspect import render_chain

    producer = _producer(args.tenant)
    try:
        chain = producer.store.get_chain(args.chain_id)
        if chain is None and not args.chain_id.startswith("chain:"):
            chain = producer.store.get_chain(f"chain:{args.chain_id}")
    finally:
        producer.close()
    if chain is None:
        print(
            f"agent-signal inspect: no chain {args.chain_id!r} (not run yet, or past retention)",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(chain, indent=2) if args.json else render_chain(chain))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    producer = _producer(args.tenant)
    try:
        record = producer.status(args.event_id)
    finally:
        producer.close()
    if record is None:
        print(f"agent-signal status: no event {args.event_id!r}", file=sys.stderr)
        return 1
    print(json.dumps(record, indent=2))
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    from producers._ops import redrive_events

    producer = _producer(args.tenant)
    try:
        if args.dlq_command == "list":
            events = producer.store.dlq_list(offset=args.offset, limit=args.limit)
            if args.json:
                print(json.dumps({"events": events, "total": producer.store.dlq_size()}, indent=2))
            elif not events:
                print("The dead-letter list is empty.")
            else:
                for ev in events:
                    body = ev["event"]
                    print(
                        f"{ev['eventId']}  {body.get('sourceType')}  {body.get('sourceId')}  scope={ev['scopeKey']}  "
                        f"attempts={ev['attempts']}\n    error: {ev.get('error', '-')}"
                    )
            return 0
        if not args.all and not args.ids:
            print("agent-signal dlq redrive: give event ids or --all", file=sys.stderr)
            return 2
        result = redrive_events(producer, None if args.all else args.ids)
        print(json.dumps(result))
        return 1 if result["notDead"] else 0
    finally:
        producer.close()


# ---- processes ---------------------------------------------------------------------------------------


def tenant_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tenant",
        default="default",
        help="the tenant whose data to use when talking to Redis directly (default: default; over --url the "
        "credential decides)",
    )


def add_inspection_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inspect``, ``status``, ``dlq list`` and ``dlq redrive``: looking at what the pipeline did."""
    p = sub.add_parser("inspect", help="a chain in five steps: source, signals, actions, results, edges")
    p.add_argument("chain_id")
    p.add_argument("--json", action="store_true", help="the stored chain document as JSON")
    tenant_option(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("status", help="an event's status record")
    p.add_argument("event_id")
    tenant_option(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("dlq", help="the dead-letter list")
    tenant_option(p)
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    d = dsub.add_parser("list", help="dead events with payload, attempts and last error")
    d.add_argument("--json", action="store_true")
    d.add_argument("--offset", type=int, default=0)
    d.add_argument("--limit", type=int, default=100)
    d = dsub.add_parser("redrive", help="requeue dead events: IDs, or --all")
    d.add_argument("ids", nargs="*")
    d.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_dlq)
