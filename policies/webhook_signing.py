"""Outbound webhooks signed per the Standard Webhooks spec (standardwebhooks.com), with the
``standardwebhooks`` package: the sender's headers, and the check a receiver runs.

Each delivery carries ``webhook-id`` (the idempotency key: the same on every retry of one message),
``webhook-timestamp`` (seconds, the attempt's time) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>">``). Because the id and the timestamp are signed with the body, a captured request
cannot be replayed later (its timestamp leaves the receiver's tolerance window) nor under another id.

The secret: a ``whsec_<base64>`` secret (the spec's form) is used as the spec says, its decoded bytes being
the key; any other string is its UTF-8 bytes (so an existing ``AGENT_SIGNAL_AGENT_RUNNER_SECRET`` keeps
working; a receiver using another Standard Webhooks library passes ``whsec_`` + base64 of those bytes).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime

from standardwebhooks import Webhook, WebhookVerificationError

__all__ = ["DEFAULT_TOLERANCE_S", "WebhookRejected", "verify_webhook", "webhook_headers"]

DEFAULT_TOLERANCE_S = 300  # the spec's (and the package's) window: 5 minutes either way


class WebhookRejected(ValueError):
    """The request is not a valid signed webhook: missing headers, outside the window, or a bad signature."""


def _webhook(secret: str) -> Webhook:
    if not secret:
        raise ValueError("a webhook secret must not be empty")
    return Webhook(secret if secret.startswith("whsec_") else secret.encode())


def webhook_headers(
    secret: str, msg_id: str, body: bytes, *, timestamp_s: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers for one delivery attempt of ``body`` (``timestamp_s``: now)."""
    stamp = int(time.time()) if timestamp_s is None else timestamp_s
    signature = _webhook(secret).sign(msg_id, datetime.fromtimestamp(stamp, tz=UTC), body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": signature}


def verify_webhook(
    secret: str, body: bytes, headers: Mapping[str, str], *, tolerance_s: int = DEFAULT_TOLERANCE_S
) -> None:
    """What a receiver runs before acting: raise WebhookRejected unless ``headers`` sign this ``body`` with
    ``secret`` and the timestamp is within ``tolerance_s`` of now (at most the spec's 300 s)."""
    if not 0 < tolerance_s <= DEFAULT_TOLERANCE_S:
        raise ValueError(f"tolerance_s must be in 1..{DEFAULT_TOLERANCE_S}")
    lower = {name.lower(): value for name, value in headers.items()}
    stamp = lower.get("webhook-timestamp", "")
    if not stamp.isdigit():
        raise WebhookRejected("missing or malformed webhook-timestamp")
    if abs(time.time() - int(stamp)) > tolerance_s:
        raise WebhookRejected(f"webhook-timestamp is outside the {tolerance_s} s tolerance window")
    try:
        _webhook(secret).verify(body, lower, json_parse=False)
    except (WebhookVerificationError, ValueError) as exc:  # ValueError: a malformed signature or id
        raise WebhookRejected(str(exc) or "malformed webhook-signature") from None
