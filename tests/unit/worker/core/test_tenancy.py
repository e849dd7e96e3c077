"""Tenant names: the pattern, checked whole (a trailing newline is not a tenant), and remembered per name."""

from __future__ import annotations

import pytest

from worker.core.tenancy import BadTenant, check_tenant, scope_ref, split_scope_ref


@pytest.mark.parametrize("tenant", ["default", "acme", "t_2", "a-b", "0" * 63])
def test_a_good_tenant_passes_every_time(tenant: str) -> None:
    assert check_tenant(tenant) == tenant
    assert check_tenant(tenant) == tenant  # the remembered answer is the same


@pytest.mark.parametrize("tenant", ["acme\n", "Acme", "-acme", "", "a/b", "0" * 64, "a b", "é"])
def test_a_bad_tenant_is_refused_every_time(tenant: str) -> None:
    for _ in range(2):
        with pytest.raises(BadTenant, match="tenant must match"):
            check_tenant(tenant)


def test_a_scope_ref_with_a_bad_tenant_is_refused() -> None:
    assert split_scope_ref(scope_ref("acme", "topic:a/b")) == ("acme", "topic:a/b")
    with pytest.raises(BadTenant):
        split_scope_ref("acme\n/topic:a")
