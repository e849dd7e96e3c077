"""Which source types the door admits. The engine names none: they come from the loaded plugins.

The accepted set is the union of the loaded plugins' ``Plugin.source_types`` (LobeHub's 17 and Agent Signal's own
live in the shipped plugins under ``policies/``) and ``AGENT_SIGNAL_EXTRA_SOURCE_TYPES``; with
``AGENT_SIGNAL_ALLOW_UNKNOWN_SOURCE_TYPES`` true any type is admitted. An event of another type is refused at the
door with ``unknown_source_type`` (worker/intake/source_event.py ``parse_event``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SourceTypePolicy"]


class SourceTypePolicy:
    """Decides whether a source type is accepted: one of ``extra`` (the plugins' declared types and
    ``AGENT_SIGNAL_EXTRA_SOURCE_TYPES``: worker/intake/emitter.py), or any when ``allow_unknown``."""

    def __init__(self, *, allow_unknown: bool = False, extra: Iterable[str] = ()) -> None:
        self.allow_unknown = allow_unknown
        self.known = frozenset(extra)

    def accepts(self, source_type: str) -> bool:
        return self.allow_unknown or source_type in self.known

    def nearest(self, source_type: str) -> str | None:
        """The known type ``source_type`` is most likely a typo of, or None (for a refusal's message)."""
        import difflib  # only on a refusal

        near = difflib.get_close_matches(source_type, sorted(self.known), n=1)
        return near[0] if near else None
