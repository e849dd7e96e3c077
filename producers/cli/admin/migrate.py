"""``agent-signal migrate receipts|runs|bytes [--dry-run]``: move data stored by an earlier release to its current form,
straight in Redis, for every tenant: an operator's tool, run once after an upgrade (docs/operations.md
"Upgrading"). It talks to Redis itself, never to the HTTP API (no route does this), so it takes no ``--url`` or
``--token``: its Redis is ``REDIS_URL``, else the ``make run`` stack of this checkout, joined as ``agent-signal
worker`` joins it (producers/cli/reach/stack.py :func:`~producers.cli.reach.stack.join_stack`: the stack's Redis and key
prefix; one line on stderr says so).

``receipts``: receipts stored before they were keyed by user (``receipt:<id>``) move to
``receipt:<userId>:<id>`` and the user's indexes, keeping their TTL.

``bytes``: each tenant's stored-bytes count (``AGENT_SIGNAL_TENANT_MAX_BYTES``) is raised, day by day, to at least
the sum of its users' counts, which a release before it kept alone (docs/operations.md, "The tenant's stored
bytes").

``runs``: the source types whose runs index holds events admitted before the bucket's registry of types
(``runs:types``) existed are named in it, so the runs explorer lists those events by status and unfiltered.

Each prints one JSON object ``{"<what>": {"<tenant>": n, …}, "dryRun": bool}``, and a line per tenant on stderr
as it goes (each tenant's step scans the keyspace, ``runs`` once per scope bucket: on a large deployment, minutes;
``bytes`` scans once more first, for the tenants of sessions only, which no enqueue registered). Idempotent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_migrate_command"]


def cmd_migrate(args: argparse.Namespace) -> int:
    from producers.cli.reach.stack import join_stack
    from worker.keys.layout import DEFAULT_TENANT, Keys
    from worker.ops.runs import register_indexed_types
    from worker.settings import load_settings
    from worker.store.quotas import migrate_tenant_bytes, tenants_with_user_bytes
    from worker.store.receipts import migrate_legacy_receipts
    from worker.store.server.client import redis_from_settings

    settings, joined = join_stack(load_settings(), need_broker=False)  # it sends no task
    if joined is not None:
        print(f"agent-signal migrate: {joined}", file=sys.stderr, flush=True)
    settings.require_redis_url()  # neither REDIS_URL nor a stack: one line saying so
    steps: dict[str, Callable[[Any, Keys], int]] = {
        "bytes": lambda client, keys: migrate_tenant_bytes(client, keys, dry_run=args.dry_run),
        "receipts": lambda client, keys: migrate_legacy_receipts(
            client, keys, ttl_s=settings.receipt_retention_s, dry_run=args.dry_run
        ),
        "runs": lambda client, keys: register_indexed_types(
            client, keys, ttl_s=settings.dedupe_window_s, dry_run=args.dry_run
        ),
    }
    step = steps[args.migrate_command]
    client = redis_from_settings(settings)
    try:
        base = Keys(settings.key_prefix, DEFAULT_TENANT, settings.scope_buckets)
        tenants = sorted(
            {
                DEFAULT_TENANT,
                *(str(t) for t in client.smembers(base.tenants)),
                # a tenant of sessions only stored bytes without an event: the set above does not name it
                *(
                    tenants_with_user_bytes(client, settings.key_prefix)
                    if args.migrate_command == "bytes"
                    else ()
                ),
            }
        )
        moved: dict[str, int] = {}
        for n, tenant in enumerate(tenants, start=1):
            moved[tenant] = step(client, base.for_tenant(tenant))
            print(
                f"migrate {args.migrate_command}: tenant {n} of {len(tenants)} ({tenant}): {moved[tenant]}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        client.close()
    print(json.dumps({args.migrate_command: moved, "dryRun": bool(args.dry_run)}))
    return 0


# what ``--help`` says of every migrate verb: where it works, and why --url does not apply
WHERE = (
    "Straight in Redis, for every tenant: REDIS_URL, else the Redis of the `make run` stack of this checkout "
    "(joined as `agent-signal worker` joins it, and said on stderr). No HTTP route does this, so --url and "
    "--token do not apply."
)


def add_migrate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "migrate",
        help="move data of an earlier release to its current form (after an upgrade), straight in Redis",
        description=WHERE,
    )
    msub = p.add_subparsers(dest="migrate_command", required=True, metavar="WHAT")
    m = msub.add_parser(
        "receipts", help="receipts stored before they were keyed by user (receipt:<id>)", description=WHERE
    )
    m.add_argument("--dry-run", action="store_true", help="count what would move; change nothing")
    b = msub.add_parser(
        "bytes",
        help="raise each tenant's stored-bytes count to at least its users' (kept before the tenant quota)",
        description=WHERE,
    )
    b.add_argument(
        "--dry-run", action="store_true", help="count the bytes that would be added; change nothing"
    )
    r = msub.add_parser(
        "runs", help="name the source types of events admitted before runs:types existed", description=WHERE
    )
    r.add_argument("--dry-run", action="store_true", help="count what would be named; change nothing")
    p.set_defaults(func=cmd_migrate)
