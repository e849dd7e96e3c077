"""``agent-signal keys create|list|revoke``: API keys, straight to Redis (``REDIS_URL``).

``create`` prints one JSON object ``{"id","tenant","role","key"}``: the secret ``key`` is shown only there (only
its hash is stored). ``list`` prints one JSON array of keys without secrets, ``revoke`` the revoked key.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_keys_command"]


def _store() -> Any:
    from worker.credentials import CredentialStore
    from worker.keys import Keys
    from worker.redis_client import redis_from_settings
    from worker.settings import load_settings

    settings = load_settings()
    return CredentialStore(redis_from_settings(settings), Keys(settings.key_prefix))


def cmd_keys(args: argparse.Namespace) -> int:
    store = _store()
    try:
        if args.keys_command == "create":
            record, secret = store.create(args.tenant, args.role, args.name or "", actor="cli")
            print(json.dumps({"id": record.id, "tenant": record.tenant, "role": record.role, "key": secret}))
            return 0
        if args.keys_command == "list":
            print(json.dumps([record.public() for record in store.list(args.tenant)]))
            return 0
        revoked = store.revoke(args.id, actor="cli")
        if revoked is None:
            print(f"agent-signal keys revoke: no key {args.id!r}", file=sys.stderr)
            return 1
        print(json.dumps(revoked.public()))
        return 0
    finally:
        store.client.close()


def add_keys_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keys create``, ``keys list`` and ``keys revoke``."""
    from worker.credentials import ROLES

    p = sub.add_parser("keys", help="API keys: create (the secret is shown once), list, revoke")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="SUBCOMMAND")
    k = ksub.add_parser("create", help='a new key; prints {"id","tenant","role","key"}')
    k.add_argument("--tenant", required=True, help="the tenant the key belongs to (e.g. default)")
    k.add_argument("--role", required=True, choices=ROLES)
    k.add_argument("--name", default="", help="a label for people (where the key is used)")
    k = ksub.add_parser("list", help="keys without secrets, as one JSON array")
    k.add_argument("--tenant", default=None, help="only this tenant's keys")
    k = ksub.add_parser("revoke", help="revoke a key (its user tokens stop working too)")
    k.add_argument("id", help="the key id (key_…)")
    p.set_defaults(func=cmd_keys)
