"""worker/core without a server: dedupe keys, scope keys, retry backoff, the source-type policy."""
