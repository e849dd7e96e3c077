"""External effects through the outbox: exactly-once delivery under faults, and the relay's claims."""
