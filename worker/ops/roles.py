"""The roles an API key can hold: what ``CredentialStore.create`` accepts, what the CLI's ``keys create --role``
offers and what the door's guard maps to grants (producers/http/access/principal.py; a user token's role,
``user``, is made by the door, never stored on a key). Its own module so the CLI builds its parser without the
credential store's imports."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ROLES", "KeyRole"]

KeyRole = Literal["ingest", "read", "operate", "admin", "metrics"]  # metrics: the operations surfaces only
ROLES: tuple[KeyRole, ...] = get_args(KeyRole)
