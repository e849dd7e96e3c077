"""The rules that decide: scope keys, dedupe, source types, leases, idempotency, retry, handler bundles."""
