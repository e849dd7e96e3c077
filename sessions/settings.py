"""The agent sessions' settings (:class:`SessionLimitSettings`): the bounds of one session's state
(sessions/store.py ``SessionLimits``); over a cap → 413 ``session_full``, nothing stored. (Not
sessions/store.py ``SessionSettings``, which is one session's own switches: D-Mail, root, functions.)

A section of ``AGENT_SIGNAL_*`` like a plugin's (:class:`worker.settings.PluginSettings`), known to the engine's
boot check (worker/runtime/assembly.py ``SECTIONS``). Keyword arguments given to
:class:`~worker.settings.Settings` for these fields are kept as its extras and handed here by
:func:`session_limit_settings` (tests, embedding).
"""

from __future__ import annotations

from pydantic import Field

from worker.settings import PluginSettings, Settings, plugin_settings

__all__ = ["SessionLimitSettings", "session_limit_settings"]


class SessionLimitSettings(PluginSettings):
    """The sessions' section. The table of environment variables: docs/settings.md#agent-sessions."""

    session_ttl_s: int = Field(default=30 * 24 * 60 * 60, ge=1)  # idle session state expires; writes refresh
    max_session_messages: int = Field(default=10_000, ge=1)  # records in one session's context list
    max_session_bytes: int = Field(default=8 * 1024 * 1024, ge=1)  # its context records; its function state
    max_message_bytes: int = Field(default=256 * 1024, ge=1)  # one context message, D-Mail or artifact
    # sessions one user may have (their index); a new one past it -> 429 quota_exceeded naming userId
    max_sessions_per_user: int = Field(default=10_000, ge=1)


def session_limit_settings(settings: Settings) -> SessionLimitSettings:
    """The sessions' section: the environment plus the sessions' keyword extras given to ``settings``."""
    return plugin_settings(SessionLimitSettings, settings)
