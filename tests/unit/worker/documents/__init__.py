"""worker/documents: the stored forms of chains, event bodies and idempotency lanes."""
