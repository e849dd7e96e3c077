"""Tenants apart: isolation, derived ids, per-tenant and per-user limits and quotas, receipt streams."""
