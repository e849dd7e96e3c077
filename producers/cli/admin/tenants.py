"""``agent-signal tenants delete TENANT --yes``: delete a tenant, everything it stores and its keys, over
``DELETE /v1/tenants/{tenant}`` or straight in Redis (``--redis``; worker/ops/tenant_deletion.py).

The target is resolved like every state verb (producers/cli/reach/target.py). Over HTTP the caller needs the root
credentials (the bootstrap key). The verb calls again until the deletion is ``done``, waiting what each answer
says, with one progress line per call on stderr (Redis keys removed so far; the wait for requests let in before
the revoke); then it prints the last answer as JSON, its ``keysRevoked`` and ``removed`` summed over the calls.
``--yes`` is required: nothing asks twice in a script.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from producers.cli.console.table import print_json
from producers.cli.reach.stack import join_stack
from producers.cli.reach.target import Api, Busy, CliError, add_target_options, resolve_target

__all__ = ["add_tenants_command"]

ANSWER = ("tenant", "state", "startedAt", "keysRevoked", "removed", "removedTotal", "retryAfterS")


def _counted(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _progress(answer: dict[str, Any]) -> None:
    removed = _counted(int(answer["removedTotal"]), "Redis key")
    if answer["state"] == "done":
        line = f"done: {removed} removed"
    else:
        revoked = int(answer["keysRevoked"])
        also = f", {_counted(revoked, 'API key')} revoked" if revoked else ""
        line = f"running: {removed} removed so far{also}; again in {answer['retryAfterS']}s"
    print(f"agent-signal tenants delete {answer['tenant']}: {line}", file=sys.stderr, flush=True)


def _until_done(
    call: Callable[[], dict[str, Any]], sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Call until the deletion is done; the last answer, with ``keysRevoked`` and ``removed`` summed over the calls
    (the whole run's, not the last call's)."""
    revoked = removed = 0
    while True:
        try:
            answer = call()
        except Busy as busy:  # another call holds the tenant (or an erasure of one of its users runs)
            print(
                f"agent-signal tenants delete: {busy}; again in {busy.retry_after_s}s",
                file=sys.stderr,
                flush=True,
            )
            sleep(max(1, busy.retry_after_s))
            continue
        _progress(answer)
        revoked, removed = revoked + int(answer["keysRevoked"]), removed + int(answer["removed"])
        if answer["state"] == "done":
            return {**answer, "keysRevoked": revoked, "removed": removed}
        sleep(max(1, int(answer["retryAfterS"])))


def _delete_http(args: argparse.Namespace) -> int:
    target = resolve_target(args, tenant_is_direct=False)
    if not target.http:
        return _delete_direct(args)
    with Api(target) as api:
        answer = _until_done(lambda: api.call("DELETE", f"/v1/tenants/{args.tenant}", require=ANSWER))
    print_json(answer)
    return 0


def _delete_direct(args: argparse.Namespace) -> int:
    from producers.http.settings import deletion_settle, door_settings
    from worker.keys.layout import Keys
    from worker.ops.credentials import CredentialError, CredentialStore
    from worker.ops.tenant_deletion import DeletionRunning, delete_tenant
    from worker.settings import load_settings
    from worker.store.server.client import redis_from_settings

    settings, joined = join_stack(load_settings(), need_broker=False)
    if joined is not None:
        print(f"agent-signal tenants: {joined}", file=sys.stderr, flush=True)
    door = door_settings(settings)
    client = redis_from_settings(settings)
    keys = Keys(settings.key_prefix)
    store = CredentialStore(client, keys)

    def one_call() -> dict[str, Any]:
        try:
            progress = delete_tenant(
                client, keys, store, args.tenant, actor="cli", settle=deletion_settle(settings, door)
            )
        except CredentialError as exc:
            raise CliError(f"TENANT: {exc}") from None
        except DeletionRunning as exc:
            raise Busy(str(exc), exc.retry_after_s) from None
        return progress.public()

    try:
        print_json(_until_done(one_call))
    finally:
        client.close()
    return 0


def cmd_tenants(args: argparse.Namespace) -> int:
    from worker.core.tenancy import BadTenant, check_tenant

    try:
        check_tenant(args.tenant)
    except BadTenant as exc:
        raise CliError(f"TENANT: {exc}") from None
    if not args.yes:
        raise CliError(
            f"deleting tenant {args.tenant!r} removes everything it stores and revokes its keys, for good: "
            "add --yes to go on"
        )
    if args.redis:
        if args.url or args.token:
            raise CliError("--redis goes straight to Redis: --url and --token do not apply")
        return _delete_direct(args)
    return _delete_http(args)


def add_tenants_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``tenants delete``."""
    p = sub.add_parser("tenants", help="tenants: delete one, with everything it stores and its keys")
    tsub = p.add_subparsers(dest="tenants_command", required=True, metavar="SUBCOMMAND")
    t = tsub.add_parser(
        "delete",
        help="revoke the tenant's keys and remove everything it stores; calls again until done (progress on "
        "stderr), then prints the last answer (keysRevoked and removed summed over the calls)",
    )
    t.add_argument("tenant", metavar="TENANT", help="the tenant to delete (not default)")
    t.add_argument("--yes", action="store_true", help="required: the deletion cannot be undone")
    add_target_options(t, tenant=False)
    t.add_argument(
        "--redis",
        action="store_true",
        help="straight to Redis (REDIS_URL, else the Redis of this checkout's `make run` stack), not its API",
    )
    p.set_defaults(func=cmd_tenants)
