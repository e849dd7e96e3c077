"""Pseudonyms: how log lines and the audit trail name a user (or a scope, source or chain) without its id.

A pseudonym is ``pn_`` and the first 16 hex digits of HMAC-SHA256(key, id). The key is
``AGENT_SIGNAL_PSEUDONYM_SECRET`` (at least 32 characters) or, when that is unset, a random secret created
once in Redis with ``SET NX`` (:attr:`worker.keys.layout.Keys.pseudonym_secret`), as the user-token secret is, so
every web and worker process of a deployment gives one id the same pseudonym and an operator can follow a
user through the logs (``agent-signal pseudonym ID`` prints one).

What it means for linkability: without the key, a pseudonym says nothing about the id (no dictionary of
likely user ids can be hashed against it, which an unsalted SHA-256 allowed). Whoever holds the key (the
setting, or Redis access) can compute the pseudonym of a user id they already know, and so find that user's
lines in logs kept after the user was erased. Changing the secret (or deleting the stored key while no
process runs) makes every older pseudonym unlinkable, for the operator too: the logs written before it can
no longer be joined with the ones after.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from redis import Redis

from worker.keys.layout import Keys
from worker.settings import Settings

__all__ = ["MIN_PSEUDONYM_SECRET_CHARS", "PREFIX", "NoPseudonymSecret", "Pseudonyms", "load_pseudonyms"]

PREFIX = "pn_"
MIN_PSEUDONYM_SECRET_CHARS = 32
DIGEST_HEX_CHARS = 16  # 64 bits: collisions among a deployment's ids are negligible, and lines stay short


@dataclass(frozen=True, slots=True)
class Pseudonyms:
    """The keyed hash of one deployment (repr shows no key)."""

    key: bytes

    def __repr__(self) -> str:
        return "Pseudonyms(<key>)"

    def of(self, value: str) -> str:
        """The pseudonym of ``value`` (an id of any kind: the same text always gives the same pseudonym)."""
        digest = hmac.new(self.key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
        return PREFIX + digest[:DIGEST_HEX_CHARS]


class NoPseudonymSecret(ValueError):
    """No pseudonym secret is kept under this key prefix, and the caller only reads (``create=False``)."""


def load_pseudonyms(client: Redis | None, settings: Settings, *, create: bool = True) -> Pseudonyms:
    """The deployment's pseudonyms: from the setting, else the secret kept in Redis (created once; ``client``
    is needed then). ``create=False`` only reads it: none there is :class:`NoPseudonymSecret` (the operator's
    ``pseudonym`` verb: a pseudonym of a new secret would match nothing the processes logged)."""
    configured = settings.pseudonym_secret
    if configured is not None:
        return Pseudonyms(configured.get_secret_value().encode("utf-8"))
    if client is None:
        raise ValueError(
            "no Redis to keep the pseudonym secret in, and AGENT_SIGNAL_PSEUDONYM_SECRET is unset"
        )
    key = Keys(settings.key_prefix).pseudonym_secret
    if create:
        client.set(key, secrets.token_urlsafe(48), nx=True)
    stored = client.get(key)
    if stored is None and not create:
        raise NoPseudonymSecret(
            f"no pseudonym secret at {key!r}: no process of this deployment has run against this Redis with "
            "this key prefix (check REDIS_URL and AGENT_SIGNAL_KEY_PREFIX, or set AGENT_SIGNAL_PSEUDONYM_SECRET)"
        )
    text = stored.decode("utf-8") if isinstance(stored, bytes) else stored
    if not isinstance(text, str) or len(text) < MIN_PSEUDONYM_SECRET_CHARS:
        raise ValueError(f"the stored pseudonym secret ({key}) is missing or too short")
    return Pseudonyms(text.encode("utf-8"))
