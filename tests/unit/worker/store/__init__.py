"""worker/store: the Lua scripts as files, receipts, a full store, the store-safety decision."""
