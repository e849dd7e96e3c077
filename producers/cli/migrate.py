"""``agent-signal migrate receipts [--dry-run]``: move data stored by an earlier release to its current form,
straight in Redis (``REDIS_URL``), for every tenant: an operator's tool, run once after an upgrade
(docs/operations.md "Upgrading").

``receipts``: receipts stored before they were keyed by user (``receipt:<id>``) move to
``receipt:<userId>:<id>`` and the user's indexes, keeping their TTL. Prints one JSON object
``{"receipts": {"<tenant>": n, …}, "dryRun": bool}``. Idempotent.
"""

from __future__ import annotations

import argparse
import json

__all__ = ["add_migrate_command"]


def cmd_migrate(args: argparse.Namespace) -> int:
    from worker.keys.layout import DEFAULT_TENANT, Keys
    from worker.settings import load_settings
    from worker.store.client import redis_from_settings
    from worker.store.receipts import migrate_legacy_receipts

    settings = load_settings()
    client = redis_from_settings(settings)
    try:
        base = Keys(settings.key_prefix, DEFAULT_TENANT, settings.scope_buckets)
        tenants = sorted({DEFAULT_TENANT, *(str(t) for t in client.smembers(base.tenants))})
        moved = {
            tenant: migrate_legacy_receipts(
                client, base.for_tenant(tenant), ttl_s=settings.receipt_retention_s, dry_run=args.dry_run
            )
            for tenant in tenants
        }
    finally:
        client.close()
    print(json.dumps({"receipts": moved, "dryRun": bool(args.dry_run)}))
    return 0


def add_migrate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "migrate", help="move data of an earlier release to its current form (after an upgrade)"
    )
    msub = p.add_subparsers(dest="migrate_command", required=True, metavar="WHAT")
    m = msub.add_parser("receipts", help="receipts stored before they were keyed by user (receipt:<id>)")
    m.add_argument("--dry-run", action="store_true", help="count what would move; change nothing")
    p.set_defaults(func=cmd_migrate)
