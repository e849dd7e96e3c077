"""The event model's vocabulary, no I/O: nodes, ids, errors, tenants, scope keys, dedupe and idempotency keys, retry backoff, source types."""
