"""``agent-signal pseudonym ID…``: how the logs and the audit trail name each id (worker/telemetry/pseudonyms.py).

Log lines and the audit trail never hold a user id (or a scope key, source or chain id), only its pseudonym, a
keyed hash of the deployment. To follow one user through the logs, print theirs and search for it. The key is
``AGENT_SIGNAL_PSEUDONYM_SECRET``, else the secret kept in Redis (``REDIS_URL``, or the Redis and key prefix of the
``make run`` stack of this checkout, joined as ``agent-signal worker`` joins it: producers/cli/reach/stack.py): an
operator's tool, like ``keys``, that needs what the deployment's processes have.
Prints one ``<id>\\t<pseudonym>`` line per id. It only reads the secret: none under that prefix is an error (exit 2),
not a new secret whose pseudonyms would match nothing the processes logged.
"""

from __future__ import annotations

import argparse
import sys

from producers.cli.inputs import an_id
from producers.cli.reach.stack import join_stack
from producers.cli.reach.target import CliError

__all__ = ["add_pseudonym_command"]


def cmd_pseudonym(args: argparse.Namespace) -> int:
    from worker.settings import load_settings
    from worker.store.server.client import redis_from_settings
    from worker.telemetry.pseudonyms import NoPseudonymSecret, load_pseudonyms

    settings = load_settings()
    if settings.pseudonym_secret is None:  # the secret kept in Redis: the stack's, key prefix and all
        settings, joined = join_stack(settings, need_broker=False)  # it sends no task
        if joined is not None:
            print(f"agent-signal pseudonym: {joined}", file=sys.stderr, flush=True)
    client = redis_from_settings(settings) if (settings.redis_url or settings.redis_cluster_url) else None
    try:
        if client is None and settings.pseudonym_secret is None:
            settings.require_redis_url()  # names what is missing
        pseudonyms = load_pseudonyms(client, settings, create=False)  # a new secret would match no log line
    except NoPseudonymSecret as exc:
        raise CliError(str(exc)) from None
    finally:
        if client is not None:
            client.close()
    for value in args.ids:
        print(f"{value}\t{pseudonyms.of(value)}")
    return 0


def add_pseudonym_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pseudonym", help="print how logs and the audit trail name each id (a keyed hash)")
    p.add_argument(
        "ids", nargs="+", type=an_id, metavar="ID", help="user ids (or scope keys, source or chain ids)"
    )
    p.set_defaults(func=cmd_pseudonym)
