"""A plugin with a deliverer given where its factory belongs (``deliverers={kind: deliver}``): ``Plugin(...)``
cannot tell the two apart (both take one argument), so it is found when a worker's child builds the deliverers:
``deliver(runtime)`` returns None, no deliver function."""

from __future__ import annotations

from worker.plugin import OutboxRecord, Plugin


def deliver(record: OutboxRecord) -> None:
    return None


def plugin() -> Plugin:
    return Plugin("broken-deliverer", deliverers={"broken-kind": deliver})  # type: ignore[dict-item]
