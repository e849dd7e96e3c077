"""worker/outbox without Redis."""
