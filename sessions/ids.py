"""The session id rule: what ``/v1/sessions/{sessionId}`` takes, and what the SDK checks before it sends one.

``.`` and ``..`` are path segments a URL resolves away (``/v1/sessions/./context`` reaches the session named
``context``), and ``/`` would add segments of its own, so neither is an id.
"""

from __future__ import annotations

import re

__all__ = ["SESSION_ID", "SESSION_ID_RULE", "session_id_problem"]

SESSION_ID = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._:\-]{1,200}$")  # match whole (fullmatch): "$" passes a "\n"
SESSION_ID_RULE = "1-200 of A-Z a-z 0-9 . _ : -, and not . or .."


def session_id_problem(value: object) -> str | None:
    """None when ``value`` is a session id; else what the rule says it must be."""
    if isinstance(value, str) and SESSION_ID.fullmatch(value) is not None:
        return None
    return f"must be {SESSION_ID_RULE}"
