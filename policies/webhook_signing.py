"""Outbound webhooks signed per the Standard Webhooks spec (standardwebhooks.com), with the
``standardwebhooks`` package: the sender's headers, and the check a receiver runs.

Each delivery carries ``webhook-id`` (the idempotency key: the same on every retry of one message),
``webhook-timestamp`` (seconds, the attempt's time) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>">``). Because the id and the timestamp are signed with the body, a captured request
cannot be replayed later (its timestamp leaves the receiver's tolerance window) nor under another id.

The secret: a ``whsec_<base64>`` secret (the spec's form) is used as the spec says, its decoded bytes being
the key (strict base64, padding optional); any other string is its UTF-8 bytes (so an existing
``AGENT_SIGNAL_AGENT_RUNNER_SECRET`` keeps working; a receiver using another Standard Webhooks library passes
``whsec_`` + base64 of those bytes).

Rotating the secret: the sender signs with the new secret and, while receivers move over, with the previous one
too (``previous_secrets``): ``webhook-signature`` then holds one ``v1,…`` per secret, space-separated, as the
spec allows, and a receiver that checks with either secret accepts it. A receiver can likewise accept several
secrets at once (``verify_webhook`` takes a sequence). docs/self-iteration.md has the order of the steps.

Errors: :class:`WebhookRejected` is the request's fault (whatever its headers hold, nothing else escapes the
check of a request: a receiver that catches it answers 401, never 500). :class:`WebhookSecretError` and a
``tolerance_s`` out of range are the receiver's own configuration (plain ValueErrors, raised before any header
is read): an empty secret, or a ``whsec_`` one that is not base64 of at least one byte.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook, WebhookVerificationError

from worker.plugin import now_ms

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "WebhookRejected",
    "WebhookSecretError",
    "verify_webhook",
    "webhook_headers",
]

DEFAULT_TOLERANCE_S = 300  # the spec's (and the package's) window: 5 minutes either way
SECRET_PREFIX = "whsec_"
TIMESTAMP_S = re.compile(r"[0-9]{1,12}")  # ASCII digits only ("²".isdigit() is true); 12 reach year 33658


class WebhookRejected(ValueError):
    """The request is not a valid signed webhook: missing headers, outside the window, or a bad signature."""


class WebhookSecretError(ValueError):
    """The configured secret cannot sign or verify anything (a configuration error, not a rejected request)."""


def _key(secret: str) -> bytes:
    """The HMAC key of ``secret``: a ``whsec_`` secret's base64, strictly decoded; else its UTF-8 bytes."""
    if not secret:
        raise WebhookSecretError("a webhook secret must not be empty")
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error as exc:
        raise WebhookSecretError(
            f"a {SECRET_PREFIX} webhook secret must be base64 after its prefix: {exc}"
        ) from None
    if not key:
        raise WebhookSecretError(
            f"a {SECRET_PREFIX} webhook secret must hold at least one byte after its prefix"
        )
    return key


def _webhook(secret: str) -> Webhook:
    return Webhook(_key(secret))


def webhook_headers(
    secret: str,
    msg_id: str,
    body: bytes,
    *,
    timestamp_s: int | None = None,
    previous_secrets: Sequence[str] = (),
) -> dict[str, str]:
    """The three Standard Webhooks headers for one delivery attempt of ``body`` (``timestamp_s``: now), signed
    with ``secret`` and then with each of ``previous_secrets`` (a rotation under way; a repeat of ``secret`` is
    signed once)."""
    stamp = now_ms() // 1000 if timestamp_s is None else timestamp_s
    when = datetime.fromtimestamp(stamp, tz=UTC)
    text = body.decode()
    signatures: list[str] = []
    for each in (secret, *previous_secrets):
        signature = _webhook(each).sign(msg_id, when, text)
        if signature not in signatures:
            signatures.append(signature)
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": " ".join(signatures)}


def verify_webhook(
    secret: str | Sequence[str],
    body: bytes,
    headers: Mapping[str, str],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> None:
    """What a receiver runs before acting: raise WebhookRejected unless ``headers`` sign this ``body`` with
    ``secret`` (or with any one of a sequence of secrets: a rotation under way) and the timestamp (1 to 12 ASCII
    digits) is within ``tolerance_s`` of now (at most the spec's 300 s). A bad ``secret`` (WebhookSecretError;
    an empty sequence is one) or ``tolerance_s`` is a ValueError that is not WebhookRejected: the receiver's
    configuration, whatever the request."""
    if not 0 < tolerance_s <= DEFAULT_TOLERANCE_S:
        raise ValueError(f"tolerance_s must be in 1..{DEFAULT_TOLERANCE_S}")
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not secrets:
        raise WebhookSecretError("verify_webhook needs at least one secret")
    webhooks = [_webhook(each) for each in secrets]
    lower = {name.lower(): value for name, value in headers.items()}
    stamp = lower.get("webhook-timestamp", "")
    if not TIMESTAMP_S.fullmatch(stamp):
        raise WebhookRejected("missing or malformed webhook-timestamp (1 to 12 digits 0-9)")
    if abs(time.time() - int(stamp)) > tolerance_s:
        raise WebhookRejected(f"webhook-timestamp is outside the {tolerance_s} s tolerance window")
    problem = ""
    for webhook in webhooks:
        try:
            webhook.verify(body, lower, json_parse=False)
        except (WebhookVerificationError, ValueError) as exc:  # ValueError: a malformed signature or id
            problem = problem or str(exc) or "malformed webhook-signature"
        else:
            return
    raise WebhookRejected(problem)
