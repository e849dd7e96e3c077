"""``agent-signal keys create|list|revoke``: API keys, over ``/v1/keys`` or straight to Redis (``REDIS_URL``).

The target is resolved like every state verb (producers/cli/reach/target.py): ``--url``/``AGENT_SIGNAL_URL``, the
``make run`` stack of this checkout, else ``REDIS_URL``. Over HTTP the caller needs an ``admin`` key (its own
tenant) or the root credentials (the bootstrap key; anyone on a loopback stack with no credential configured).

``create`` prints one JSON object ``{"id","tenant","role","key"}``: the secret ``key`` is shown only there (only
its hash is stored). ``list`` prints one JSON array of keys without secrets, ``revoke`` the revoked key. All of them
through the console's ``print_json`` (indented, UTF-8), as every verb's JSON.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from producers.cli.console.table import print_json
from producers.cli.inputs import an_id
from producers.cli.reach.stack import join_stack
from producers.cli.reach.target import (
    Api,
    CliError,
    Target,
    add_target_options,
    quote_id,
    resolve_target,
)
from worker.ops.roles import ROLES

__all__ = ["add_keys_command"]


def _store() -> Any:
    """The credential store of the Redis this verb goes to, with the bootstrap key the environment sets here (a
    pod's ``AGENT_SIGNAL_BOOTSTRAP_KEY``): with one, no key made here is the deployment's first."""
    from producers.http.settings import door_settings
    from worker.keys.layout import Keys
    from worker.ops.credentials import CredentialStore
    from worker.settings import load_settings
    from worker.store.server.client import redis_from_settings

    settings, joined = join_stack(load_settings(), need_broker=False)  # REDIS_URL, else the stack's own Redis
    if joined is not None:
        print(f"agent-signal keys: {joined}", file=sys.stderr, flush=True)
    door = door_settings(settings)
    bootstrap = door.bootstrap_key.get_secret_value() if door.bootstrap_key is not None else door.api_token
    return CredentialStore(
        redis_from_settings(settings),
        Keys(settings.key_prefix),
        bootstrap_key=bootstrap,
        tenant_max_keys=settings.tenant_max_keys,
    )


CREATED = ("id", "tenant", "role", "key")


def _first_key_note(role: str, tenant: str) -> str:
    """What a deployment's first key changes, said on stderr when a key was made where no credential existed (no
    key, no bootstrap key): every call needs one from now on (README: make an admin key first; a key that is not
    admin cannot make more)."""
    note = "agent-signal keys create: the deployment's first key: every call needs a credential now (--token KEY)"
    if role == "admin":
        return note
    article = "an" if role[:1] in "aeiou" else "a"
    return (
        f"{note}; {article} {role} key cannot make more: `agent-signal keys create --tenant {tenant} --role admin "
        "--redis` makes an admin key of its tenant straight in Redis (REDIS_URL, else this checkout's make run "
        "stack)"
    )


def _keys_http(args: argparse.Namespace, target: Target) -> int:
    with Api(target) as api:
        if args.keys_command == "create":
            body = {"tenant": args.tenant, "role": args.role, "name": args.name or ""}
            created = api.call("POST", "/v1/keys", body=body, require=CREATED)
            print_json({name: created[name] for name in CREATED})
            if not target.token:  # made without a credential: the stack had none, and needs one from now on
                print(_first_key_note(args.role, args.tenant), file=sys.stderr)
            return 0
        if args.keys_command == "list":
            answer = api.call("GET", "/v1/keys", params={"tenant": args.tenant} if args.tenant else None)
            print_json(api.objects(answer, "keys", "GET", "/v1/keys"))
            return 0
        # a key id is key_<hex>: one with a slash names no key (and no route: the server would answer http_404)
        revoked = (
            None if "/" in args.id else api.call("DELETE", f"/v1/keys/{quote_id(args.id)}", missing_ok=True)
        )
    if revoked is None:
        print(f"agent-signal keys revoke: no key {args.id!r}", file=sys.stderr)
        return 1
    print_json(revoked)
    return 0


def _keys_direct(args: argparse.Namespace) -> int:
    from worker.ops.credentials import CredentialError
    from worker.ops.key_index import TenantBeingDeleted, TooManyKeys

    store = _store()
    try:
        if args.keys_command == "create":
            first = not store.configured()
            try:
                record, secret = store.create(args.tenant, args.role, args.name or "", actor="cli")
            # the flag at fault, as every verb names it (not the class)
            except (CredentialError, TooManyKeys, TenantBeingDeleted) as exc:
                raise CliError(f"--{exc.field}: {exc}" if exc.field else str(exc)) from None
            print_json({"id": record.id, "tenant": record.tenant, "role": record.role, "key": secret})
            if first:
                print(_first_key_note(args.role, args.tenant), file=sys.stderr)
            return 0
        if args.keys_command == "list":
            print_json([record.public() for record in store.list(args.tenant)])
            return 0
        revoked = store.revoke(args.id, actor="cli")
        if revoked is None:
            print(f"agent-signal keys revoke: no key {args.id!r}", file=sys.stderr)
            return 1
        print_json(revoked.public())
        return 0
    finally:
        store.client.close()


def _check_tenant_option(tenant: str | None) -> None:
    """A ``--tenant`` that is no tenant name is a CliError naming it (exit 2) before anything is read, as in every
    verb (producers/cli/reach/direct.py): ``keys list --tenant Acme`` printed ``[]``, as if it had no keys."""
    from worker.core.tenancy import BadTenant, check_tenant

    if tenant is None:
        return
    try:
        check_tenant(tenant)
    except BadTenant as exc:
        raise CliError(f"--tenant: {exc}") from None


def cmd_keys(args: argparse.Namespace) -> int:
    _check_tenant_option(getattr(args, "tenant", None))  # revoke has none
    if args.redis:  # straight to Redis whatever the HTTP target: the way back in once a stack needs a key
        if args.url or args.token:
            raise CliError("--redis goes straight to Redis: --url and --token do not apply")
        return _keys_direct(args)
    target = resolve_target(args, tenant_is_direct=False)
    return _keys_http(args, target) if target.http else _keys_direct(args)


def _add_redis_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        action="store_true",
        help="straight to Redis (REDIS_URL, else the Redis of this checkout's `make run` stack), not its API: "
        "an operator's way in, e.g. an admin key once the first key made the stack ask for one",
    )


def add_keys_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keys create``, ``keys list`` and ``keys revoke``."""
    p = sub.add_parser("keys", help="API keys: create (the secret is shown once), list, revoke")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="SUBCOMMAND")
    k = ksub.add_parser("create", help='a new key; prints {"id","tenant","role","key"}')
    k.add_argument("--tenant", required=True, help="the tenant the key belongs to (e.g. default)")
    k.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="what the key may do: the routes each role may call are in docs/security.md (Credentials)",
    )
    k.add_argument("--name", default="", help="a label for people (where the key is used)")
    add_target_options(k, tenant=False)
    _add_redis_option(k)
    k = ksub.add_parser("list", help="keys without secrets, as one JSON array")
    k.add_argument("--tenant", default=None, help="only this tenant's keys")
    add_target_options(k, tenant=False)
    _add_redis_option(k)
    k = ksub.add_parser("revoke", help="revoke a key (its user tokens stop working too)")
    k.add_argument("id", metavar="ID", type=an_id, help="the key id (key_…), as `keys list` shows it")
    add_target_options(k, tenant=False)
    _add_redis_option(k)
    p.set_defaults(func=cmd_keys)
