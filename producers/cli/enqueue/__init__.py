"""``agent-signal enqueue FILE.jsonl``: one source event per line, straight to Redis or over HTTP.

``lines`` reads the file and checks each line on its own (UTF-8, strict JSON, nesting, an object); ``senders``
sends the events in batches (the engine's Producer on ``REDIS_URL``, or ``POST /v1/events``, where a batch the
server finds too large is split); ``command`` is the verb: its options, the progress bar, one rejection per bad
line on stderr and the summary last.
"""

from __future__ import annotations

from producers.cli.enqueue.command import add_enqueue_command

__all__ = ["add_enqueue_command"]
