"""The console's operations from the command line, over the HTTP API: ``runs``, ``scopes``, ``events cancel``,
``receipts list``, ``outbox dead|redrive`` and ``dlq discard``. One module per verb group; ``api`` is their way to the server, ``table``
how they print (``--json``, or a table: see its module doc for the rule)."""

from __future__ import annotations

import argparse

from producers.cli.console.dead_letters import add_discard_command
from producers.cli.console.events import add_events_command
from producers.cli.console.outbox import add_outbox_command
from producers.cli.console.receipts import add_receipts_command
from producers.cli.console.runs import add_runs_command
from producers.cli.console.scopes import add_scopes_command

__all__ = ["add_console_commands", "add_discard_command"]


def add_console_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``runs``, ``scopes``, ``events``, ``receipts`` and ``outbox`` (``dlq discard`` joins ``dlq``: add_discard_command)."""
    add_runs_command(sub)
    add_scopes_command(sub)
    add_events_command(sub)
    add_receipts_command(sub)
    add_outbox_command(sub)
