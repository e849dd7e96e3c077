"""One tenant cannot make a web process refuse every other tenant's bodies (contract §Trust: limits are per tenant,
not only per credential; other tenants are unaffected).

Before: the bytes of request bodies a process holds were bounded in all and per credential only, and every user
token is a credential of its own, so one tenant's two tokens each holding half of
``AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT`` (declared bodies they never send) held all of it, and every other
tenant's 100-byte event was a ``503 busy``. Now a tenant's credentials and user tokens together hold at most half
(producers/http/door.py ``BodyBytes.per_tenant``): past it ``429 rate_limited`` with ``Retry-After``, and the other
half stays for the other tenants. A real web process, raw HTTP/1.1 over sockets.
"""

from __future__ import annotations

import json
import select
from collections.abc import Callable
from typing import Any

import pytest

from producers.http.door import BodyBytes
from tests.conftest import Proc, SettingsFactory, wait_for
from tests.security.door.test_body_bytes import Held, post
from worker.settings import Settings

BOOT = "bootstrap-key-for-tenant-body-bytes-0123456789"
WebFactory = Callable[[Settings], tuple[Proc, str]]
EVENT = {"sourceType": "agent.user.message", "sourceId": "msg_tenant_bytes_1", "payload": {"topicId": "t"}}
Answer = tuple[int, dict[str, Any], str | None]


class TestTheBudget:
    def test_a_tenants_credentials_together_hold_at_most_half(self) -> None:
        """Two credentials of one tenant, each within its own half, are refused past their tenant's half with a
        429 naming the tenant's share and the setting; another tenant still has its half."""
        budget = BodyBytes(budget=1000)
        assert budget.take("a1", 300, tenant="A") is None and budget.take("a2", 200, tenant="A") is None
        refusal = budget.take("a2", 1, tenant="A")  # a2 holds 200 of its 500; tenant A 500 of its 500
        assert refusal is not None and (refusal.status, refusal.code) == (429, "rate_limited")
        assert refusal.retry_after_s == 1
        assert "this tenant's" in refusal.message and "(500)" in refusal.message
        assert "AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT" in refusal.message
        assert budget.take("b1", 500, tenant="B") is None  # the other half is another tenant's
        assert (budget.held(), budget.held(tenant="A"), budget.held(tenant="B")) == (1000, 500, 500)
        assert budget.held("a2") == 200

    def test_given_back_bytes_free_the_tenants_share_and_forget_it(self) -> None:
        """Bytes given back free the tenant's share, and a tenant that holds nothing is not remembered."""
        budget = BodyBytes(budget=1000)
        assert budget.take("a1", 500, tenant="A") is None
        budget.give_back("a1", 500, tenant="A")
        assert budget.take("a2", 500, tenant="A") is None
        budget.give_back("a2", 500, tenant="A")
        assert budget.held() == 0 and not budget._tenants and not budget._credentials


def _probe(url: str, bearer: str, size: int) -> Answer:
    """A body of ``size`` bytes that is no JSON: 422 when it is read (nothing is stored), else the refusal."""
    return post(url, bearer, b"[" * size)


def _refused_for_the_tenant(answer: Answer, share: int) -> bool:
    status, body, retry_after = answer
    error = body.get("error", {})
    return (status, error.get("code"), retry_after) == (429, "rate_limited", "1") and all(
        part in error.get("message", "")
        for part in ("this tenant's", f"({share})", "AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT")
    )


def _credential(url: str, path: str, bearer: str, fields: dict[str, Any], secret: str) -> str:
    status, body, _ = post(url, bearer, json.dumps(fields).encode(), path=path)
    assert status in (200, 201), body
    return str(body[secret])


@pytest.mark.integration
def test_two_user_tokens_of_one_tenant_leave_the_other_half_to_other_tenants(
    make_settings: SettingsFactory, start_web: WebFactory
) -> None:
    """The repro: tenant A's first user token holds a body of its tenant's whole share (declared, never sent);
    its second token is refused 429 (its own credential's half is empty: the tenant's is full), so A cannot take
    the process's other half, and tenant B's small event is 202 and its largest body is read meanwhile."""
    settings = make_settings(
        bootstrap_key=BOOT, max_request_bytes=100_000, max_body_bytes_in_flight=200_000, body_timeout_s=120
    )
    _, url = start_web(settings)
    share = 100_000  # half of AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT
    operate_a = _credential(url, "/v1/keys", BOOT, {"tenant": "t-bytes-a", "role": "operate"}, "key")
    token_1, token_2 = (
        _credential(url, "/v1/tokens", operate_a, {"userId": user}, "token") for user in ("u1", "u2")
    )
    key_b = _credential(url, "/v1/keys", BOOT, {"tenant": "t-bytes-b", "role": "ingest"}, "key")
    held = Held(url, token_1, declared=share, sent=10)  # counted whole at the route's first read
    try:
        wait_for(
            lambda: held.ensure() and _refused_for_the_tenant(_probe(url, token_2, 1_000), share),
            timeout_s=30,
            what="429 for the second token past its tenant's share",
        )
        # the second token tries to hold the other half too: answered at once, it holds nothing
        grab = Held(url, token_2, declared=share, sent=10)
        try:
            readable, _, _ = select.select([grab.sock], [], [], 30)
            assert readable and grab.sock.recv(65536).startswith(b"HTTP/1.1 429 ")
        finally:
            grab.close()
        assert post(url, key_b, json.dumps(EVENT).encode())[0] == 202
        assert _probe(url, key_b, share)[0] == 422  # B's largest body is read (no JSON: nothing stored)
        assert held.ensure()  # A's share was held throughout: its request still waits for its body
    finally:
        held.close()
