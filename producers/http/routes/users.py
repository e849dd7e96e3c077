"""``DELETE /v1/users/{userId}``: erase everything the caller's tenant stores about one user (worker/ops/erasure.py).

As the erasure starts, every token of the user issued before it is refused (worker/ops/credentials.py,
``end_user_tokens``) and the user's open streams end (``: user erased``): a token that erases its own user does
nothing more on this web process from then on, nor on the other replicas once their cached floors are refreshed
(within ``AGENT_SIGNAL_AUTH_CACHE_S``), so one end user cannot loop "erase myself, send again" to start their share
of the tenant's events over, nor write behind the erasure with it past that window. One erasure runs at a time per
tenant: another meanwhile is 429 ``rate_limited`` with ``Retry-After``. erase_user takes that lock, after the tokens
have ended; so that a refused erasure does not end them, a lock seen held is answered 429 before they end (only an
erasure of the tenant that starts between that look and the lock ends them without running)."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis import Redis

from producers.http.access.auth import credentials_of
from producers.http.access.principal import Principal, check_user, require, tenant_keys
from producers.http.api_models import API_ERRORS
from producers.http.web_common import error_response, producer_of
from sessions.store import session_scope
from worker.core.ids import StoredUserId
from worker.keys.layout import Keys
from worker.ops.erasure import ErasureRunning, erase_user
from worker.store.receipts import ERASED

__all__ = ["router"]

router = APIRouter(responses=API_ERRORS, tags=["users"])


class Erasure(BaseModel):
    userId: str
    removed: dict[str, int] = Field(description="How many of each kind of record were erased.")
    busyScopes: int = Field(
        description="Scopes with an event running now, left for the next call (call again)."
    )


@router.delete("/v1/users/{user_id:path}", response_model=Erasure)
def delete_user(
    user_id: StoredUserId,
    request: Request,
    principal: Annotated[Principal, Depends(require("operate", users=True))],
) -> JSONResponse:
    """Erase the user (idempotent): ``{"userId", "removed": {kind: n}, "busyScopes": n}``. A scope with an
    event running right now is left for the next call (``busyScopes`` > 0: call again); the answer is 200
    either way. A user token may erase its own user only, and is refused from the erasure's start on (as is every
    token of the user issued before it: by this web process at once, by the others within
    ``AGENT_SIGNAL_AUTH_CACHE_S``), even when ``busyScopes`` > 0: the app calls again with an operate key or a new
    token. While another erasure of the tenant runs: 429 ``rate_limited`` with ``Retry-After``, and the
    asking token stays valid."""
    check_user(principal, user_id, "user")
    producer = producer_of(request)
    keys = tenant_keys(request)
    client = producer.store.client
    try:
        _refuse_while_running(client, keys)
        credentials_of(request).end_user_tokens(principal.tenant, user_id)  # first: nothing writes behind us
        client.publish(keys.receipts_feed(user_id), ERASED)  # the old tokens' streams say why they end
        report = erase_user(
            producer.store,
            keys,
            user_id,
            session_scope=session_scope,
            erasers=producer.erasers,
            actor=principal.actor,
        )
    except ErasureRunning as exc:
        response = error_response(429, "rate_limited", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    client.publish(keys.receipts_feed(user_id), ERASED)  # and so do the streams opened meanwhile
    return JSONResponse(report.to_json_dict())


def _refuse_while_running(client: Redis, keys: Keys) -> None:
    """Raise :class:`ErasureRunning` when the tenant's erasure lock is held now (a look, not the lock: erase_user
    takes it), so a refused erasure does not end the user's tokens."""
    left_ms = int(client.pttl(keys.erasure_lock))
    if left_ms != -2:  # -2: no lock
        raise ErasureRunning(max(1, math.ceil(left_ms / 1000)))
