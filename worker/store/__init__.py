"""State in Redis: the client, the Lua scripts, the event store (enqueue, commit, reads), receipts, quotas, store safety."""
